package algo

import (
	"math/bits"
	"time"

	"github.com/sluicehq/sluice"
)

// FixedWindow counts hits in windows of p.Window aligned to the Unix epoch
// (a 60s window starts on each minute). At most p.Limit hits are admitted in
// one window; up to twice that can pass in an interval that straddles a
// boundary. The state is one counter and the window's start.
func FixedWindow(p *sluice.Policy, s State, now, hits int64) (State, sluice.Decision) {
	return pure(fixedWindow, p, s, now, hits)
}

func fixedWindow(p *sluice.Policy, s *State, now, hits int64, d *sluice.Decision) {
	window(p, s, now, hits, false, d)
}

// window is fixedWindow, burning the hits if burn is set (see burnHits).
func window(p *sluice.Policy, s *State, now, hits int64, burn bool, d *sluice.Decision) {
	w := int64(p.Window)
	start := align(now, w)
	var count int64
	if s.Algorithm == sluice.FixedWindow && s.Start >= start {
		// s.Start > start: written by a node whose clock is ahead;
		// counting in its window errs on the side of caution.
		start, count = s.Start, s.Count
	}
	end := start + w
	if burn {
		burnHits(p, s, now, hits, start, end, count, d)
		return
	}
	if hits > p.Limit {
		decide(d, p, p.Limit, false, count, now, resetIf(count > 0, end, now), now)
		return
	}
	if count+hits > p.Limit {
		decide(d, p, p.Limit, false, count, now, resetIf(count > 0, end, now), end)
		return
	}
	count += hits
	*s = State{Algorithm: sluice.FixedWindow, Start: start, Count: count, Expires: end}
	decide(d, p, p.Limit, true, count, now, resetIf(count > 0, end, now), now)
}

// Burnable reports whether a burn (sluice.Check.Burn, sluice.Op.Burn)
// applies to p: whether p counts in fixed windows, as a FixedWindow
// policy and a Quota by calendar month (sluice.Month) do. A rolling
// quota's buckets, the sliding windows and log, the token bucket and
// leases have no count to pass a limit with.
func Burnable(p *sluice.Policy) bool {
	return p.Algorithm == sluice.FixedWindow || p.Algorithm == sluice.Quota && p.Calendar == sluice.Month
}

// burnHits adds hits to the count of the fixed window [start, end)
// whatever it is, up to sluice.MaxBurnCount, as envoyproxy/ratelimit's
// INCRBY does, and decides the op as an admission for the store to write
// (sluice.Op.Burn): Remaining is the limit less the count, negative when
// the count is past the limit, and RetryAfter then the wait until end,
// when the count starts again. Hits of zero read the count.
func burnHits(p *sluice.Policy, s *State, now, hits, start, end, count int64, d *sluice.Decision) {
	if hits > 0 {
		// count <= MaxBurnCount and hits <= MaxHits: no overflow.
		count = min(count+hits, sluice.MaxBurnCount)
		*s = State{Algorithm: p.Algorithm, Start: start, Count: count, Expires: end}
	}
	decide(d, p, p.Limit, true, count, now, resetIf(count > 0, end, now), now)
	d.Remaining = p.Limit - count
	if count > p.Limit {
		d.RetryAfter = time.Duration(end - now)
	}
}

func resetIf(used bool, at, now int64) int64 {
	if used {
		return at
	}
	return now
}

// SlidingWindow approximates a trailing window with two aligned counters: the
// current window's count plus the previous window's count weighted by the
// share of the previous window still inside the trailing Window,
//
//	used(t) = current + floor(previous * (start + Window - t) / Window).
//
// It assumes the previous window's hits were spread evenly. Its error bound:
// it never admits more than Limit hits within one aligned window (used is at
// least the current count), and never more than twice Limit in any interval
// of length Window, the worst case being all of the previous window's hits
// in its last Window/Limit. Against an exact sliding log it can also
// deny early, when the previous window's hits came early. With evenly spread
// traffic the error is a small fraction of Limit. The state is two counters
// and a window start.
func SlidingWindow(p *sluice.Policy, s State, now, hits int64) (State, sluice.Decision) {
	return pure(slidingWindow, p, s, now, hits)
}

func slidingWindow(p *sluice.Policy, s *State, now, hits int64, d *sluice.Decision) {
	w := int64(p.Window)
	start := align(now, w)
	var curr, prev int64
	if s.Algorithm == sluice.SlidingWindow {
		switch {
		case s.Start >= start:
			// s.Start > start: written by a node whose clock is ahead.
			start, curr, prev = s.Start, s.Count, s.Prev
		case s.Start == start-w:
			prev = s.Count
		}
	}
	used := curr + weigh(prev, start+w-now, w)
	if hits > p.Limit {
		decide(d, p, p.Limit, false, used, now, slidingReadyAt(now, start, w, curr, prev, 0), now)
		return
	}
	if used+hits > p.Limit {
		decide(d, p, p.Limit, false, used, now, slidingReadyAt(now, start, w, curr, prev, 0), slidingReadyAt(now, start, w, curr, prev, p.Limit-hits))
		return
	}
	curr += hits
	used += hits
	*s = State{Algorithm: sluice.SlidingWindow, Start: start, Count: curr, Prev: prev, Expires: start + 2*w}
	decide(d, p, p.Limit, true, used, now, slidingReadyAt(now, start, w, curr, prev, 0), now)
}

// weigh returns floor(n * overlap / w), the part of a window's count n that
// still counts when overlap of its w nanoseconds lies in the trailing window.
func weigh(n, overlap, w int64) int64 {
	if n == 0 || overlap <= 0 {
		return 0
	}
	q, _ := mulDiv(n, min(overlap, w), w) // q <= n
	return q
}

// slidingReadyAt returns the earliest t >= now at which the sliding window's
// used(t) is at most k (k >= 0), with no more hits arriving.
func slidingReadyAt(now, start, w, curr, prev, k int64) int64 {
	if curr > k {
		// Not before the next window, where curr becomes the weighted
		// count and nothing is current.
		return max(decayedBy(start+w, w, curr, k), start+w)
	}
	return max(decayedBy(start, w, prev, k-curr), now)
}

// decayedBy returns the earliest t at which floor(n * (start+w-t) / w) <= j.
// That holds when n*(start+w-t) < (j+1)*w, that is when
// start+w-t <= floor(((j+1)*w - 1) / n).
func decayedBy(start, w, n, j int64) int64 {
	if n <= j {
		return start
	}
	// (j+1)*w - 1 <= MaxLimit*MaxWindow, which fits in 128 bits; the
	// quotient is below w because n > j.
	hi, lo := bits.Mul64(uint64(j+1), uint64(w))
	lo, borrow := bits.Sub64(lo, 1, 0)
	r, _ := bits.Div64(hi-borrow, lo, uint64(n))
	return start + w - int64(r)
}
