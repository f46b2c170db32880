package algo

import (
	"slices"

	"github.com/sluicehq/sluice"
)

// Acquire takes a lease of hits units of a concurrency policy: admitted if
// the units held by live leases plus hits stay within p.Limit. The lease
// lives p.EffectiveLeaseTTL() unless renewed (Renew) and returns its units
// when released (Release) or when it expires, so a holder that dies never
// leaks capacity. The allowed Decision carries the lease's ID and expiry.
//
// Lease IDs are unique per key: an ID Acquire names is the acquisition time
// in nanoseconds, or one more than the last ID it named if that is later. A
// key's state is discarded only after its last lease expired, so an ID is
// never issued twice for a key even then. A caller may name its own lease
// instead (AcquireNamed), with ids that have sluice.NamedLease set.
//
// Remaining is the units free now, ResetAt the time the last live lease
// expires, and RetryAfter, for a denial, the wait until enough leases expire
// if none is released.
func Acquire(p *sluice.Policy, s State, now, hits int64) (State, sluice.Decision) {
	var d sluice.Decision
	acquire(p, &s, now, hits, 0, nil, &d)
	return s, d
}

// AcquireNamed sets the caller's lease id (sluice.NamedLease set) to hits
// units: if it is live its units count as free for the new size, which
// takes its place if admitted; otherwise it is taken anew. A denial leaves
// it as it was. Setting a lease twice to the same units is the same as
// once, so a caller that does not know whether a write landed makes it
// again.
func AcquireNamed(p *sluice.Policy, s State, now, hits int64, id uint64) (State, sluice.Decision) {
	var d sluice.Decision
	acquire(p, &s, now, hits, id, nil, &d)
	return s, d
}

func acquire(p *sluice.Policy, s *State, now, hits int64, named uint64, dead []uint16, d *sluice.Decision) {
	var es []Entry
	if s.Algorithm == sluice.Concurrency {
		es = dropOwners(s.Entries, dead)
	}
	used, expired := leasesLive(es, now)
	var freed int64 // the named lease's units, if live
	leases := 0     // live leases but the named one
	for _, e := range es {
		switch {
		case e.At <= now:
		case named != 0 && e.ID == named:
			freed = e.N
		default:
			leases++
		}
	}
	used -= freed
	switch {
	case hits > p.Limit:
		decide(d, p, p.Limit, false, used+freed, now, leasesResetAt(es, now), now)
		return
	case used+hits > p.Limit:
		decide(d, p, p.Limit, false, used+freed, now, leasesResetAt(es, now), leasesFreeAt(es, now, used+freed, p.Limit-hits+freed))
		return
	case hits == 0:
		decide(d, p, p.Limit, true, used+freed, now, leasesResetAt(es, now), now)
		return
	case leases >= sluice.MaxLeases:
		// As many leases as a counter holds: the next to end frees a
		// place.
		decide(d, p, p.Limit, false, used+freed, now, leasesResetAt(es, now), leasesFirstEnd(es, now))
		return
	}
	var last int64 // the last id this key named itself
	if s.Algorithm == sluice.Concurrency {
		last = s.TAT
	}
	id := named
	if id == 0 {
		id = uint64(max(now, last+1))
		last = int64(id)
	}
	expires := now + int64(p.EffectiveLeaseTTL())
	if expired || freed > 0 {
		es = pruneLeases(es, now, len(es)+1)
		if freed > 0 {
			es = slices.DeleteFunc(es, func(e Entry) bool { return e.ID == named })
		}
	}
	es = append(es, Entry{At: expires, N: hits, ID: id})
	*s = State{Algorithm: sluice.Concurrency, TAT: last, Entries: es, Expires: leasesResetAt(es, now)}
	decide(d, p, p.Limit, true, used+hits, now, s.Expires, now)
	d.Lease = sluice.Lease{ID: id, ExpiresAt: unix(expires)}
}

// dropOwners returns es without the leases of the owners dead: es itself
// if it has none, else a copy.
func dropOwners(es []Entry, dead []uint16) []Entry {
	if len(dead) == 0 {
		return es
	}
	isDead := func(e Entry) bool {
		o, ok := sluice.LeaseOwner(e.ID)
		return ok && slices.Contains(dead, o)
	}
	if !slices.ContainsFunc(es, isDead) {
		return es
	}
	return slices.DeleteFunc(slices.Clone(es), isDead)
}

