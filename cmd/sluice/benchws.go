package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// benchWSConfig is the configuration of `sluice bench-ws`.
type benchWSConfig struct {
	URL      string
	Idle     int
	Conns    int
	Rate     int
	Duration time.Duration
	Fanout   int
	Burst    int
	APIKey   string
	// The Slow fields: the slow-reader phase (wsBench.hostage), an
	// attack beside a victim tenant's pooled messages.
	Slow      int
	SlowFrame int
	SlowRate  int
	SlowQueue string
	SlowFor   time.Duration
	SlowDeaf  bool
}

// burstReaders is how many connections of the burst's session read it.
const burstReaders = 10

func parseBenchWS(args []string, stdout, stderr io.Writer) (benchWSConfig, error) {
	var c benchWSConfig
	fs := flag.NewFlagSet("sluice bench-ws", flag.ContinueOnError)
	fs.StringVar(&c.URL, "url", "http://127.0.0.1:8080", "the sluice server, on loopback; several, comma-separated, for nodes sharing a store: connections go to each in turn")
	fs.IntVar(&c.Idle, "idle", 10_000, "idle connections to open, to measure memory per connection and connects per second")
	fs.IntVar(&c.Conns, "conns", 1_000, "connections sending messages, one session each")
	fs.IntVar(&c.Rate, "rate", 1_000, "messages per second across the sending connections")
	fs.DurationVar(&c.Duration, "duration", 10*time.Second, "how long to send (at most 10m)")
	fs.IntVar(&c.Fanout, "fanout", 100, "connections of one session that each message of its sender reaches, for the fan-out's latency (0: skip)")
	fs.IntVar(&c.Burst, "burst", 1_000, fmt.Sprintf("frames one sender sends back to back to a session of %d readers (0: skip)", burstReaders))
	fs.StringVar(&c.APIKey, "api-key", "", "admin key, if the server requires one")
	fs.IntVar(&c.Slow, "slow", 0, "sessions of another tenant, each with a member that never reads (dialled again when dropped) and a sender of --slow-frame frames, run from a second bench-ws process, while a victim tenant's pooled round trip is measured alone and beside them (0: skip)")
	fs.IntVar(&c.SlowFrame, "slow-frame", 32<<10, "`bytes` of data in each frame the --slow senders send")
	fs.IntVar(&c.SlowRate, "slow-rate", 0, "frames a second each --slow sender sends (0: back to back)")
	fs.StringVar(&c.SlowQueue, "slow-queue", "pooled", "the queue of the --slow senders' frames: pooled (the victim's) or silo")
	fs.BoolVar(&c.SlowDeaf, "slow-deaf", true, "give each --slow session a member that never reads; false: the senders' load alone, for comparison")
	fs.DurationVar(&c.SlowFor, "slow-duration", 10*time.Second, "how long the victim's round trips are measured, alone and beside the --slow attack (at most 5m)")
	if err := parseFlags(fs, args, stdout, stderr); err != nil {
		return c, err
	}
	for _, one := range strings.Split(c.URL, ",") {
		u, err := url.Parse(one)
		switch {
		case err != nil || u.Host == "":
			return c, fmt.Errorf("bench-ws: --url %q is not a URL", one)
		case !loopback(hostPort(u)):
			return c, fmt.Errorf("bench-ws: --url %q is not on loopback: load is only ever sent to 127.0.0.1 or ::1", one)
		}
	}
	switch {
	case c.Idle < 0 || c.Idle > 50_000 || c.Conns < 1 || c.Conns > 10_000:
		return c, errors.New("bench-ws: --idle must be 0 to 50000 and --conns 1 to 10000")
	case c.Rate < 1 || c.Rate > 100_000:
		return c, errors.New("bench-ws: --rate must be 1 to 100000")
	case c.Duration <= 0 || c.Duration > 10*time.Minute:
		return c, errors.New("bench-ws: --duration must be in (0, 10m]")
	case c.Fanout < 0 || c.Fanout > 1_000:
		return c, errors.New("bench-ws: --fanout must be 0 to 1000")
	case c.Burst < 0 || c.Burst > 100_000:
		return c, errors.New("bench-ws: --burst must be 0 to 100000")
	case c.Slow < 0 || c.Slow > 100 || c.SlowFrame < 1 || c.SlowFrame > 120<<10 || c.SlowRate < 0 || c.SlowRate > 10_000:
		return c, errors.New("bench-ws: --slow must be 0 to 100, --slow-frame 1 to 122880 and --slow-rate 0 to 10000")
	case c.SlowFor < 100*time.Millisecond || c.SlowFor > 5*time.Minute:
		return c, errors.New("bench-ws: --slow-duration must be in [100ms, 5m]")
	case c.SlowQueue != "pooled" && c.SlowQueue != "silo":
		return c, errors.New("bench-ws: --slow-queue must be pooled or silo")
	}
	return c, nil
}

