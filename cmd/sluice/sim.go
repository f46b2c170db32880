package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/fairshare/fairsim"
)

const simUsage = "usage: sluice sim fairshare [--seed N] [--customers 200] [--duration 60s] [--nodes 1] [--json]"

// simCmd runs `sluice sim fairshare`: the fair-sharing simulation on a
// virtual clock.
func simCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && isHelp(args[0]) {
		fmt.Fprintln(stdout, simUsage)
		return nil
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
