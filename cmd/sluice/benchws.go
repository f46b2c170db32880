package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/sluicehq/sluice/internal/benchws"
)

// benchWS runs `sluice bench-ws`: the gateway's load generator. Its
// --slow phase runs this command again, with the same flags, for the
// attacking process (benchws.Config.Self).
func benchWS(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := parseBenchWS(args, stdout, stderr)
	if err != nil {
		return err
	}
	return benchws.Run(ctx, c, stdout)
}

func parseBenchWS(args []string, stdout, stderr io.Writer) (benchws.Config, error) {
	c := benchws.Config{Self: append([]string{"bench-ws"}, args...)}
	fs := flag.NewFlagSet("sluice bench-ws", flag.ContinueOnError)
	fs.StringVar(&c.URL, "url", "http://127.0.0.1:8080", "the sluice server, on loopback; several, comma-separated, for nodes sharing a store: connections go to each in turn")
	fs.IntVar(&c.Idle, "idle", 10_000, "idle connections to open, to measure memory per connection and connects per second")
	fs.IntVar(&c.Conns, "conns", 1_000, "connections sending messages, one session each")
	fs.IntVar(&c.Rate, "rate", 1_000, "messages per second across the sending connections")
	fs.DurationVar(&c.Duration, "duration", 10*time.Second, "how long to send (at most 10m)")
	fs.IntVar(&c.Fanout, "fanout", 100, "connections of one session that each message of its sender reaches, for the fan-out's latency (0: skip)")
	fs.IntVar(&c.Burst, "burst", 1_000, fmt.Sprintf("frames one sender sends back to back to a session of %d readers (0: skip)", benchws.BurstReaders))
	fs.StringVar(&c.APIKey, "api-key", "", "admin key, if the server requires one")
	fs.StringVar(&c.StoreMetrics, "store-metrics", "", "the /metrics `URL` of a `sluice dynamodb count-proxy` in front of the nodes' store, on loopback: each phase then prints the store requests it made across all nodes (per connect, per message), and the idle connections' cost is measured over --idle-window")
	fs.DurationVar(&c.IdleWindow, "idle-window", 30*time.Second, "with --store-metrics, how long the idle connections' store requests are counted once they are up; cover several of the servers' --ws-renew periods (10s by default), or the figure is a period's phase, not its rate")
	fs.IntVar(&c.Slow, "slow", 0, "sessions of another tenant, each with a member that never reads (dialled again when dropped) and a sender of --slow-frame frames, run from a second bench-ws process, while a victim tenant's pooled round trip is measured alone and beside them (0: skip)")
	fs.IntVar(&c.SlowFrame, "slow-frame", 32<<10, "`bytes` of data in each frame the --slow senders send")
	fs.IntVar(&c.SlowRate, "slow-rate", 0, "frames a second each --slow sender sends (0: back to back)")
	fs.StringVar(&c.SlowQueue, "slow-queue", "pooled", "the queue of the --slow senders' frames: pooled (the victim's) or silo")
	fs.BoolVar(&c.SlowDeaf, "slow-deaf", true, "give each --slow session a member that never reads; false: the senders' load alone, for comparison")
	fs.DurationVar(&c.SlowFor, "slow-duration", 10*time.Second, "how long the victim's round trips are measured, alone and beside the --slow attack (at most 5m)")
	return c, parseFlags(fs, args, stdout, stderr)
}