// wsBench is one run of bench-ws: the nodes, and what the phases share.
type wsBench struct {
	ctx   context.Context
	c     benchWSConfig
	args  []string // bench-ws's own, for the attacking process of --slow
	out   io.Writer
	bases []string // the nodes' base URLs
	hc    *http.Client

	dials       atomic.Int64 // connects made, for the nodes' turns
	unavailable atomic.Int64 // connects answered 503 and made again
}

// The bench's one tenant holds every connection: a big tenant, counted on
// each node in one lease.
const benchTenant = "bench-ws"

// benchWS measures the gateway: memory per idle connection and connects
// per second; echo round trips, ordering and, on DynamoDB, store requests
// per message under a message rate; a fan-out's latency to the
// connections of one session, on the sender's node and on others; and a
// burst to one session, which must drop no reader that reads.
func benchWS(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := parseBenchWS(args, stdout, stderr)
	if err != nil {
		return err
	}
	b := &wsBench{ctx: ctx, c: c, args: args, out: stdout, hc: &http.Client{Timeout: 30 * time.Second}}
	for _, one := range strings.Split(c.URL, ",") {
		b.bases = append(b.bases, strings.TrimRight(one, "/"))
	}
	if spec := os.Getenv(attackEnv); spec != "" {
		return b.attackFrom(spec, os.Stdin)
	}
	perSession := max(10, c.Fanout+1, burstReaders+1)
	body := fmt.Sprintf(`{"id":%q,"settings":{"tenantConnections":%d,"connectionsPerSession":%d,"tenantPerMinute":1000000000,"sessionPerMinute":1000000,"sessionTTL":3600,"messagesPerMinute":1000000000}}`,
		benchTenant, c.Idle+c.Conns+c.Fanout+burstReaders+102, perSession)
	if _, err := b.call("POST", "/v1/tenants", body); err != nil {
		return err
	}
	idle, err := b.idle()
	defer func() {
		for _, ws := range idle {
			ws.CloseNow()
		}
	}()
	if err != nil {
		return err
	}
	if err := b.echo(); err != nil {
		return err
	}
	if c.Fanout > 0 {
		if err := b.fanout(); err != nil {
			return err
		}
	}
	if c.Burst > 0 {
		if err := b.burst(); err != nil {
			return err
		}
	}
	if c.Slow > 0 {
		return b.hostage()
	}
	return nil
}

// call makes one call of the HTTP API on the first node; a 409 (the
// tenant is there from an earlier run) is not an error.
func (b *wsBench) call(method, path, body string) (map[string]any, error) {
	req, _ := http.NewRequestWithContext(b.ctx, method, b.bases[0]+path, strings.NewReader(body))
	if b.c.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+b.c.APIKey)
	}
	resp, err := b.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out map[string]any
	json.NewDecoder(resp.Body).Decode(&out)
	if resp.StatusCode >= 300 && resp.StatusCode != http.StatusConflict {
		return out, fmt.Errorf("%s %s: %s %v", method, path, resp.Status, out)
	}
	return out, nil
}

// session makes a session of the tenant and returns the query that
// connects to it.
func (b *wsBench) session() (string, error) {
	return b.sessionOf(benchTenant)
}

// sessionOf makes a session of tenant and returns the query that connects
// to it.
func (b *wsBench) sessionOf(tenant string) (string, error) {
	out, err := b.call("PUT", "/v1/tenants/"+tenant+"/sessions", "")
	if err != nil {
		return "", err
	}
	id, _ := out["id"].(string)
	return tenant + "&session=" + url.QueryEscape(id), nil
}

// dial connects to session s on node (an index of b.bases; -1: the nodes
// in turn). A connect refused as unavailable (503: the store did not
// answer in time; nothing was counted) is made again after its
// Retry-After, as a client should, a few times; a 429 below the limit is
// a failure of the bench.
func (b *wsBench) dial(s string, node int) (*websocket.Conn, error) {
	ws, _, err := b.dialID(s, node)
	return ws, err
}

