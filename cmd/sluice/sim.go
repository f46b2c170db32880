package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/sim/fairsim"
	"github.com/sluicehq/sluice/internal/sim/regionsim"
	"github.com/sluicehq/sluice/store/dynamostore"
)

const simUsage = `usage: sluice sim fairshare [--seed N] [--customers 200] [--duration 60s] [--nodes 1] [--load 3] [--weights 4/2/1]
                          [--keys 1/20] [--costs 1/5] [--max-waits 2s/300ms] [--shift 5s] [--bursty 6] [--json]
       sluice sim regions [--regions 3] [--lag 1s] [--skew 80/15/5] [--move 5s] [--duration 60s] [--limit 100] [--rate 200]
                          [--partition R:30s[@15s]] [--rebalance 250ms] [--design sluice|naive] [--json]`

// simCmd runs `sluice sim fairshare` or `sluice sim regions`.
func simCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && isHelp(args[0]) {
		fmt.Fprintln(stdout, simUsage)
		return nil
	}
	if len(args) > 0 && args[0] == "regions" {
		return simRegions(ctx, args[1:], stdout, stderr)
	}
	if len(args) == 0 || args[0] != "fairshare" {
		return errors.New(simUsage)
	}
	return simFairshare(ctx, args[1:], stdout, stderr)
}

