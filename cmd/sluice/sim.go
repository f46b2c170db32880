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
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/internal/sim/fairsim"
	"github.com/sluicehq/sluice/internal/sim/regionsim"
)

const simUsage = `usage: sluice sim fairshare [--seed N] [--customers 200] [--duration 60s] [--nodes 1] [--json]
       sluice sim regions [--regions 3] [--lag 1s] [--skew 80/15/5] [--duration 60s] [--limit 100] [--rate 200]
                          [--partition R:30s[@15s]] [--design sluice|naive] [--json]`

// simCmd runs `sluice sim fairshare`: the fair-sharing simulation on a
// virtual clock.
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
	if err := parseFlags(fs, args[1:], stdout, stderr); err != nil {
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
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	fmt.Fprintf(stdout, "seed %d: %d customers (%d idle, %d bursting, %d above the fair share of %.1f), %.0fs simulated\n",
		rep.Seed, rep.Customers, rep.Idle, rep.Bursting, rep.Heavy, rep.FairShare, rep.DurationS)
	fmt.Fprintf(stdout, "upstream quota %d/s: %d units offered for a capacity of %d (%.1fx); waits over %.1fs are dropped, not served\n",
		rep.Rate, rep.Offered, rep.Capacity, float64(rep.Offered)/float64(rep.Capacity), rep.MaxWaitS)
	fmt.Fprintf(stdout, "%s\n\n", nodesLine(rep.Nodes))
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "strategy\tutil\twin>quota\tmax/1s\tjain\tworst x\tjain/run\tworst x/run\tserved\trefused\tdropped\tlight p50\tlight p99\theavy p50\theavy p99\t")
	ms := func(v float64) string { return fmt.Sprintf("%.0fms", v) }
	for _, r := range rep.Strategies {
		fmt.Fprintf(tw, "%s\t%.1f%%\t%d\t%d\t%.3f\t%.2f\t%.3f\t%.2f\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t\n",
			r.Strategy, 100*r.Utilisation, r.WindowsOver, r.MaxInWindow, r.Jain, r.WorstX, r.JainRun, r.WorstXRun, r.Served, r.Refused, r.Dropped,
			ms(r.LightP50ms), ms(r.LightP99ms), ms(r.HeavyP50ms), ms(r.HeavyP99ms))
	}
	return tw.Flush()
}

// nodesLine says how many nodes the sluice strategy runs on.
func nodesLine(n int) string {
	if n == 1 {
		return "sluice on 1 node"
	}
	return fmt.Sprintf("sluice on %d nodes sharing the quota through a ledger, customer c on node c %% %d", n, n)
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
	fs.StringVar(&skew, "skew", "", "each region's percent of the traffic, as 80/15/5; default 80/15/5 on 3 regions, even otherwise")
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
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("sim regions: %w", err)
	}
	rep, err := regionsim.Run(ctx, cfg)
	if err != nil {
		return fmt.Errorf("sim regions: %w", err)
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	fmt.Fprintf(stdout, "design %s: %d regions, lag %.1fs, skew %v, limit %d/s, %d requests/s offered\n",
		rep.Design, len(rep.Regions), rep.LagS, rep.Skew, rep.Limit, rep.Rate)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "second\tadmitted\tby region\tover %\tlost\tp99 ms\tcut\t")
	for _, w := range rep.Windows {
		cut := ""
		if w.Cut {
			cut = "cut"
		}
		fmt.Fprintf(tw, "%.0f\t%d\t%v\t%.1f\t%d\t%.1f\t%s\t\n", w.At, w.Admitted, w.ByRegion, w.Overshoot, w.Lost, w.P99Ms, cut)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nwindows over the limit: %d of %d; largest overshoot %.1f%%; lost increments %d; p99 decision %.1fms; %.1f%% of the limit admitted; %d errors\n",
		rep.Over, len(rep.Windows), rep.MaxOvershoot, rep.Lost, rep.P99Ms, 100*rep.Utilisation, rep.Errors)
	return nil
}