// dialID is dial, returning the connection's id too.
func (b *wsBench) dialID(s string, node int) (*websocket.Conn, string, error) {
	dctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	if node < 0 {
		node = int(b.dials.Add(1)) % len(b.bases)
	}
	u := "ws" + strings.TrimPrefix(b.bases[node], "http") + "/v1/ws?tenant=" + s
	for try := 1; ; try++ {
		ws, resp, err := websocket.Dial(dctx, u, &websocket.DialOptions{HTTPClient: &http.Client{}})
		if err == nil {
			ws.SetReadLimit(1 << 20)
		}
		if err == nil {
			return ws, resp.Header.Get("Sluice-Connection"), nil
		}
		if resp == nil || resp.StatusCode != http.StatusServiceUnavailable || try == 10 {
			return nil, "", err
		}
		b.unavailable.Add(1)
		wait := time.Second
		if n, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
			wait = time.Duration(n) * time.Second
		}
		select {
		case <-time.After(wait):
		case <-dctx.Done():
			return nil, "", err
		}
	}
}

// dialMany opens n connections, 64 at a time: connection i to the session
// sessionOf(i) on node nodeOf(i).
func (b *wsBench) dialMany(n int, sessionOf func(int) string, nodeOf func(int) int) ([]*websocket.Conn, error) {
	conns := make([]*websocket.Conn, n)
	var failed atomic.Value
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for i := range n {
		if failed.Load() != nil {
			break
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			ws, err := b.dial(sessionOf(i), nodeOf(i))
			if err != nil {
				failed.CompareAndSwap(nil, err)
				return
			}
			conns[i] = ws
		})
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		opened := slices.DeleteFunc(conns, func(ws *websocket.Conn) bool { return ws == nil })
		return opened, fmt.Errorf("%d of %d connections: %w", len(opened), n, err)
	}
	return conns, nil
}

