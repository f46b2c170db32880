package fairshare

import "time"

// pacer admits units so that no interval of length window holds more than
// rate of them, and releases no more than depth at once. Its units are the
// scheduler's scaled ones (Config.scale), so that a node may hold a share
// of the upstream that is not a whole number of cost units.
//
// Two constraints, both must allow a release of n units at now:
//
//	log:    sum of units released at t with now-t < window, plus n <= rate
//	bucket: T = window/rate, tau = depth*T
//	        max(tat, now) + n*T - now <= tau   (GCRA, as algo.TokenBucket)
//
// The log alone is the window bound, exact; the bucket alone would allow
// depth+rate units in a window. Together they send at most rate per window,
// evenly spaced once busy. The log holds at most a window's releases.
//
// The rate may change (setRate): a node's share of an upstream grows and
// shrinks. The log keeps what was released under the old rate, so a lower
// rate holds back releases until the window's sum is under it; a window
// that straddles the change holds at most the higher of the two rates.
// Rate 0 and the time until stop releases nothing.
type pacer struct {
	rate   int64 // units per window; 0: nothing goes
	window time.Duration
	depth  int64     // the bucket's depth in units, when rate is full
	full   int64     // the rate depth is for: depth scales with rate
	t      float64   // nanoseconds per unit at rate
	tau    float64   // bucket depth in nanoseconds at rate
	tat    time.Time // bucket's theoretical arrival time
	stop   time.Time // nothing goes at or after stop, if not zero
	log    []release // releases of the last window, oldest first
	inLog  int64     // sum of the log's units
	least  int64     // the bucket holds at least this many units
}

type release struct {
	at time.Time
	n  int64
}

// never is the readyAt of a release that cannot go until the rate or the
// stop changes.
var never = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// newPacer returns a pacer of rate units per window with a bucket of depth
// units, never less than least (the costliest release).
func newPacer(rate int64, window time.Duration, depth, least int64) pacer {
	p := pacer{window: window, depth: depth, full: rate, least: least}
	p.setRate(rate, time.Time{})
	return p
}

// setRate changes the rate, and the time from which nothing goes (zero:
// none). The bucket's depth scales with the rate.
func (p *pacer) setRate(rate int64, stop time.Time) {
	p.rate, p.stop = rate, stop
	if rate <= 0 {
		p.t, p.tau = 0, 0
		return
	}
	p.t = float64(p.window) / float64(rate)
	depth := max(p.depth*rate/max(p.full, 1), p.least)
	p.tau = float64(depth) * p.t
}

// expire drops the log's releases that no longer count at now.
func (p *pacer) expire(now time.Time) {
	i := 0
	for i < len(p.log) && now.Sub(p.log[i].at) >= p.window {
		p.inLog -= p.log[i].n
		i++
	}
	if i > 0 {
		p.log = append(p.log[:0], p.log[i:]...)
	}
}

// readyAt returns the earliest time at or after now at which n units may
// go, or never; p.expire(now) must have run.
func (p *pacer) readyAt(now time.Time, n int64) time.Time { return p.readyAfter(now, 0, n) }

// readyAfter returns when n units may go if m units are taken at now
// first, as readyAt would after take(now, m); readyAt(now, m) must be
// now (any m may be 0) and p.expire(now) must have run. The m units stay in the log past
// any time the answer can be, so the log must free n from what it holds
// now with m fewer units of room.
func (p *pacer) readyAfter(now time.Time, m, n int64) time.Time {
	if p.rate < m+n || !p.stop.IsZero() && !now.Before(p.stop) {
		return never
	}
	tat := p.tat
	if now.After(tat) {
		tat = now
	}
	at := now
	if b := tat.Add(time.Duration(float64(m+n)*p.t - p.tau)); b.After(at) {
		at = b
	}
	free := p.rate - p.inLog - m
	for i := 0; free < n && i < len(p.log); i++ {
		free += p.log[i].n
		if t := p.log[i].at.Add(p.window); t.After(at) {
			at = t
		}
	}
	if !p.stop.IsZero() && !at.Before(p.stop) {
		return never
	}
	return at
}

// fallsTo returns when the log's sum falls to at most n, if nothing more is
// released: now if it has; p.expire(now) must have run.
func (p *pacer) fallsTo(now time.Time, n int64) time.Time {
	at, left := now, p.inLog
	for i := 0; left > n && i < len(p.log); i++ {
		left -= p.log[i].n
		at = p.log[i].at.Add(p.window)
	}
	return at
}

// take releases n units at now; readyAt(now, n) must be now.
func (p *pacer) take(now time.Time, n int64) {
	tat := p.tat
	if now.After(tat) {
		tat = now
	}
	p.tat = tat.Add(time.Duration(float64(n) * p.t))
	p.log = append(p.log, release{now, n})
	p.inLog += n
}

// available returns the units that could go at once at now, ignoring the
// log; p.expire(now) must have run.
func (p *pacer) available(now time.Time) int64 {
	if p.rate <= 0 {
		return 0
	}
	used := float64(max(p.tat.Sub(now), 0))
	return int64(max(p.tau-used, 0) / p.t)
}
