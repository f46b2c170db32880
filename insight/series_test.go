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
