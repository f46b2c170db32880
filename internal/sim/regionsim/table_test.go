package regionsim

import (
	"strings"
	"testing"
)

// TestWriteTable: the settings, a row per window (a cut one marked) and
// the summary.
func TestWriteTable(t *testing.T) {
	rep := &Report{Design: "naive", Regions: []string{"r1", "r2"}, LagS: 1, RebalanceS: 1, Skew: []int{50, 50}, MoveS: 5, Limit: 100, Rate: 200,
		Windows: []Window{
			{At: 0, Admitted: 100, ByRegion: []int64{50, 50}, P99Ms: 1.5},
			{At: 1, Admitted: 130, ByRegion: []int64{90, 40}, Overshoot: 30, Lost: 4, P99Ms: 2, Cut: true},
		},
		Over: 1, MaxOvershoot: 30, Lost: 4, P99Ms: 2, Admitted: 230, Utilisation: 1.15,
		Spans: []Span{{At: 0, Admitted: 230, Fraction: 1.15}}, MinSpan: 1.15, Follow: []float64{0}}
	var b strings.Builder
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	const want = `design naive: 2 regions, lag 1.0s, rebalance 1.00s, skew [50 50] moving every 5s, limit 100/s, 200 requests/s offered
  second  admitted  by region  over %  lost  p99 ms  cut
       0       100    [50 50]     0.0     0     1.5     
       1       130    [90 40]    30.0     4     2.0  cut

windows over the limit: 1 of 2; largest overshoot 30.0%; lost increments 4; p99 decision 2.0ms; 115.0% of the limit admitted; 0 errors
admitted of the limit per 30s: 115.0% (from 0s); least 115.0%
seconds to 95% of the limit after the start and each move: [0] (-1: never)
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

// TestWriteTableStoreRequests: Sluice's runs end with what its stores
// were asked a second.
func TestWriteTableStoreRequests(t *testing.T) {
	rep := &Report{Design: "sluice", Regions: []string{"r1"}, Limit: 100, Rate: 200, Decisions: 66.7, Reads: 4.25, Writes: 40.5}
	var b strings.Builder
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	const want = "a region's store requests a second: 4.2 reads, 40.5 writes, for 66.7 decisions asked\n"
	if !strings.HasSuffix(b.String(), want) {
		t.Errorf("got\n%s\nwant it to end with\n%s", b.String(), want)
	}
}
