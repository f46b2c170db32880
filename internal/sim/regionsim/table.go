package regionsim

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// WriteTable writes r for people: the run's settings, a table of its
// windows, and a summary.
func (r *Report) WriteTable(w io.Writer) error {
	moves := ""
	if r.MoveS > 0 {
		moves = fmt.Sprintf(" moving every %.0fs", r.MoveS)
	}
	fmt.Fprintf(w, "design %s: %d regions, lag %.1fs, rebalance %.2fs, skew %v%s, limit %d/s, %d requests/s offered\n",
		r.Design, len(r.Regions), r.LagS, r.RebalanceS, r.Skew, moves, r.Limit, r.Rate)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "second\tadmitted\tby region\tover %\tlost\tp99 ms\tcut\t")
	for _, win := range r.Windows {
		cut := ""
		if win.Cut {
			cut = "cut"
		}
		fmt.Fprintf(tw, "%.0f\t%d\t%v\t%.1f\t%d\t%.1f\t%s\t\n", win.At, win.Admitted, win.ByRegion, win.Overshoot, win.Lost, win.P99Ms, cut)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nwindows over the limit: %d of %d; largest overshoot %.1f%%; lost increments %d; p99 decision %.1fms; %.1f%% of the limit admitted; %d errors\n",
		r.Over, len(r.Windows), r.MaxOvershoot, r.Lost, r.P99Ms, 100*r.Utilisation, r.Errors)
	fmt.Fprintf(w, "admitted of the limit per %ds:", SpanSeconds)
	for _, sp := range r.Spans {
		fmt.Fprintf(w, " %.1f%% (from %.0fs)", 100*sp.Fraction, sp.At)
	}
	fmt.Fprintf(w, "; least %.1f%%\nseconds to 95%% of the limit after the start", 100*r.MinSpan)
	if r.MoveS > 0 {
		fmt.Fprint(w, " and each move")
	}
	fmt.Fprintf(w, ": %v (-1: never)\n", r.Follow)
	if r.Decisions > 0 {
		fmt.Fprintf(w, "a region's store requests a second: %.1f reads, %.1f writes, for %.1f decisions asked\n", r.Reads, r.Writes, r.Decisions)
	}
	return nil
}