// metric sums a metric's series (every label set) over the nodes.
func (b *wsBench) metric(name string) (float64, bool) {
	sum, found := 0.0, false
	for _, base := range b.bases {
		req, _ := http.NewRequestWithContext(b.ctx, http.MethodGet, base+"/metrics", nil)
		resp, err := b.hc.Do(req)
		if err != nil {
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, line := range strings.Split(string(body), "\n") {
			rest, ok := strings.CutPrefix(line, name)
			if !ok || (rest == "" || (rest[0] != ' ' && rest[0] != '{')) {
				continue
			}
			var v float64
			if _, err := fmt.Sscan(rest[strings.LastIndexByte(rest, ' ')+1:], &v); err == nil {
				sum, found = sum+v, true
			}
		}
	}
	return sum, found
}

// idle opens c.Idle connections, ten per session, over the nodes in turn:
// connects per second, and the nodes' memory per connection.
func (b *wsBench) idle() ([]*websocket.Conn, error) {
	rss0, _ := b.metric("process_resident_memory_bytes")
	start := time.Now()
	var sessions []string
	for i := 0; i < b.c.Idle; i += 10 {
		s, err := b.session()
		if err != nil {
			return nil, err
		}
		sessions = append(sessions, s)
	}
	sessStart := time.Now()
	idle, err := b.dialMany(b.c.Idle, func(i int) string { return sessions[i/10] }, func(int) int { return -1 })
	if err != nil {
		return idle, fmt.Errorf("bench-ws: idle: %w", err)
	}
	connectTime := time.Since(sessStart)
	time.Sleep(2 * time.Second) // let the server settle
	rss1, _ := b.metric("process_resident_memory_bytes")
	fmt.Fprintf(b.out, "idle: %d connections on %d node(s) in %v (sessions made in %v): %.0f connects/s admitted; %d connects answered 503 and made again\n",
		len(idle), len(b.bases), connectTime.Round(time.Millisecond), sessStart.Sub(start).Round(time.Millisecond), float64(len(idle))/connectTime.Seconds(), b.unavailable.Load())
	if rss0 > 0 && rss1 > rss0 && len(idle) > 0 {
		fmt.Fprintf(b.out, "server memory: %.1f MiB more, %.1f KiB per connection\n", (rss1-rss0)/(1<<20), (rss1-rss0)/1024/float64(len(idle)))
	}
	return idle, nil
}

// benchFrame is what the bench reads of a frame: its type, an error (a
// throttle), and the data the bench sent, with its sequence and send time.
type benchFrame struct {
	Type  string `json:"type"`
	Error string `json:"error"`
	Data  struct {
		Seq int64 `json:"seq"`
		At  int64 `json:"at"`
	} `json:"data"`
}

// readFrames reads ws's frames until it fails or ctx ends, giving each
// frame that decodes to each, and returns the read's error, or nil if ctx
// ended it.
func readFrames(ctx context.Context, ws *websocket.Conn, each func(benchFrame)) error {
	for {
		_, data, err := ws.Read(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		var m benchFrame
		if json.Unmarshal(data, &m) == nil {
			each(m)
		}
	}
}

// benchMessage is a message of sequence seq, stamped with the time now.
func benchMessage(seq int64) []byte {
	return fmt.Appendf(nil, `{"action":"pooled","data":{"seq":%d,"at":%d}}`, seq, time.Now().UnixNano())
}

// percentiles returns the median and the 99th percentile of ds, sorting it.
func percentiles(ds []time.Duration) (p50, p99 time.Duration) {
	slices.Sort(ds)
	if n := len(ds); n > 0 {
		p50, p99 = ds[n/2], ds[min(n-1, n*99/100)]
	}
	return p50, p99
}

// echo sends c.Rate messages a second over c.Conns connections, one
// session each, for c.Duration: the echo's round trip, its order, and
// the store requests per message if the nodes count them (DynamoDB).
func (b *wsBench) echo() error {
	c := b.c
	sessions := make([]string, c.Conns)
	for i := range sessions {
		s, err := b.session()
		if err != nil {
			return err
		}
		sessions[i] = s
	}
	conns, err := b.dialMany(c.Conns, func(i int) string { return sessions[i] }, func(int) int { return -1 })
	defer func() {
		for _, ws := range conns {
			ws.CloseNow()
		}
	}()
	if err != nil {
		return fmt.Errorf("bench-ws: echo: %w", err)
	}
	next := make([]atomic.Int64, c.Conns) // the sequence expected back, per connection
	var mu sync.Mutex
	var rtts []time.Duration
	var received, violations, throttled atomic.Int64
	rctx, stop := context.WithCancel(b.ctx)
	defer stop()
	var readers sync.WaitGroup
	for i, ws := range conns {
		readers.Go(func() {
			readFrames(rctx, ws, func(m benchFrame) {
				switch {
				case m.Error != "":
					throttled.Add(1)
				case m.Type == "echo":
					if m.Data.Seq != next[i].Load() {
						violations.Add(1)
					}
					next[i].Store(m.Data.Seq + 1)
					received.Add(1)
					d := time.Duration(time.Now().UnixNano() - m.Data.At)
					mu.Lock()
					rtts = append(rtts, d)
					mu.Unlock()
				}
			})
		})
	}
	requests0, counted := b.metric("sluice_dynamodb_requests_total")
	// Eight senders, each with its share of the connections and of the
	// rate, catching up on what is due rather than waiting for ticks.
	const workers = 8
	start := time.Now()
	deadline := start.Add(c.Duration)
	var sentAll atomic.Int64
	var writeErr atomic.Value
	var senders sync.WaitGroup
	for w := range min(workers, c.Conns) {
		senders.Go(func() {
			var mine []int // the connections this sender writes to
			for i := w; i < c.Conns; i += workers {
				mine = append(mine, i)
			}
			rate := float64(c.Rate) * float64(len(mine)) / float64(c.Conns)
			seqs := make([]int64, len(mine))
			for sent := 0; ; {
				now := time.Now()
				if now.After(deadline) || writeErr.Load() != nil {
					return
				}
				if due := int(now.Sub(start).Seconds() * rate); sent >= due {
					time.Sleep(time.Millisecond)
					continue
				}
				k := sent % len(mine)
				wctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
				err := conns[mine[k]].Write(wctx, websocket.MessageText, benchMessage(seqs[k]))
				cancel()
				if err != nil {
					writeErr.CompareAndSwap(nil, err)
					return
				}
				seqs[k]++
				sent++
				sentAll.Add(1)
			}
		})
	}
	senders.Wait()
	if err, _ := writeErr.Load().(error); err != nil {
		return fmt.Errorf("bench-ws: echo: write: %w", err)
	}
	sent := int(sentAll.Load())
	elapsed := time.Since(start)
	// The last echoes.
	for wait := time.Now().Add(5 * time.Second); received.Load()+throttled.Load() < int64(sent) && time.Now().Before(wait); {
		time.Sleep(10 * time.Millisecond)
	}
	requests1, _ := b.metric("sluice_dynamodb_requests_total")
	stop()
	readers.Wait()
	p50, p99 := percentiles(rtts)
	fmt.Fprintf(b.out, "echo: %d sent over %d connections in %v (%.0f/s, asked %d/s), %d echoed, %d throttled; round trip p50 %v p99 %v; ordering violations %d\n",
		sent, c.Conns, elapsed.Round(time.Millisecond), float64(sent)/elapsed.Seconds(), c.Rate, received.Load(), throttled.Load(), p50, p99, violations.Load())
	if counted && sent > 0 {
		fmt.Fprintf(b.out, "store: %.0f DynamoDB requests over the %d messages, %.3f per message, by %d node(s) (renewals of the idle connections included)\n",
			requests1-requests0, sent, (requests1-requests0)/float64(sent), len(b.bases))
	}
	return nil
}

// fanout connects c.Fanout members and a sender to one session, the
// members over the nodes in turn and the sender to the first, and sends
// 100 messages at 50 a second: the latency from the send to each
// member's copy, on the sender's node and on the others.
func (b *wsBench) fanout() error {
	const messages = 100
	n := b.c.Fanout
	s, err := b.session()
	if err != nil {
		return err
	}
	nodeOf := func(i int) int { return i % len(b.bases) }
	members, err := b.dialMany(n, func(int) string { return s }, nodeOf)
	defer func() {
		for _, ws := range members {
			ws.CloseNow()
		}
	}()
	if err != nil {
		return fmt.Errorf("bench-ws: fan-out: %w", err)
	}
	sender, err := b.dial(s, 0)
	if err != nil {
		return fmt.Errorf("bench-ws: fan-out: sender: %w", err)
	}
	defer sender.CloseNow()
	var mu sync.Mutex
	lat := make([][]time.Duration, 2) // [0]: on the sender's node; [1]: on others
	got := make([]atomic.Int64, n)
	rctx, stop := context.WithCancel(b.ctx)
	defer stop()
	var readers sync.WaitGroup
	readers.Go(func() { readFrames(rctx, sender, func(benchFrame) {}) }) // the sender's echoes, let go
	for i, ws := range members {
		readers.Go(func() {
			readFrames(rctx, ws, func(m benchFrame) {
				if m.Type != "message" {
					return
				}
				d := time.Duration(time.Now().UnixNano() - m.Data.At)
				where := min(nodeOf(i), 1)
				mu.Lock()
				lat[where] = append(lat[where], d)
				mu.Unlock()
				got[i].Add(1)
			})
		})
	}
	tick := time.NewTicker(20 * time.Millisecond)
	for seq := range int64(messages) {
		<-tick.C
		wctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
		err := sender.Write(wctx, websocket.MessageText, benchMessage(seq))
		cancel()
		if err != nil {
			tick.Stop()
			return fmt.Errorf("bench-ws: fan-out: write: %w", err)
		}
	}
	tick.Stop()
	all := func() bool {
		for i := range got {
			if got[i].Load() < messages {
				return false
			}
		}
		return true
	}
	for wait := time.Now().Add(30 * time.Second); !all() && time.Now().Before(wait); {
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	readers.Wait()
	delivered := 0
	for i := range got {
		delivered += int(got[i].Load())
	}
	local, remote := lat[0], lat[1]
	lp50, lp99 := percentiles(local)
	fmt.Fprintf(b.out, "fan-out: %d messages to %d connections of one session: %d of %d delivered; on the sender's node (%d copies) p50 %v p99 %v",
		messages, n, delivered, messages*n, len(local), lp50, lp99)
	if len(b.bases) > 1 {
		rp50, rp99 := percentiles(remote)
		fmt.Fprintf(b.out, "; on other nodes (%d copies) p50 %v p99 %v", len(remote), rp50, rp99)
	}
	fmt.Fprintln(b.out)
	return nil
}

// burst connects burstReaders readers and a sender to one session on the
// first node; the sender sends c.Burst frames back to back while every
// reader reads: no reader may be dropped, and each gets every frame.
func (b *wsBench) burst() error {
	n := b.c.Burst
	s, err := b.session()
	if err != nil {
		return err
	}
	conns, err := b.dialMany(burstReaders+1, func(int) string { return s }, func(int) int { return 0 })
	defer func() {
		for _, ws := range conns {
			ws.CloseNow()
		}
	}()
	if err != nil {
		return fmt.Errorf("bench-ws: burst: %w", err)
	}
	sender, readers := conns[burstReaders], conns[:burstReaders]
	got := make([]atomic.Int64, burstReaders)
	var dropped, echoed, throttled atomic.Int64
	var closes sync.Map // close codes of dropped readers
	rctx, stop := context.WithCancel(b.ctx)
	defer stop()
	var wg sync.WaitGroup
	for i, ws := range readers {
		wg.Go(func() {
			err := readFrames(rctx, ws, func(m benchFrame) {
				if m.Type == "message" {
					got[i].Add(1)
				}
			})
			if err != nil {
				dropped.Add(1)
				closes.Store(websocket.CloseStatus(err), true)
			}
		})
	}
	var senderErr atomic.Value
	wg.Go(func() {
		err := readFrames(rctx, sender, func(m benchFrame) {
			switch {
			case m.Error != "":
				throttled.Add(1)
			case m.Type == "echo":
				echoed.Add(1)
			}
		})
		if err != nil {
			senderErr.Store(err)
		}
	})
	start := time.Now()
	for seq := range int64(n) {
		wctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
		err := sender.Write(wctx, websocket.MessageText, benchMessage(seq))
		cancel()
		if err != nil {
			stop()
			wg.Wait()
			return fmt.Errorf("bench-ws: burst: write %d: %w", seq, err)
		}
	}
	sentIn := time.Since(start)
	done := func() bool {
		for i := range got {
			if got[i].Load() < int64(n) && dropped.Load() == 0 {
				return false
			}
		}
		return echoed.Load()+throttled.Load() >= int64(n) || senderErr.Load() != nil
	}
	for wait := time.Now().Add(60 * time.Second); !done() && time.Now().Before(wait); {
		time.Sleep(10 * time.Millisecond)
	}
	took := time.Since(start)
	stop()
	wg.Wait()
	least := int64(n)
	for i := range got {
		least = min(least, got[i].Load())
	}
	var codes []string
	closes.Range(func(k, _ any) bool { codes = append(codes, fmt.Sprint(k)); return true })
	fmt.Fprintf(b.out, "burst: %d frames back to back (sent in %v) to a session of %d readers: %d readers dropped %v; the least any reader got %d of %d, all in %v; sender: %d echoed, %d throttled, still connected %v\n",
		n, sentIn.Round(time.Millisecond), burstReaders, dropped.Load(), codes, least, n, took.Round(time.Millisecond), echoed.Load(), throttled.Load(), senderErr.Load() == nil)
	if dropped.Load() > 0 || senderErr.Load() != nil {
		return fmt.Errorf("bench-ws: burst: %d readers dropped; sender: %v", dropped.Load(), senderErr.Load())
	}
	return nil
}

// The tenants of the slow-reader phase: the attacker, whose members never
// read, and the victim, whose pooled messages share the queue's workers.
const (
	slowTenant   = "bench-ws-slow"
	victimTenant = "bench-ws-victim"
)

// hostage measures whether one tenant's clients that never read hold
// another tenant's pooled messages. A victim tenant's one connection
// sends pooled messages at 100 a second for c.SlowFor, and their round
// trips are measured alone, then, after 2 seconds of it, while c.Slow
// sessions of another tenant each hold a member that never reads
// (dialled again as soon as the server drops it) and a sender of
// c.SlowFrame-byte frames (back to back, or c.SlowRate a second), which
// reads its echoes, from a process of its own (startAttack). All on the
// first node.
func (b *wsBench) hostage() error {
	c := b.c
	for _, t := range []struct {
		id            string
		conns, perSes int
	}{{victimTenant, 10, 10}, {slowTenant, 8*c.Slow + 20, 20}} {
		body := fmt.Sprintf(`{"id":%q,"settings":{"tenantConnections":%d,"connectionsPerSession":%d,"tenantPerMinute":1000000000,"sessionPerMinute":1000000000,"sessionTTL":3600,"messagesPerMinute":1000000000}}`, t.id, t.conns, t.perSes)
		if _, err := b.call("POST", "/v1/tenants", body); err != nil {
			return err
		}
	}
	s, err := b.sessionOf(victimTenant)
	if err != nil {
		return err
	}
	ws, err := b.dial(s, 0)
	if err != nil {
		return fmt.Errorf("bench-ws: slow: victim: %w", err)
	}
	defer ws.CloseNow()
	messages := int(c.SlowFor / (10 * time.Millisecond))
	v := &victim{ws: ws, rtts: make([]time.Duration, 2*messages)}
	vctx, vstop := context.WithCancel(b.ctx)
	var reader sync.WaitGroup
	reader.Go(func() { readFrames(vctx, ws, v.echo) })
	defer reader.Wait()
	defer vstop()
	alone, err := v.round(b.ctx, 0, messages)
	if err != nil {
		return err
	}
	// The attack's clients run in a process of their own, as another
	// tenant's clients run on machines of their own: in this one they
	// would share the victim's Go scheduler, and the victim's round trips
	// would measure the bench's own goroutines as much as the server.
	var attackers []string
	for range c.Slow {
		s, err := b.sessionOf(slowTenant)
		if err != nil {
			return err
		}
		attackers = append(attackers, s)
	}
	att, err := b.startAttack(attackers)
	if err != nil {
		return err
	}
	time.Sleep(2 * time.Second) // the attack under way: the socket buffers of the members that never read fill
	beside, err := v.round(b.ctx, messages, messages)
	tally, aerr := att.stop()
	if err != nil {
		return err
	}
	if aerr != nil {
		return fmt.Errorf("bench-ws: slow: the attack: %w", aerr)
	}
	deaf := "members that never read"
	if !c.SlowDeaf {
		deaf = "no member that never reads"
	}
	rate := "back to back"
	if c.SlowRate > 0 {
		rate = fmt.Sprintf("%d/s each", c.SlowRate)
	}
	a50, a99 := percentiles(alone)
	v50, v99 := percentiles(beside)
	fmt.Fprintf(b.out, "slow readers: a victim tenant's pooled round trip, %d messages at 100/s each time: alone p50 %v p99 %v max %v; beside %d sessions of another tenant, %s, senders of %d-byte frames (%s, %s): p50 %v p99 %v max %v (p99 %.1fx alone); %d of %d echoes back; the attack: %d frames sent, %d members that never read dialled, %d of them dropped by the server\n",
		messages, a50, a99, alone[len(alone)-1], c.Slow, deaf, c.SlowFrame, c.SlowQueue, rate, v50, v99, beside[len(beside)-1], float64(v99)/float64(max(a99, 1)), len(beside), messages, tally.Sent, tally.Dialled, tally.Dropped)
	return nil
}

// attackEnv names the environment variable that makes bench-ws the
// attacking process of --slow: its value is the attacking sessions, in
// JSON; the process attacks until its stdin closes, then prints its tally.
const attackEnv = "SLUICE_BENCH_WS_ATTACK"

// attackTally is what the attacking process did.
type attackTally struct {
	Sent, Dialled, Dropped int64
	Err                    string `json:",omitempty"`
}

// attack is the attacking process, started by startAttack.
type attack struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   bytes.Buffer
}

// startAttack runs this binary again, as bench-ws with the same flags, to
// attack from sessions (attackSession each).
func (b *wsBench) startAttack(sessions []string) (*attack, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("bench-ws: slow: %w", err)
	}
	spec, _ := json.Marshal(sessions)
	a := &attack{cmd: exec.Command(exe, append([]string{"bench-ws"}, b.args...)...)}
	a.cmd.Env = append(os.Environ(), attackEnv+"="+string(spec))
	a.cmd.Stdout, a.cmd.Stderr = &a.out, os.Stderr
	if a.stdin, err = a.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if err := a.cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench-ws: slow: the attacking process: %w", err)
	}
	return a, nil
}

