package fairsim

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// WriteTable writes r for people: the workload in four lines, a table of
// each strategy's measures, then one of each class of customer's.
func (r *Report) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "seed %d: %d customers of %d tenants (%d idle, %d bursting, %d above their fair share over the run), %.0fs simulated\n",
		r.Seed, r.Customers, r.Tenants, r.Idle, r.Bursting, r.Heavy, r.DurationS)
	fmt.Fprintf(w, "%s\n", r.Shape)
	fmt.Fprintf(w, "upstream quota %d/s: %d units offered for a capacity of %d (%.1fx); requests waiting past their maximum wait are dropped, not served\n",
		r.Rate, r.Offered, r.Capacity, float64(r.Offered)/float64(r.Capacity))
	fmt.Fprintf(w, "%s\n\n", nodesLine(r.Nodes))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "strategy\tutil\twin>quota\tmax/1s\tjain\tworst x\tjain/run\tworst x/run\tserved\trefused\tdropped\tlight p50\tlight p99\theavy p50\theavy p99\t")
	ms := func(v float64) string { return fmt.Sprintf("%.0fms", v) }
	for _, s := range r.Strategies {
		fmt.Fprintf(tw, "%s\t%.1f%%\t%d\t%d\t%.3f\t%.2f\t%.3f\t%.2f\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t\n",
			s.Strategy, 100*s.Utilisation, s.WindowsOver, s.MaxInWindow, s.Jain, s.WorstX, s.JainRun, s.WorstXRun, s.Served, s.Refused, s.Dropped,
			ms(s.LightP50ms), ms(s.LightP99ms), ms(s.HeavyP50ms), ms(s.HeavyP99ms))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nby class of customer (got: units served over their moment-by-moment fair shares)")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "strategy\tclass\tcustomers\tgot\tworst x\trefused\tdropped\tp50\tp99\t")
	for _, s := range r.Strategies {
		for _, c := range s.Classes {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%.3f\t%.2f\t%.1f%%\t%.1f%%\t%s\t%s\t\n",
				s.Strategy, c.Name, c.Customers, c.Got, c.WorstX, 100*c.Refused, 100*c.Dropped, ms(c.P50ms), ms(c.P99ms))
		}
	}
	return tw.Flush()
}

// nodesLine says how many nodes the sluice strategy runs on.
func nodesLine(n int) string {
	if n == 1 {
		return "sluice on 1 node"
	}
	return fmt.Sprintf("sluice on %d nodes sharing the quota through a ledger, tenant t on node t %% %d", n, n)
}
