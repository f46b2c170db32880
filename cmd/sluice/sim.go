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
)

const simUsage = `usage: sluice sim fairshare [--seed N] [--customers 200] [--duration 60s] [--nodes 1] [--json]
       sluice sim regions [--regions 3] [--lag 1s] [--skew 80/15/5] [--move 5s] [--duration 60s] [--limit 100] [--rate 200]
                          [--partition R:30s[@15s]] [--rebalance 1s] [--design sluice|naive] [--json]`

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
// on a virtual clock.
func simFairshare(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var (
		cfg    fairsim.Config
		asJSON bool
	)
	fs := flag.NewFlagSet("sluice sim fairshare", flag.ContinueOnError)
	fs.Uint64Var(&cfg.Seed, "seed", 0, "the workload's random seed")
	fs.IntVar(&cfg.Customers, "customers", 200, "customers sharing the upstream (10 to 100000)")
	fs.DurationVar(&cfg.Duration, "duration", 60*time.Second, "simulated time (1s to 1h)")
	fs.Int64Var(&cfg.Rate, "rate", 100, "the upstream's quota per second")
	fs.DurationVar(&cfg.MaxWait, "max-wait", 2*time.Second, "a request waiting longer is dropped")
	fs.IntVar(&cfg.Nodes, "nodes", 1, fmt.Sprintf("Sluice nodes sharing the quota, each customer on one of them (1 to %d)", fairsim.MaxNodes))
	fs.BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	if err := parseFlags(fs, args, stdout, stderr); err != nil {
		return err
	}
	// Checked here, not left to fairsim: its zero means the default.
	if cfg.Nodes < 1 || cfg.Nodes > fairsim.MaxNodes {
		return fmt.Errorf("sim: --nodes %d must be 1 to %d", cfg.Nodes, fairsim.MaxNodes)
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
	fs.DurationVar(&cfg.Rebalance, "rebalance", time.Second, "how often Sluice rebalances allotments")
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
