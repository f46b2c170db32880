package insight

import (
	"maps"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Series counts events per second over the last Span seconds, by label
// (a tenant, a policy) and by kind (allowed, denied, ...), in bounded
// memory: at most MaxLabels labels, the rest counted under Other, besides
// the labels its owner reserves (configured policies), which always have
// a row. Each label's counts are a ring of seconds; a second older than
// Span is overwritten, and a label with no count in the last Span gives
// its row up to the next label. It is safe for concurrent use.
//
// Counting takes no lock shared with other labels: the rows are an
// immutable map replaced whole when a label comes or goes (under mu, at
// most once a label), and a row's counts are atomic. A row's mutex is
// taken once a second, by the first count of the second, to clear the
// slot the second takes over.
type Series struct {
	span   int
	kinds  int
	max    int
	rows   atomic.Pointer[map[string]*row] // replaced whole, under mu
	latest atomic.Int64                    // the latest second counted: older than Span before it is gone

	mu     sync.Mutex
	capped int   // rows counted against max: those not reserved
	swept  int64 // the second of the last sweep for idle rows
}

type row struct {
	reserved bool
	last     atomic.Int64   // the latest second counted
	second   []atomic.Int64 // the unix second each slot holds
	counts   []atomic.Int32 // slot*kinds + kind
	mu       sync.Mutex     // clears a slot for its new second
}

// Other is the label of the events of labels past MaxLabels.
const Other = "(other)"

// NewSeries returns a Series of span seconds, kinds kinds and at most
// maxLabels labels.
func NewSeries(span time.Duration, kinds, maxLabels int) *Series {
	s := &Series{span: max(int(span/time.Second), 1), kinds: max(kinds, 1), max: max(maxLabels, 1)}
	s.rows.Store(&map[string]*row{})
	return s
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
	if !storeMax(&s.latest, sec, int64(s.span)) {
		return // older than the span
	}
	r := (*s.rows.Load())[label]
	if r == nil {
		r = s.row(label, reserved)
	}
	storeMax(&r.last, sec, math.MaxInt64)
	slot := int(sec % int64(s.span))
	if r.second[slot].Load() != sec && !r.roll(slot, sec, s.kinds) {
		return
	}
	r.counts[slot*s.kinds+kind].Add(n)
}

// storeMax raises v to sec unless v is already span or more past it; it
// reports whether sec is within the span before v.
func storeMax(v *atomic.Int64, sec, span int64) bool {
	for {
		old := v.Load()
		if sec <= old {
			return sec > old-span
		}
		if v.CompareAndSwap(old, sec) {
			return true
		}
	}
}

// roll gives slot to second sec, clearing the counts of the second it
// held; it reports false if a later second holds it already (sec is older
// than the span).
func (r *row) roll(slot int, sec int64, kinds int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch held := r.second[slot].Load(); {
	case held == sec:
		return true
	case held > sec:
		return false
	}
	for i := slot * kinds; i < (slot+1)*kinds; i++ {
		r.counts[i].Store(0)
	}
	// The second is stored after the counts are cleared: a count that
	// sees it adds to a cleared slot.
	r.second[slot].Store(sec)
	return true
}

// row returns label's row, made if there is room, else Other's.
func (s *Series) row(label string, reserved bool) *row {
	s.mu.Lock()
	defer s.mu.Unlock()
	rows := *s.rows.Load()
	if r := rows[label]; r != nil {
		return r
	}
	if !reserved && s.capped >= s.max {
		rows = s.sweepLocked()
	}
	if !reserved && s.capped >= s.max {
		label, reserved = Other, true // Other's row is not counted against max
		if r := rows[label]; r != nil {
			return r
		}
	}
	r := &row{reserved: reserved, second: make([]atomic.Int64, s.span), counts: make([]atomic.Int32, s.span*s.kinds)}
	next := maps.Clone(rows)
	next[label] = r
	s.rows.Store(&next)
	if !reserved {
		s.capped++
	}
	return r
}

// sweepLocked drops the rows with no count in the last span, at most once
// a second: a full Series with no idle row costs one pass a second, not
// one a label. It returns the rows left. s.mu is held.
func (s *Series) sweepLocked() map[string]*row {
	rows := *s.rows.Load()
	latest := s.latest.Load()
	if s.swept == latest {
		return rows
	}
	s.swept = latest
	var next map[string]*row
	for label, r := range rows {
		if r.last.Load() <= latest-int64(s.span) {
			if next == nil {
				next = maps.Clone(rows)
			}
			s.deleteLocked(next, label, r)
		}
	}
	if next == nil {
		return rows
	}
	s.rows.Store(&next)
	return next
}

func (s *Series) deleteLocked(rows map[string]*row, label string, r *row) {
	delete(rows, label)
	if !r.reserved {
		s.capped--
	}
}

// Forget drops label's counts (a deleted tenant's), freeing its row.
func (s *Series) Forget(label string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rows := *s.rows.Load()
	if r := rows[label]; r != nil {
		next := maps.Clone(rows)
		s.deleteLocked(next, label, r)
		s.rows.Store(&next)
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
	from = max(from, to-int64(s.span)+1, s.latest.Load()-int64(s.span)+1)
	if to < from {
		return nil
	}
	r := (*s.rows.Load())[label]
	out := make([]Point, 0, to-from+1)
	for sec := from; sec <= to; sec++ {
		p := Point{Second: sec, Counts: make([]int32, s.kinds)}
		if r != nil {
			slot := int(sec % int64(s.span))
			if r.second[slot].Load() == sec {
				for k := range p.Counts {
					p.Counts[k] = r.counts[slot*s.kinds+k].Load()
				}
			}
		}
		out = append(out, p)
	}
	return out
}

// Labels returns the labels counted so far.
func (s *Series) Labels() []string {
	rows := *s.rows.Load()
	out := make([]string, 0, len(rows))
	for l := range rows {
		out = append(out, l)
	}
	return out
}

// Sum adds label's counts of the seconds from from to to (inclusive,
// within the Span before the latest second counted) into out, by kind:
// for folding seconds into minutes (History) without a Point a second.
func (s *Series) Sum(label string, from, to int64, out []int64) {
	from = max(from, to-int64(s.span)+1, s.latest.Load()-int64(s.span)+1)
	r := (*s.rows.Load())[label]
	if r == nil {
		return
	}
	for sec := from; sec <= to; sec++ {
		slot := int(sec % int64(s.span))
		if r.second[slot].Load() != sec {
			continue
		}
		for k := range min(s.kinds, len(out)) {
			out[k] += int64(r.counts[slot*s.kinds+k].Load())
		}
	}
}
