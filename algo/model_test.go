package algo

import (
	"fmt"
	"math/big"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// A model is a naive per-event reference for one algorithm: it remembers
// every admitted hit and computes what is used of the capacity at any time
// from scratch. The checker below holds each algorithm to its model.
type model interface {
	// used returns what is used of the capacity at t >= the last event,
	// if nothing more is admitted.
	used(t int64) int64
	admit(t, n int64)
}

type event struct{ t, n int64 }

// fixedModel: hits in the aligned window holding t.
type fixedModel struct {
	w      int64
	events []event
}

func (m *fixedModel) admit(t, n int64) { m.events = append(m.events, event{t, n}) }
func (m *fixedModel) used(t int64) (u int64) {
	for _, e := range m.events {
		if e.t/m.w == t/m.w {
			u += e.n
		}
	}
	return u
}

// slidingModel: the current aligned window's hits plus the previous one's,
// weighted by its overlap with (t-w, t], in exact rational arithmetic.
type slidingModel struct {
	w      int64
	events []event
}

func (m *slidingModel) admit(t, n int64) { m.events = append(m.events, event{t, n}) }
func (m *slidingModel) used(t int64) int64 {
	var curr, prev int64
	for _, e := range m.events {
		switch e.t/m.w - t/m.w {
		case 0:
			curr += e.n
		case -1:
			prev += e.n
		}
	}
	overlap := (t/m.w+1)*m.w - t
	q := new(big.Int).Mul(big.NewInt(prev), big.NewInt(overlap))
	q.Quo(q, big.NewInt(m.w))
	return curr + q.Int64()
}

// exact returns the hits admitted in (t-w, t]: what an exact sliding window
// would count.
func exact(events []event, t, w int64) (u int64) {
	for _, e := range events {
		if e.t > t-w && e.t <= t {
			u += e.n
		}
	}
	return u
}

// logModel: the hits of the trailing window (t-w, t].
type logModel struct {
	w      int64
	events []event
}

func (m *logModel) admit(t, n int64)       { m.events = append(m.events, event{t, n}) }
func (m *logModel) used(t int64) (u int64) { return exact(m.events, t, m.w) }

// bucketModel: hits whose bucket is among the last b buckets at t.
type bucketModel struct {
	size, b int64
	events  []event
}

func (m *bucketModel) admit(t, n int64) { m.events = append(m.events, event{t, n}) }
func (m *bucketModel) used(t int64) (u int64) {
	for _, e := range m.events {
		if e.t/m.size > t/m.size-m.b {
			u += e.n
		}
	}
	return u
}

// monthModel: hits in the same UTC calendar month as t.
type monthModel struct{ events []event }

func (m *monthModel) admit(t, n int64) { m.events = append(m.events, event{t, n}) }
func (m *monthModel) used(t int64) (u int64) {
	y, mo, _ := time.Unix(0, t).UTC().Date()
	for _, e := range m.events {
		ey, emo, _ := time.Unix(0, e.t).UTC().Date()
		if ey == y && emo == mo {
			u += e.n
		}
	}
	return u
}

// bucketModel is a continuous token bucket kept as credit in nanoseconds: it
// fills at one per nanosecond up to burst*T, and a hit costs T. This is the
// textbook formulation, independent of GCRA's arrival time.
type tokenModel struct {
	t, burst     int64
	credit, last int64
}

func (m *tokenModel) creditAt(t int64) int64 { return min(m.credit+(t-m.last), m.burst*m.t) }
func (m *tokenModel) admit(t, n int64) {
	m.credit = m.creditAt(t) - n*m.t
	m.last = t
}
func (m *tokenModel) used(t int64) int64 {
	missing := m.burst*m.t - m.creditAt(t)
	return (missing + m.t - 1) / m.t
}

// leaseModel: units of the leases not yet expired.
type leaseModel struct {
	leases map[uint64]event // id -> {expiry, units}
}

func (m *leaseModel) used(t int64) (u int64) {
	for _, l := range m.leases {
		if l.t > t {
			u += l.n
		}
	}
	return u
}
func (m *leaseModel) admit(int64, int64) {} // acquisitions are recorded with their id by the caller

// newModel returns the reference model for p, starting empty at t0.
func newModel(p *sluice.Policy, t0 int64) model {
	w := int64(p.Window)
	switch p.Algorithm {
	case sluice.FixedWindow:
		return &fixedModel{w: w}
	case sluice.SlidingWindow:
		return &slidingModel{w: w}
	case sluice.SlidingLog:
		return &logModel{w: w}
	case sluice.TokenBucket:
		// Computed here, not by the algorithm's EmissionInterval: the time
		// per token is the window over the limit, rounded up, and the
		// bucket's depth must fit int64 nanoseconds, which math/big checks.
		t := new(big.Int).Add(big.NewInt(w), big.NewInt(p.Limit-1))
		t.Quo(t, big.NewInt(p.Limit))
		burst := p.Burst
		if burst == 0 {
			burst = p.Limit
		}
		depth := new(big.Int).Mul(t, big.NewInt(burst))
		if !depth.IsInt64() || !t.IsInt64() {
			panic(fmt.Sprintf("model: a valid policy's bucket is %v ns deep, past int64", depth))
		}
		m := &tokenModel{t: t.Int64(), burst: burst, last: t0}
		m.credit = depth.Int64()
		return m
	case sluice.Concurrency:
		return &leaseModel{leases: map[uint64]event{}}
	case sluice.Quota:
		if p.Calendar == sluice.Month {
			return &monthModel{}
		}
		b := int64(p.EffectiveBuckets())
		return &bucketModel{size: w / b, b: b}
	}
	panic("no model for " + p.Algorithm.String())
}

// checker runs one algorithm against its model, one request at a time.
type checker struct {
	t      testing.TB
	p      *sluice.Policy
	m      model
	s      State
	ids    []uint64 // every lease id issued
	step   int
	events []event // every admitted hit, for bound checks
}

func newChecker(t testing.TB, p *sluice.Policy, t0 int64) *checker {
	t.Helper()
	if err := p.Validate(); err != nil {
		t.Fatalf("invalid policy %+v: %v", p, err)
	}
	return &checker{t: t, p: p, m: newModel(p, t0)}
}

// decide asks for hits at now and checks the decision against the model:
// Allowed, Remaining, ResetAt and RetryAfter must be exactly what the model
// says, with RetryAfter the shortest wait that works.
func (c *checker) decide(now, hits int64) sluice.Decision {
	c.t.Helper()
	c.step++
	capacity := Capacity(c.p)
	want := hits <= capacity && c.m.used(now)+hits <= capacity
	ns, d := Decide(c.p, c.s, now, hits)
	if d.Allowed != want {
		c.t.Fatalf("step %d: %v at t=%d hits=%d used=%d: allowed=%v, model says %v", c.step, c.p.Algorithm, now, hits, c.m.used(now), d.Allowed, want)
	}
	if d.Allowed {
		c.s = ns
		if hits > 0 {
			c.m.admit(now, hits)
			c.events = append(c.events, event{now, hits})
			if c.p.Algorithm == sluice.Concurrency {
				c.m.(*leaseModel).leases[d.Lease.ID] = event{d.Lease.ExpiresAt.UnixNano(), hits}
				c.ids = append(c.ids, d.Lease.ID)
			}
		}
		if d.RetryAfter != 0 {
			c.t.Fatalf("step %d: allowed with RetryAfter %v", c.step, d.RetryAfter)
		}
	}
	c.checkCommon(now, d)
	if !d.Allowed && hits <= capacity {
		at := now + int64(d.RetryAfter)
		if d.RetryAfter <= 0 {
			c.t.Fatalf("step %d: denied with RetryAfter %v", c.step, d.RetryAfter)
		}
		if u := c.m.used(at); u+hits > capacity {
			c.t.Fatalf("step %d: at now+RetryAfter (%v) used=%d, %d hits still do not fit in %d", c.step, d.RetryAfter, u, hits, capacity)
		}
		if u := c.m.used(at - 1); u+hits <= capacity {
			c.t.Fatalf("step %d: RetryAfter %v is not the shortest wait: used=%d a nanosecond earlier", c.step, d.RetryAfter, u)
		}
	}
	c.checkBounds(now)
	return d
}

// checkCommon checks Policy, Limit, Remaining and ResetAt against the model.
func (c *checker) checkCommon(now int64, d sluice.Decision) {
	c.t.Helper()
	capacity := Capacity(c.p)
	used := c.m.used(now)
	if d.Policy != c.p.Name || d.Limit != capacity {
		c.t.Fatalf("step %d: policy %q limit %d, want %q %d", c.step, d.Policy, d.Limit, c.p.Name, capacity)
	}
	if d.Remaining != capacity-used {
		c.t.Fatalf("step %d: remaining %d, model says %d (used %d of %d)", c.step, d.Remaining, capacity-used, used, capacity)
	}
	reset := d.ResetAt.UnixNano()
	if reset < now {
		c.t.Fatalf("step %d: ResetAt %d before now %d", c.step, reset, now)
	}
	if u := c.m.used(reset); u != 0 {
		c.t.Fatalf("step %d: at ResetAt (now+%v) used=%d, want 0", c.step, time.Duration(reset-now), u)
	}
	if reset > now {
		if u := c.m.used(reset - 1); u == 0 {
			c.t.Fatalf("step %d: ResetAt now+%v is late: nothing is used a nanosecond earlier", c.step, time.Duration(reset-now))
		}
	}
}

// checkBounds holds the approximations to their documented bounds against
// an exact count of the admitted hits.
func (c *checker) checkBounds(now int64) {
	c.t.Helper()
	w := int64(c.p.Window)
	switch {
	case c.p.Algorithm == sluice.SlidingWindow:
		if got := exact(c.events, now, w); got > 2*c.p.Limit {
			c.t.Fatalf("step %d: sliding window admitted %d in a trailing window, bound is 2*%d", c.step, got, c.p.Limit)
		}
		var aligned int64
		for _, e := range c.events {
			if e.t/w == now/w {
				aligned += e.n
			}
		}
		if aligned > c.p.Limit {
			c.t.Fatalf("step %d: sliding window admitted %d in one aligned window, limit %d", c.step, aligned, c.p.Limit)
		}
	case c.p.Algorithm == sluice.Quota && c.p.Calendar == sluice.Rolling:
		size := w / int64(c.p.EffectiveBuckets())
		if got := exact(c.events, now, w-size); got > c.p.Limit {
			c.t.Fatalf("step %d: quota admitted %d within window-bucket %v, limit %d", c.step, got, time.Duration(w-size), c.p.Limit)
		}
	}
}

// release releases or renews the i-th lease ever issued and checks the
// answer against the model.
func (c *checker) lease(now int64, i int, renew bool) {
	c.t.Helper()
	c.step++
	if len(c.ids) == 0 {
		return
	}
	id := c.ids[i%len(c.ids)]
	lm := c.m.(*leaseModel)
	l, ok := lm.leases[id]
	live := ok && l.t > now
	var ns State
	var d sluice.Decision
	var found bool
	if renew {
		ns, d, found = Renew(c.p, c.s, now, id)
	} else {
		ns, d, found = Release(c.p, c.s, now, id)
	}
	if found != live {
		c.t.Fatalf("step %d: renew=%v lease %d at %d: found=%v, model says live=%v", c.step, renew, id, now, found, live)
	}
	if !found {
		if !statesEqual(ns, c.s) {
			c.t.Fatalf("step %d: a lease not found changed the state", c.step)
		}
		return
	}
	c.s = ns
	if renew {
		exp := now + int64(c.p.EffectiveLeaseTTL())
		lm.leases[id] = event{exp, l.n}
		if d.Lease.ID != id || d.Lease.ExpiresAt.UnixNano() != exp {
			c.t.Fatalf("step %d: renewed lease %+v, want id %d expiring %d", c.step, d.Lease, id, exp)
		}
	} else {
		delete(lm.leases, id)
	}
	if !d.Allowed {
		c.t.Fatalf("step %d: lease update not allowed", c.step)
	}
	c.checkCommon(now, d)
}

func statesEqual(a, b State) bool {
	if a.Algorithm != b.Algorithm || a.Start != b.Start || a.Count != b.Count || a.Prev != b.Prev || a.TAT != b.TAT || a.Expires != b.Expires || len(a.Entries) != len(b.Entries) {
		return false
	}
	for i := range a.Entries {
		if a.Entries[i] != b.Entries[i] {
			return false
		}
	}
	return true
}
