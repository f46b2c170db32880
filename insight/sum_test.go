package insight

import "testing"

// TestSums: nodes' counts add up by second, also where one node has
// a second the other has not, and by name; latencies from their buckets;
// heaviest keys by key, errors and bounds included.
func TestSums(t *testing.T) {
	a := []Point{{Second: 10, Counts: []int32{1, 2}}, {Second: 11, Counts: []int32{3, 0}}}
	b := []Point{{Second: 11, Counts: []int32{4, 1}}, {Second: 12, Counts: []int32{5, 5}}}
	got := SumPoints(a, b)
	want := map[int64][2]int32{10: {1, 2}, 11: {7, 1}, 12: {5, 5}}
	if len(got) != 3 {
		t.Fatalf("SumPoints = %+v", got)
	}
	for i, p := range got {
		if w := want[p.Second]; p.Counts[0] != w[0] || p.Counts[1] != w[1] || (i > 0 && got[i-1].Second >= p.Second) {
			t.Fatalf("SumPoints = %+v, want %v in order", got, want)
		}
	}

	named := SumNamed([]NamedPoints{{Name: "b", Points: []Point{{Second: 10, Counts: []int32{1, 0}}}}},
		[]NamedPoints{{Name: "a", Points: []Point{{Second: 10, Counts: []int32{2, 0}}}}, {Name: "b", Points: []Point{{Second: 10, Counts: []int32{3, 1}}}}})
	if len(named) != 2 || named[0].Name != "a" || named[0].Points[0].Counts[0] != 2 ||
		named[1].Name != "b" || len(named[1].Points) != 1 || named[1].Points[0].Counts[0] != 4 || named[1].Points[0].Counts[1] != 1 {
		t.Fatalf("SumNamed = %+v: want a's 2, then b's 4 and 1, by name", named)
	}

	one := LatencyOf(10, []int32{0, 10, 0, 0})
	two := LatencyOf(10, []int32{0, 0, 0, 30})
	l := SumLatency([]LatencyPoint{one}, []LatencyPoint{two, LatencyOf(11, []int32{1})})
	if len(l) != 2 || l[0].N != 40 || l[0].P50 != two.P50 || l[0].P90 != two.P90 || l[1].N != 1 {
		t.Fatalf("SumLatency = %+v: want 40 calls at 10 with the slow node's median, and 1 at 11", l)
	}

	top := SumTop([]Top{
		{Policy: "api", Hits: []KeyCount{{Tenant: "a", Key: "x", Count: 5, Err: 1}, {Tenant: "a", Key: "y", Count: 4}}, HitsBound: 2, Denials: []KeyCount{}},
		{Policy: "api", Hits: []KeyCount{{Tenant: "a", Key: "y", Count: 6, Err: 2}, {Tenant: "b", Key: "x", Count: 1}}, HitsBound: 3, Denials: []KeyCount{}},
	}, 2)
	if len(top.Hits) != 2 || top.Hits[0].Key != "y" || top.Hits[0].Count != 10 || top.Hits[0].Err != 2 || top.Hits[1].Count != 5 || top.HitsBound != 5 {
		t.Fatalf("SumTop = %+v: want y 10±2, then a's x 5, bound 5", top)
	}
}