// leasesFirstEnd returns when the first live lease expires, or now.
func leasesFirstEnd(es []Entry, now int64) int64 {
	at := int64(0)
	for _, e := range es {
		if e.At > now && (at == 0 || e.At < at) {
			at = e.At
		}
	}
	return max(at, now)
}

// Release ends lease id, returning its units at once. It reports false, and
// returns s unchanged, if the lease is not live.
func Release(p *sluice.Policy, s State, now int64, id uint64) (State, sluice.Decision, bool) {
	return leaseUpdate(p, s, now, id, 0)
}

// Renew extends lease id to now + p.EffectiveLeaseTTL(). It reports false,
// and returns s unchanged, if the lease is not live: an expired lease cannot
// be revived, since its units may already be held by another.
func Renew(p *sluice.Policy, s State, now int64, id uint64) (State, sluice.Decision, bool) {
	return leaseUpdate(p, s, now, id, now+int64(p.EffectiveLeaseTTL()))
}

// leaseUpdate sets the expiry of live lease id to expires, dropping it when
// expires is zero. The Decision carries the lease as it is afterwards.
func leaseUpdate(p *sluice.Policy, s State, now int64, id uint64, expires int64) (State, sluice.Decision, bool) {
	if s.Algorithm != sluice.Concurrency {
		return s, sluice.Decision{}, false
	}
	// Entries are in the order taken, not of ids: a named lease's id is
	// the caller's.
	i := slices.IndexFunc(s.Entries, func(e Entry) bool { return e.ID == id })
	if i < 0 || s.Entries[i].At <= now {
		return s, sluice.Decision{}, false
	}
	// Copy: the old state's entries must stay as they were.
	es := pruneLeases(s.Entries, now, len(s.Entries))
	i = slices.IndexFunc(es, func(e Entry) bool { return e.ID == id })
	var lease sluice.Lease
	if expires == 0 {
		es = slices.Delete(es, i, i+1)
	} else {
		es[i].At = expires
		lease = sluice.Lease{ID: id, ExpiresAt: unix(expires)}
	}
	used, _ := leasesLive(es, now)
	ns := State{Algorithm: sluice.Concurrency, TAT: s.TAT, Entries: es, Expires: leasesResetAt(es, now)}
	if len(es) == 0 {
		// Keep the last ID so that IDs keep increasing; the state can go
		// once the clock has passed it.
		ns.Expires = max(now, s.TAT+1)
	}
	var d sluice.Decision
	decide(&d, p, p.Limit, true, used, now, leasesResetAt(es, now), now)
	d.Lease = lease
	return ns, d, true
}

// leasesLive returns the units of the leases live at now, and whether any
// lease has expired.
func leasesLive(es []Entry, now int64) (used int64, expired bool) {
	for _, e := range es {
		if e.At > now {
			used += e.N
		} else {
			expired = true
		}
	}
	return used, expired
}

// pruneLeases returns a new slice with the live leases of es, with room for
// n entries.
func pruneLeases(es []Entry, now int64, n int) []Entry {
	out := make([]Entry, 0, n)
	for _, e := range es {
		if e.At > now {
			out = append(out, e)
		}
	}
	return out
}

// leasesResetAt returns when the last live lease expires, or now.
func leasesResetAt(es []Entry, now int64) int64 {
	at := now
	for _, e := range es {
		at = max(at, e.At)
	}
	return at
}

// leasesFreeAt returns the earliest time at which the live leases hold at
// most k units, if none is released or renewed.
func leasesFreeAt(es []Entry, now, used, k int64) int64 {
	if used <= k {
		return now
	}
	live := make([]Entry, 0, len(es))
	for _, e := range es {
		if e.At > now {
			live = append(live, e)
		}
	}
	slices.SortFunc(live, func(a, b Entry) int { return int(min(max(a.At-b.At, -1), 1)) })
	return readyAt(now, used, k, live, 0, 0, 0)
}
