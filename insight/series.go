package insight

import (
	"sync"
	"time"
)

// Series counts events per second over the last Span seconds, by label
// (a tenant, a policy) and by kind (allowed, denied, ...), in bounded
// memory: at most MaxLabels labels, the rest counted under Other, besides
// the labels its owner reserves (configured policies), which always have
// a row. Each label's counts are a ring of seconds; a second older than
// Span is overwritten, and a label with no count in the last Span gives
// its row up to the next label. It is safe for concurrent use.
type Series struct {
	span   int
	kinds  int
	max    int
	mu     sync.Mutex
	rows   map[string]*row
	capped int   // rows counted against max: those not reserved
	latest int64 // the latest second counted: older than Span before it is gone
	swept  int64 // the second of the last sweep for idle rows
}

type row struct {
	reserved bool
	last     int64   // the latest second counted
	second   []int64 // the unix second each slot holds
	counts   []int32 // slot*kinds + kind
}

// Other is the label of the events of labels past MaxLabels.
const Other = "(other)"

// NewSeries returns a Series of span seconds, kinds kinds and at most
// maxLabels labels.
func NewSeries(span time.Duration, kinds, maxLabels int) *Series {
	return &Series{span: max(int(span/time.Second), 1), kinds: max(kinds, 1), max: max(maxLabels, 1), rows: map[string]*row{}}
}

// Add counts n events of kind for label at now: under Other if the
// Series holds MaxLabels labels already.
func (s *Series) Add(now time.Time, label string, kind int, n int32) {
	s.add(now, label, false, kind, n)
}

// AddReserved is Add for a label that always has a row, past MaxLabels
// (a configured policy's): the caller bounds how many there are.
func (s *Series) AddReserved(now time.Time, label string, kind int, n int32) {
	s.add(now, label, true, kind, n)
}

func (s *Series) add(now time.Time, label string, reserved bool, kind int, n int32) {
	if kind < 0 || kind >= s.kinds {
		return
	}
	sec := now.Unix()
	s.mu.Lock()
	defer s.mu.Unlock()
	if sec <= s.latest-int64(s.span) {
		return // older than the span
	}
	s.latest = max(s.latest, sec)
	r := s.rows[label]
	if r == nil {
		if !reserved && s.capped >= s.max {
			s.sweepLocked()
		}
		if !reserved && s.capped >= s.max {
			label, reserved = Other, true // Other's row is not counted against max
			r = s.rows[label]
		}
		if r == nil {
			r = &row{reserved: reserved, second: make([]int64, s.span), counts: make([]int32, s.span*s.kinds)}
			s.rows[label] = r
			if !reserved {
				s.capped++
			}
		}
	}
	r.last = max(r.last, sec)
	slot := int(sec % int64(s.span))
	if r.second[slot] != sec {
		r.second[slot] = sec
		clear(r.counts[slot*s.kinds : (slot+1)*s.kinds])
	}
	r.counts[slot*s.kinds+kind] += n
}

// sweepLocked drops the rows with no count in the last span, at most once
// a second: a full Series with no idle row costs one pass a second, not
// one a label. s.mu is held.
func (s *Series) sweepLocked() {
	if s.swept == s.latest {
		return
	}
	s.swept = s.latest
	for label, r := range s.rows {
		if r.last <= s.latest-int64(s.span) {
			s.deleteLocked(label, r)
		}
	}
}

func (s *Series) deleteLocked(label string, r *row) {
	delete(s.rows, label)
	if !r.reserved {
		s.capped--
	}
}

// Forget drops label's counts (a deleted tenant's), freeing its row.
func (s *Series) Forget(label string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.rows[label]; r != nil {
		s.deleteLocked(label, r)
	}
}

// Point is one second of one label: its counts by kind.
type Point struct {
	Second int64   `json:"t"`
	Counts []int32 `json:"n"`
}

// Range returns label's seconds from from to to (both unix seconds,
// inclusive), within the Span before the latest second counted, one Point
// per second, zeros where nothing was counted.
func (s *Series) Range(label string, from, to int64) []Point {
	s.mu.Lock()
	defer s.mu.Unlock()
	from = max(from, to-int64(s.span)+1, s.latest-int64(s.span)+1)
	if to < from {
		return nil
	}
	r := s.rows[label]
	out := make([]Point, 0, to-from+1)
	for sec := from; sec <= to; sec++ {
		p := Point{Second: sec, Counts: make([]int32, s.kinds)}
		if r != nil {
			slot := int(sec % int64(s.span))
			if r.second[slot] == sec {
				copy(p.Counts, r.counts[slot*s.kinds:(slot+1)*s.kinds])
			}
		}
		out = append(out, p)
	}
	return out
}

// Labels returns the labels counted so far.
func (s *Series) Labels() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.rows))
	for l := range s.rows {
		out = append(out, l)
	}
	return out
}
