package algo

import (
	"time"

	"github.com/sluicehq/sluice"
)

// SlidingLog keeps the time of every admitted hit and admits hits while the
// hits of the trailing p.Window, (now-Window, now], stay within p.Limit. It is
// exact, and its state grows with Limit: one Entry per admitting request, at
// most Limit live entries (Limit is at most sluice.MaxLogLimit).
func SlidingLog(p *sluice.Policy, s State, now, hits int64) (State, sluice.Decision) {
	return pure(slidingLog, p, s, now, hits)
}

func slidingLog(p *sluice.Policy, s *State, now, hits int64, d *sluice.Decision) {
	w := int64(p.Window)
	// Count keeps the sum of the entries, so that only the entries that
	// expired since the last admission are visited.
	var es []Entry
	var used int64
	if s.Algorithm == sluice.SlidingLog {
		es, used = s.Entries, s.Count
	}
	first := 0
	for ; first < len(es) && es[first].At+w <= now; first++ {
		used -= es[first].N
	}
	live := es[first:]
	if hits > p.Limit {
		decide(d, p, p.Limit, false, used, now, lastExpiry(live, w, now), now)
		return
	}
	if used+hits > p.Limit {
		decide(d, p, p.Limit, false, used, now, lastExpiry(live, w, now), readyAt(now, used, p.Limit-hits, live, w, 0, 0))
		return
	}
	if hits == 0 {
		decide(d, p, p.Limit, true, used, now, lastExpiry(live, w, now), now)
		return
	}
	// Keep entries sorted even if this node's clock is behind the last
	// writer's: recording a hit late only makes it expire later.
	at := now
	if n := len(live); n > 0 && live[n-1].At > at {
		at = live[n-1].At
	}
	live = append(live, Entry{At: at, N: hits})
	*s = State{Algorithm: sluice.SlidingLog, Count: used + hits, Entries: live, Expires: at + w}
	decide(d, p, p.Limit, true, used+hits, now, at+w, now)
}

// lastExpiry returns when the newest of live entries expires, or now.
func lastExpiry(live []Entry, ttl, now int64) int64 {
	if len(live) == 0 {
		return now
	}
	return live[len(live)-1].At + ttl
}

// Quota counts a long period in buckets. A rolling quota splits p.Window into
// p.EffectiveBuckets() buckets aligned to the epoch (an hour as 6 buckets of
// 10 minutes, 30 days as 30 daily buckets) and admits hits while the buckets
// of the trailing Window, the current one included, hold at most p.Limit. A
// hit is forgotten when its bucket leaves the window, up to one bucket
// earlier than an exact sliding log would forget it: no interval of length
// Window minus one bucket ever admits more than Limit. Storage is at most one
// entry per bucket, whatever the traffic.
//
// With p.Calendar set to sluice.Month the quota counts calendar months in
// UTC and resets at 00:00 UTC on the first of each month.
func Quota(p *sluice.Policy, s State, now, hits int64) (State, sluice.Decision) {
	return pure(quota, p, s, now, hits)
}

func quota(p *sluice.Policy, s *State, now, hits int64, d *sluice.Decision) {
	if p.Calendar == sluice.Month {
		calendarMonth(p, s, now, hits, false, d)
		return
	}
	w := int64(p.Window)
	size := w / int64(p.EffectiveBuckets())
	bucket := align(now, size)

	// The current bucket lives in Start and Count, so that most hits change
	// only scalars; closed buckets move to Entries when a new one opens.
	var es []Entry
	var cur, count int64
	if s.Algorithm == sluice.Quota {
		es, cur, count = s.Entries, s.Start, s.Count
		// A state written by a node whose clock is ahead: count in its
		// bucket, which keeps the buckets in order and only errs on the
		// side of caution.
		bucket = max(bucket, cur)
	}
	used, first := sumLive(es, now, w)
	live := es[first:]
	if cur+w > now {
		used += count
	}
	reset := lastExpiry(live, w, now)
	if count > 0 && cur+w > now {
		reset = cur + w
	}
	if hits > p.Limit {
		decide(d, p, p.Limit, false, used, now, reset, now)
		return
	}
	if used+hits > p.Limit {
		decide(d, p, p.Limit, false, used, now, reset, readyAt(now, used, p.Limit-hits, live, w, cur, count))
		return
	}
	if hits == 0 {
		decide(d, p, p.Limit, true, used, now, reset, now)
		return
	}
	if cur != bucket {
		if count > 0 && cur+w > now {
			live = append(live, Entry{At: cur, N: count})
		}
		cur, count = bucket, 0
	}
	count += hits
	*s = State{Algorithm: sluice.Quota, Start: cur, Count: count, Entries: live, Expires: cur + w}
	decide(d, p, p.Limit, true, used+hits, now, cur+w, now)
}

// calendarMonth is a fixed window whose windows are UTC calendar months,
// burning the hits if burn is set (see burnHits).
func calendarMonth(p *sluice.Policy, s *State, now, hits int64, burn bool, d *sluice.Decision) {
	t := unix(now)
	y, m, _ := t.Date()
	start := unixMonth(y, m, 0)
	end := unixMonth(y, m, 1)
	var count int64
	if s.Algorithm == sluice.Quota && s.Start >= start {
		start, end, count = s.Start, s.Expires, s.Count
	}
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
	*s = State{Algorithm: sluice.Quota, Start: start, Count: count, Expires: end}
	decide(d, p, p.Limit, true, count, now, resetIf(count > 0, end, now), now)
}

// unixMonth returns the start of the UTC month add months after year y,
// month m, in nanoseconds since the epoch.
func unixMonth(y int, m time.Month, add int) int64 {
	return time.Date(y, m+time.Month(add), 1, 0, 0, 0, 0, time.UTC).UnixNano()
}