// simFairshare runs `sluice sim fairshare`: the fair-sharing simulation
// on a virtual clock, over a workload shaped by its flags.
func simFairshare(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var (
		cfg                         fairsim.Config
		weights, keys, costs, waits string
		asJSON                      bool
	)
	fs := flag.NewFlagSet("sluice sim fairshare", flag.ContinueOnError)
	fs.Uint64Var(&cfg.Seed, "seed", 0, "the workload's random seed")
	fs.IntVar(&cfg.Customers, "customers", 200, "customers (keys) sharing the upstream (10 to 100000)")
	fs.DurationVar(&cfg.Duration, "duration", 60*time.Second, "simulated time (1s to 1h)")
	fs.Int64Var(&cfg.Rate, "rate", 100, "the upstream's quota per second")
	fs.Float64Var(&cfg.Load, "load", 3, "demand offered over the quota")
	fs.DurationVar(&cfg.MaxWait, "max-wait", 2*time.Second, "a request waiting longer is dropped (the default of --max-waits)")
	fs.IntVar(&cfg.Nodes, "nodes", 1, fmt.Sprintf("Sluice nodes sharing the quota, each tenant on one of them (1 to %d)", fairsim.MaxNodes))
	fs.StringVar(&weights, "weights", "1", "tenants' weights, taken in turn, as 4/2/1")
	fs.StringVar(&keys, "keys", "1", "keys each tenant names, taken in turn, as 1/1/20")
	fs.StringVar(&costs, "costs", "1", "what customers' requests cost, taken in turn, as 1/1/1/5 (each at most rate/10)")
	fs.StringVar(&waits, "max-waits", "", "customers' maximum waits, taken in turn, as 2s/300ms; default --max-wait")
	fs.DurationVar(&cfg.Shift, "shift", 0, "move demand: shuffle the customers' rates every `duration` (0: never)")
	fs.IntVar(&cfg.Bursty, "bursty", 6, "every n-th active customer bursts (0: none)")
	fs.BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	if err := parseFlags(fs, args, stdout, stderr); err != nil {
		return err
	}
	// Checked here, not left to fairsim: its zero means the default.
	if cfg.Nodes < 1 || cfg.Nodes > fairsim.MaxNodes {
		return fmt.Errorf("sim: --nodes %d must be 1 to %d", cfg.Nodes, fairsim.MaxNodes)
	}
	if cfg.Bursty == 0 {
		cfg.Bursty = -1
	}
	var err error
	if cfg.Weights, err = parseMix("weights", weights, func(s string) (int64, error) { return strconv.ParseInt(s, 10, 64) }); err != nil {
		return err
	}
	if cfg.Keys, err = parseMix("keys", keys, strconv.Atoi); err != nil {
		return err
	}
	if cfg.Costs, err = parseMix("costs", costs, func(s string) (int64, error) { return strconv.ParseInt(s, 10, 64) }); err != nil {
		return err
	}
	if waits != "" {
		if cfg.MaxWaits, err = parseMix("max-waits", waits, time.ParseDuration); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	rep, err := fairsim.Run(cfg)
	if err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	return writeReport(stdout, &rep, asJSON)
}

// parseMix parses a flag's list of values separated by slashes.
func parseMix[T any](name, v string, parse func(string) (T, error)) ([]T, error) {
	var out []T
	for _, p := range strings.Split(v, "/") {
		x, err := parse(strings.TrimSpace(p))
		if err != nil {
			return nil, fmt.Errorf("sim: --%s %q: %v", name, v, err)
		}
		out = append(out, x)
	}
	return out, nil
}

// writeReport writes a simulation's report to w, as a table or in JSON.
func writeReport(w io.Writer, rep interface{ WriteTable(io.Writer) error }, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return rep.WriteTable(w)
}

// simRegions runs `sluice sim regions`: multi-region limits on three (or
// more) dynoxide servers replicated with a lag, in real time.
func simRegions(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var (
		cfg             regionsim.Config
		skew, partition string
		asJSON          bool
	)
	fs := flag.NewFlagSet("sluice sim regions", flag.ContinueOnError)
	fs.IntVar(&cfg.Regions, "regions", 3, "regions of the global table (2 to 5), each a dynoxide server")
	fs.DurationVar(&cfg.Lag, "lag", time.Second, "replication lag between regions")
	fs.StringVar(&skew, "skew", "", "each region's percent of the traffic, as 80/15/5 (0: an idle region); default 80/15/5 on 3 regions, even otherwise")
	fs.DurationVar(&cfg.Move, "move", 0, "move the demand every `period` (whole seconds): the skew turns by one region")
	fs.DurationVar(&cfg.Duration, "duration", 60*time.Second, "how long to run (real time, 2s to 10m)")
	fs.Int64Var(&cfg.Limit, "limit", 100, "the global limit per second")
	fs.IntVar(&cfg.Rate, "rate", 0, "requests per second offered over all regions; default twice --limit")
	fs.StringVar(&partition, "partition", "", "cut region `R` off for a duration, from a quarter into the run or from @START: R:30s or R:30s@10s")
	fs.StringVar(&cfg.Design, "design", "sluice", "sluice (allotments per region) or naive (one item per key, ADD from every region)")
	fs.DurationVar(&cfg.Rebalance, "rebalance", dynamostore.DefaultRebalance, "how often Sluice rebalances allotments (Options.Rebalance)")
	fs.StringVar(&cfg.Dynoxide, "dynoxide", "", "`path` of the dynoxide binary; default $SLUICE_DYNOXIDE or tools/node_modules (make deps)")
	fs.BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	if err := parseFlags(fs, args, stdout, stderr); err != nil {
		return err
	}
	if skew != "" {
		for _, p := range strings.Split(skew, "/") {
			n, err := strconv.Atoi(strings.TrimSpace(p))
			if err != nil {
				return fmt.Errorf("sim regions: --skew %q: parts must be whole percents, as 80/15/5", skew)
			}
			cfg.Skew = append(cfg.Skew, n)
		}
	}
	if partition != "" {
		r, rest, ok := strings.Cut(partition, ":")
		n, err := strconv.Atoi(r)
		if !ok || err != nil {
			return fmt.Errorf("sim regions: --partition %q: want REGION:DURATION[@START], as 1:30s", partition)
		}
		d, at, _ := strings.Cut(rest, "@")
		if cfg.Partition.For, err = time.ParseDuration(d); err != nil {
			return fmt.Errorf("sim regions: --partition %q: %v", partition, err)
		}
		if at != "" {
			if cfg.Partition.At, err = time.ParseDuration(at); err != nil {
				return fmt.Errorf("sim regions: --partition %q: %v", partition, err)
			}
		}
		cfg.Partition.Region = n
	}
	rep, err := regionsim.Run(ctx, cfg)
	if err != nil {
		return fmt.Errorf("sim regions: %w", err)
	}
	return writeReport(stdout, rep, asJSON)
}
