// Package algo holds Sluice's rate-limiting algorithms as pure functions of
// (policy, state, now, hits) to (new state, decision). They take no locks,
// read no clock and do no I/O: a store loads a key's State, calls Decide, and
// writes the new State back atomically, or not at all if another policy of
// the same request denied.
//
// Times are int64 nanoseconds since the Unix epoch. Every algorithm answers
// with the same vocabulary: a capacity (Limit, or Burst for a token bucket),
// what is used of it at time t if nothing more arrives, and from that the
// Remaining hits, the ResetAt time at which nothing is used any more, and for
// a denial the RetryAfter wait after which the same hits would be admitted.
//
// Decide never modifies the State it is given, nor anything it can observe:
// a State may share its Entries' backing array with the State Decide
// returns, which appends only beyond the given State's length. A caller may
// therefore discard the returned State and keep the old one.
//
// A request for more hits than a policy's capacity can never be admitted; it
// is denied with a RetryAfter of zero. The engine refuses such requests as
// invalid before they reach a store.
package algo

import (
	"math/bits"
	"time"

	"github.com/sluicehq/sluice"
)

// State is the stored state of one key under one policy. The zero State is a
// key never seen. Which fields mean what depends on the algorithm that wrote
// it; a State written by another algorithm is treated as the zero State, so
// that changing a policy's algorithm starts it afresh.
type State struct {
	// Algorithm is the algorithm that wrote the state.
	Algorithm sluice.Algorithm
	// Expires is when the state becomes equivalent to the zero State and
	// may be discarded: stores sweep it and set storage TTLs from it.
	Expires int64
	// Start is the start of the current window (fixed and sliding window)
	// or bucket (quota).
	Start int64
	// Count is the number of hits in the window or bucket at Start, and
	// the sum of a sliding log's entries.
	Count int64
	// Prev is the sliding window's count of the window before Start.
	Prev int64
	// TAT is the token bucket's theoretical arrival time, and the last
	// lease id issued by a concurrency policy.
	TAT int64
	// Entries are the admitted hits of a sliding log (At: when), the closed
	// buckets of a quota (At: bucket start) and the leases of a concurrency
	// policy (At: expiry). Sorted by At, by ID for leases.
	Entries []Entry
}

// Entry is one element of State.Entries.
type Entry struct {
	At int64
	N  int64
	ID uint64
}

// Decide applies hits at now under policy p to state s and returns the new
// state and the decision. Hits of zero read the state without changing it.
// The policy must be valid (p.Validate).
func Decide(p *sluice.Policy, s State, now, hits int64) (State, sluice.Decision) {
	var d sluice.Decision
	Update(p, &s, now, hits, &d)
	return s, d
}

// Update is Decide in place, for stores that hold the state: it writes the
// decision to *d and, if the hits are admitted, the new state to *s. A
// denial leaves *s as it was. It saves the copies of Decide's values on the
// hot path of a store.
func Update(p *sluice.Policy, s *State, now, hits int64, d *sluice.Decision) {
	update(p, s, now, hits, 0, nil, false, d)
}

// UpdateOp is Update for a store's op: its policy, its hits, whether it
// burns (sluice.Op.Burn, for Burnable policies) and, for a concurrency policy, the
// lease it names and the owners known dead (sluice.Op.Lease,
// sluice.Op.DeadOwners).
func UpdateOp(op *sluice.Op, s *State, now int64, d *sluice.Decision) {
	update(op.Policy, s, now, op.Hits, op.Lease, op.DeadOwners, op.Burn, d)
}

func update(p *sluice.Policy, s *State, now, hits int64, lease uint64, dead []uint16, burn bool, d *sluice.Decision) {
	switch p.Algorithm {
	case sluice.FixedWindow:
		window(p, s, now, hits, burn, d)
	case sluice.SlidingWindow:
		slidingWindow(p, s, now, hits, d)
	case sluice.SlidingLog:
		slidingLog(p, s, now, hits, d)
	case sluice.TokenBucket:
		tokenBucket(p, s, now, hits, d)
	case sluice.Concurrency:
		acquire(p, s, now, hits, lease, dead, d)
	case sluice.Quota:
		if p.Calendar == sluice.Month {
			calendarMonth(p, s, now, hits, burn, d)
		} else {
			quota(p, s, now, hits, d)
		}
	case sluice.PenaltyBox:
		penaltyBox(p, s, now, hits, d)
	default:
		panic("algo: invalid algorithm " + p.Algorithm.String())
	}
}

// pure turns an in-place algorithm into a pure function.
func pure(f func(*sluice.Policy, *State, int64, int64, *sluice.Decision), p *sluice.Policy, s State, now, hits int64) (State, sluice.Decision) {
	var d sluice.Decision
	f(p, &s, now, hits, &d)
	return s, d
}

// Capacity returns the most hits one request can be admitted under p.
func Capacity(p *sluice.Policy) int64 { return p.Capacity() }

// decide writes a Decision. used is what is used of capacity after the
// decision; resetAt and retryAt are absolute times, clamped to now.
func decide(d *sluice.Decision, p *sluice.Policy, capacity int64, allowed bool, used, now, resetAt, retryAt int64) {
	// Field by field: a composite literal is built in a temporary and
	// copied, and the copy's wide loads stall on the temporary's narrow
	// stores, a tenth of a decision on a hot key.
	var retry time.Duration
	if !allowed && retryAt > now {
		retry = time.Duration(retryAt - now)
	}
	d.Policy = p.Name
	d.Allowed = allowed
	d.Limit = capacity
	d.Remaining = max(capacity-used, 0)
	d.ResetAt = unix(max(resetAt, now))
	d.RetryAfter = retry
	d.Lease = sluice.Lease{}
	d.Shadowed, d.FailedOpen, d.FailedClosed = false, false, false
}

func unix(ns int64) time.Time { return time.Unix(0, ns).UTC() }

// align returns the start of the period of length w that holds t, counting
// periods from the Unix epoch.
func align(t, w int64) int64 {
	r := t % w
	if r < 0 {
		r += w
	}
	return t - r
}

// mulDiv returns floor(a*b/c) for non-negative a, b and positive c, and
// whether the quotient overflowed an int64 (it is then meaningless).
func mulDiv(a, b, c int64) (int64, bool) {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return 0, true
	}
	q, _ := bits.Div64(hi, lo, uint64(c))
	if q > 1<<63-1 {
		return 0, true
	}
	return int64(q), false
}

// sumLive returns the hits of entries that have not expired at now, where
// entry e expires at e.At+ttl, and the index of the first live entry.
func sumLive(es []Entry, now, ttl int64) (used int64, first int) {
	first = len(es)
	for i := len(es) - 1; i >= 0 && es[i].At+ttl > now; i-- {
		used += es[i].N
		first = i
	}
	return used, first
}

// readyAt returns the earliest time at which used, less the hits of the
// entries expired by then, is at most k. Entries expire in order, each at
// At+ttl; the tail (tailAt, tailN) expires last. It returns now if used is
// already at most k.
func readyAt(now, used, k int64, es []Entry, ttl, tailAt, tailN int64) int64 {
	if used <= k {
		return now
	}
	for _, e := range es {
		if e.At+ttl <= now {
			continue
		}
		used -= e.N
		if used <= k {
			return e.At + ttl
		}
	}
	if tailN > 0 {
		return tailAt + ttl
	}
	return now
}
