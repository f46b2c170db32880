package insight

import (
	"slices"
	"testing"
	"time"
)

// A Series counts per second and kind, forgets seconds older than its
// span, and counts labels past its bound under Other.
func TestSeries(t *testing.T) {
	s := NewSeries(10*time.Second, 2, 2)
	t0 := time.Unix(1_000_000, 0)
	for i := range 5 {
		s.Add(t0.Add(time.Duration(i)*time.Second), "acme", 0, int32(i+1))
		s.Add(t0.Add(time.Duration(i)*time.Second+500*time.Millisecond), "acme", 1, 1)
	}
	pts := s.Range("acme", t0.Unix(), t0.Unix()+5)
	if len(pts) != 6 {
		t.Fatalf("%d points, want 6", len(pts))
	}
	for i, p := range pts[:5] {
		if p.Second != t0.Unix()+int64(i) || p.Counts[0] != int32(i+1) || p.Counts[1] != 1 {
			t.Errorf("second %d: %+v", i, p)
		}
	}
	if c := pts[5].Counts; c[0] != 0 || c[1] != 0 {
		t.Errorf("an empty second: %v", c)
	}
	// 10s later the ring has moved on: the old seconds read as zero, and a
	// range is at most the span.
	late := t0.Add(12 * time.Second)
	s.Add(late, "acme", 0, 7)
	pts = s.Range("acme", t0.Unix(), late.Unix())
	if len(pts) != 10 || pts[len(pts)-1].Counts[0] != 7 {
		t.Fatalf("after the span: %d points, last %+v", len(pts), pts[len(pts)-1])
	}
	if p := pts[0]; p.Second != t0.Unix()+3 || p.Counts[0] != 4 {
		t.Errorf("the oldest second within the span: %+v, want second 3 with 4", p)
	}
	if old := s.Range("acme", t0.Unix(), t0.Unix()+2); old != nil {
		t.Errorf("seconds older than the span: %+v, want none", old)
	}
	if p := s.Range("acme", t0.Unix()+2, t0.Unix()+2); p != nil {
		t.Errorf("second 2, whose slot second 12 took: %+v", p)
	}
	// A count older than the span is dropped; a third label goes to
	// Other; a bad kind counts nothing.
	s.Add(t0, "old", 0, 1)
	s.Add(late, "beta", 0, 1)
	s.Add(late, "gamma", 0, 1)
	s.Add(late, "acme", 5, 1)
	labels := s.Labels()
	slices.Sort(labels)
	if !slices.Equal(labels, []string{Other, "acme", "beta"}) {
		t.Errorf("labels %v", labels)
	}
	if p := s.Range(Other, late.Unix(), late.Unix()); len(p) != 1 || p[0].Counts[0] != 1 {
		t.Errorf("other: %+v", p)
	}
}

// A full Series gives the row of a label idle for the span to the next
// label, keeps reserved labels past its bound, and forgets a label asked
// to.
func TestSeriesIdleRowsAndForget(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	s := NewSeries(time.Minute, 1, 2)
	s.Add(t0, "a", 0, 1)
	s.Add(t0, "b", 0, 1)
	s.Add(t0, "c", 0, 1) // full: under Other
	s.AddReserved(t0, "cfg", 0, 1)
	if got := s.Range(Other, t0.Unix(), t0.Unix()); got[0].Counts[0] != 1 {
		t.Errorf("other: %+v", got)
	}
	if got := s.Range("cfg", t0.Unix(), t0.Unix()); got[0].Counts[0] != 1 {
		t.Errorf("a reserved label past the bound: %+v", got)
	}
	t1 := t0.Add(time.Minute + time.Second)
	s.Add(t1, "b", 0, 1) // b is live; a is idle for the span
	s.Add(t1, "d", 0, 1)
	if got := s.Range("d", t1.Unix(), t1.Unix()); got[0].Counts[0] != 1 {
		t.Errorf("d, given a's idle row: %+v", got)
	}
	s.Forget("b")
	s.Add(t1, "e", 0, 1)
	if got := s.Range("e", t1.Unix(), t1.Unix()); got[0].Counts[0] != 1 {
		t.Errorf("e, given b's forgotten row: %+v", got)
	}
	if got := s.Range("b", t1.Unix(), t1.Unix()); got[0].Counts[0] != 0 {
		t.Errorf("b after Forget: %+v", got)
	}
}