// stop ends the attack and returns its tally.
func (a *attack) stop() (attackTally, error) {
	a.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- a.cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		a.cmd.Process.Kill()
		<-done
		return attackTally{}, errors.New("the attacking process did not end within 30s of being told to")
	}
	var t attackTally
	if jerr := json.Unmarshal(a.out.Bytes(), &t); jerr != nil {
		return t, fmt.Errorf("the attacking process: %v, %v: %q", err, jerr, a.out.String())
	}
	if t.Err != "" {
		return t, errors.New(t.Err)
	}
	return t, err
}

// attackFrom is the attacking process's work: an attackSession in each
// session of spec until stdin closes (or ctx ends), then its tally on
// stdout.
func (b *wsBench) attackFrom(spec string, stdin io.Reader) error {
	var sessions []string
	if err := json.Unmarshal([]byte(spec), &sessions); err != nil {
		return fmt.Errorf("bench-ws: %s: %w", attackEnv, err)
	}
	ctx, stop := context.WithCancel(b.ctx)
	defer stop()
	go func() {
		io.Copy(io.Discard, stdin)
		stop()
	}()
	var t attackTally
	var sent, dialled, dropped atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	for _, s := range sessions {
		wg.Go(func() {
			if err := b.attackSession(ctx, s, &sent, &dialled, &dropped); err != nil {
				once.Do(func() { t.Err = err.Error() })
				stop()
			}
		})
	}
	wg.Wait()
	t.Sent, t.Dialled, t.Dropped = sent.Load(), dialled.Load(), dropped.Load()
	return json.NewEncoder(b.out).Encode(t)
}

