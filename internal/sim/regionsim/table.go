package regionsim

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// WriteTable writes r for people: the run's settings, a table of its
// windows, and a summary.
func (r *Report) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "design %s: %d regions, lag %.1fs, skew %v, limit %d/s, %d requests/s offered\n",
		r.Design, len(r.Regions), r.LagS, r.Skew, r.Limit, r.Rate)
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
	return nil
}
