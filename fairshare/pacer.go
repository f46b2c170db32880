package fairshare

import "time"

// pacer admits cost units so that no interval of length window holds more
// than rate of them, and releases no more than burst at once.
//
// Two constraints, both must allow a release of n units at now:
//
//	log:    sum of units released at t with now-t < window, plus n <= rate
//	bucket: T = ceil(window/rate), tau = burst*T
//	        max(tat, now) + n*T - now <= tau   (GCRA, as algo.TokenBucket)
//
// The log alone is the window bound, exact; the bucket alone would allow
// burst+rate-1 units in a window. Together they send at most rate per
// window, evenly spaced once busy. The log holds at most rate entries,
// since every release costs at least one unit.
type pacer struct {
	rate   int64
	window time.Duration
	t      time.Duration // emission interval per unit
	tau    time.Duration // bucket depth in time
	tat    time.Time     // bucket's theoretical arrival time
	log    []release     // releases of the last window, oldest first
	inLog  int64         // sum of the log's units
}

type release struct {
	at time.Time
	n  int64
}

func newPacer(rate int64, window time.Duration, burst int64) pacer {
	t := (window + time.Duration(rate) - 1) / time.Duration(rate)
	return pacer{rate: rate, window: window, t: t, tau: time.Duration(burst) * t}
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
// go; p.expire(now) must have run.
func (p *pacer) readyAt(now time.Time, n int64) time.Time {
	at := now
	if b := p.tat.Add(time.Duration(n)*p.t - p.tau); b.After(at) {
		at = b
	}
	free := p.rate - p.inLog
	for i := 0; free < n && i < len(p.log); i++ {
		free += p.log[i].n
		if t := p.log[i].at.Add(p.window); t.After(at) {
			at = t
		}
	}
	return at
}

// take releases n units at now; readyAt(now, n) must be now.
func (p *pacer) take(now time.Time, n int64) {
	tat := p.tat
	if now.After(tat) {
		tat = now
	}
	p.tat = tat.Add(time.Duration(n) * p.t)
	p.log = append(p.log, release{now, n})
	p.inLog += n
}

// available returns the units that could go at once at now, ignoring the
// log; p.expire(now) must have run.
func (p *pacer) available(now time.Time) int64 {
	used := max(p.tat.Sub(now), 0)
	return int64((p.tau - used) / p.t)
}