// victim is the victim tenant's connection, and the round trips of its
// messages by sequence (zero: no echo yet).
type victim struct {
	ws   *websocket.Conn
	mu   sync.Mutex
	rtts []time.Duration
	got  int
	all  chan struct{} // closed when the round's last echo is in
	want int           // echoes that close all
}

// echo records an echo's round trip: its arrival less its send time.
func (v *victim) echo(m benchFrame) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if m.Type != "echo" || m.Data.Seq < 0 || m.Data.Seq >= int64(len(v.rtts)) || v.rtts[m.Data.Seq] != 0 {
		return
	}
	v.rtts[m.Data.Seq] = max(time.Duration(time.Now().UnixNano()-m.Data.At), 1)
	if v.got++; v.got == v.want {
		close(v.all)
	}
}

// round sends n pooled messages, from sequence first, at 100 a second, and
// returns the round trips of those echoed within 30 seconds of the last,
// sorted.
func (v *victim) round(ctx context.Context, first, n int) ([]time.Duration, error) {
	v.mu.Lock()
	v.all, v.want = make(chan struct{}), v.got+n
	all := v.all
	v.mu.Unlock()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for seq := first; seq < first+n; seq++ {
		<-tick.C
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := v.ws.Write(wctx, websocket.MessageText, benchMessage(int64(seq)))
		cancel()
		if err != nil {
			return nil, fmt.Errorf("bench-ws: slow: victim: write: %w", err)
		}
	}
	select {
	case <-all:
	case <-time.After(30 * time.Second):
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []time.Duration
	for _, d := range v.rtts[first : first+n] {
		if d != 0 {
			out = append(out, d)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("bench-ws: slow: the victim got no echo")
	}
	slices.Sort(out)
	return out, nil
}

// attackSession holds, in session s of the attacking tenant, a member that
// never reads, dialled again as soon as the server has dropped it (the
// management API answers 410 for it), and a sender that sends frames back
// to back and reads its echoes, until ctx ends.
func (b *wsBench) attackSession(ctx context.Context, s string, sent, dialled, dropped *atomic.Int64) error {
	sender, err := b.dial(s, 0)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer sender.CloseNow() // first: it ends the goroutines
	// Its echoes, let go undecoded: the bench's CPU is the victim's too.
	wg.Go(func() {
		for {
			_, r, err := sender.Reader(ctx)
			if err != nil {
				return
			}
			io.Copy(io.Discard, r)
		}
	})
	wg.Go(func() {
		frame := fmt.Appendf(nil, `{"action":%q,"data":%q}`, b.c.SlowQueue, strings.Repeat("x", b.c.SlowFrame))
		var pace <-chan time.Time
		if b.c.SlowRate > 0 {
			t := time.NewTicker(time.Second / time.Duration(b.c.SlowRate))
			defer t.Stop()
			pace = t.C
		}
		for ctx.Err() == nil {
			if pace != nil {
				select {
				case <-pace:
				case <-ctx.Done():
					return
				}
			}
			if sender.Write(ctx, websocket.MessageText, frame) != nil {
				return
			}
			sent.Add(1)
		}
	})
	for b.c.SlowDeaf && ctx.Err() == nil {
		deaf, id, err := b.dialID(s, 0)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		dialled.Add(1)
		for ctx.Err() == nil && !b.connGone(ctx, slowTenant, id) {
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
		if ctx.Err() == nil {
			dropped.Add(1)
		}
		deaf.CloseNow()
	}
	<-ctx.Done()
	return nil
}

// connGone reports whether the first node's management API answers 410
// for tenant's connection id.
func (b *wsBench) connGone(ctx context.Context, tenant, id string) bool {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, b.bases[0]+"/v1/tenants/"+tenant+"/connections/"+url.PathEscape(id), nil)
	if b.c.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+b.c.APIKey)
	}
	resp, err := b.hc.Do(req)
	if err != nil {
		return false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusGone
}
