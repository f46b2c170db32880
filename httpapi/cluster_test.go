package httpapi

import (
	"testing"

	"github.com/sluicehq/sluice/insight"
)

// TestClusterSums: nodes' counts add up by second, also where one node has
// a second the other has not; latencies from their buckets; heaviest keys
// by key, errors and bounds included.
func TestClusterSums(t *testing.T) {
	a := []insight.Point{{Second: 10, Counts: []int32{1, 2}}, {Second: 11, Counts: []int32{3, 0}}}
	b := []insight.Point{{Second: 11, Counts: []int32{4, 1}}, {Second: 12, Counts: []int32{5, 5}}}
	got := sumPoints(a, b)
	want := map[int64][2]int32{10: {1, 2}, 11: {7, 1}, 12: {5, 5}}
	if len(got) != 3 {
		t.Fatalf("sumPoints = %+v", got)
	}
	for i, p := range got {
		if w := want[p.Second]; p.Counts[0] != w[0] || p.Counts[1] != w[1] || (i > 0 && got[i-1].Second >= p.Second) {
			t.Fatalf("sumPoints = %+v, want %v in order", got, want)
		}
	}

	one := insight.LatencyOf(10, []int32{0, 10, 0, 0})
	two := insight.LatencyOf(10, []int32{0, 0, 0, 30})
	l := sumLatency([]insight.LatencyPoint{one}, []insight.LatencyPoint{two, insight.LatencyOf(11, []int32{1})})
	if len(l) != 2 || l[0].N != 40 || l[0].P50 != two.P50 || l[0].P90 != two.P90 || l[1].N != 1 {
		t.Fatalf("sumLatency = %+v: want 40 calls at 10 with the slow node's median, and 1 at 11", l)
	}

	top := sumTop([]insight.Top{
		{Policy: "api", Hits: []insight.KeyCount{{Tenant: "a", Key: "x", Count: 5, Err: 1}, {Tenant: "a", Key: "y", Count: 4}}, HitsBound: 2, Denials: []insight.KeyCount{}},
		{Policy: "api", Hits: []insight.KeyCount{{Tenant: "a", Key: "y", Count: 6, Err: 2}, {Tenant: "b", Key: "x", Count: 1}}, HitsBound: 3, Denials: []insight.KeyCount{}},
	}, 2)
	if len(top.Hits) != 2 || top.Hits[0].Key != "y" || top.Hits[0].Count != 10 || top.Hits[0].Err != 2 || top.Hits[1].Count != 5 || top.HitsBound != 5 {
		t.Fatalf("sumTop = %+v: want y 10±2, then a's x 5, bound 5", top)
	}
}
