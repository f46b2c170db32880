package gateway

import (
	"context"
	"errors"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/sluicehq/sluice"
)

// A node counts its live connections of a tenant, and of a session, in one
// lease each, sized to them: a connect grows the lease by one and a
// disconnect shrinks it, each in one atomic step of the store, so that a
// count of any size takes one entry per node in its counter, and stays
// exact and all-or-nothing with the other limits under concurrent connects
// on every node.
//
// How a dead node's counts come back: without Liveness, a lease lives three
// renewals and the node renews it every renewal, a write per count per
// renewal. With Liveness (a store shared by nodes), a lease carries the tag
// of its node's run (sluice.OwnedLease) and lives as long as the run: it
// is written when its count changes, and otherwise only once a third of its
// backstop (CountBackstop) has passed, so that idle connections cost no
// write; every decision of a count names the runs known dead
// (sluice.Check.DeadOwners), whose leases then count for nothing and go
// with the write. A node whose run lapsed (its heartbeat did not land in
// time) runs under a new tag, and counts its connections anew under it.
//
// The node names its leases (sluice.Check.Lease): a count's lease id is a
// hash of the count under a seed of this gateway's own, with its run's
// tag. Setting a named lease to n units is the same write however often it
// is made, so a write whose outcome the node does not know (a store that
// timed out after the write landed) is simply made again at the next
// change or renewal, and no lease is ever left behind counting connections
// that are gone.
//
// One change of a tenant's count at a time is at work on this node (its
// turn). Connects that arrive meanwhile wait together, and the next to take
// the turn decides them all in one store decision (a batch: the two
// tenant limits grown by their number, and each of their sessions' two by
// its share), so that a burst of connects costs a few decisions, not one
// each. A batch denied is decided again one connect at a time, in order:
// a limit admits as many as one at a time would, exactly.

// countKey names one of the node's counts: a tenant's (session "") or a
// session's.
type countKey struct{ tenant, session string }

// unknown is a nodeCount's held after a write whose outcome is not known.
const unknown = -1

// nodeCount is the node's lease on one count: units connections, counted
// in the store by the named lease id of held units. held differs from
// units after a change the store could not make, or may not have made (a
// failed write: held is unknown); the next change or renewal brings it to
// units. Meanwhile the lease counts more than there are, never fewer,
// except that a grow that timed out may have landed: it then counts the
// connects it refused (up to a batch's) until that next write.
//
// units changes only under the turns of the count and of its tenant's
// count (for a tenant's count, the same), so that a holder of the tenant's
// turn may read its sessions' units; held, id and check under the count's
// own turn.
type nodeCount struct {
	turn  chan struct{} // holds one token: taken by the change at work
	mu    sync.Mutex    // guards asks
	asks  []*ask        // a tenant's connects waiting for a decision
	key   countKey      // the count's
	id    uint64        // the lease's name, with its run's tag (sluice.LeaseOwner)
	held  int64         // the units of the lease in the store: 0 none, or unknown
	wrote time.Time     // when the lease was last written
	units int64         // the connections it counts
	gone  atomic.Int64  // connections gone whose leave could not take the turn: units to take off
	users int           // connects and connections that need it, for its removal; under Gateway.countsMu
	check sluice.Check  // its policy, as of the latest connect: the limit to resize within
}

// settle takes off the units of the connections whose leave could not
// take the turn. The caller holds the turns units changes under.
func (n *nodeCount) settle() {
	if d := n.gone.Swap(0); d > 0 {
		n.units = max(n.units-d, 0)
	}
}

// leaseID names the node's lease on count k under its run's tag.
func (g *Gateway) leaseID(k countKey, tag uint16) uint64 {
	var h maphash.Hash
	h.SetSeed(g.seed)
	h.WriteString(k.tenant)
	h.WriteByte(0)
	h.WriteString(k.session)
	return sluice.OwnedLease(tag, h.Sum64())
}

// own brings n's lease to this node's run: after a lapse, its connections
// are counted anew under the new tag, and the lease of the old one, dead,
// goes with that write. The caller holds the count's turn.
func (g *Gateway) own(n *nodeCount) {
	tag, _ := g.self()
	if owner, _ := sluice.LeaseOwner(n.id); owner == tag {
		return
	}
	n.id = g.leaseID(n.key, tag)
	if n.held != 0 {
		n.held = unknown
	}
}

// written records a write of n's lease that left it at held units.
func (g *Gateway) written(n *nodeCount, held int64) {
	n.held = held
	if held != unknown {
		n.wrote = g.opts.Now()
	}
}

// count returns the node's count of k, made if need be, for one user more.
func (g *Gateway) count(k countKey) *nodeCount {
	g.countsMu.Lock()
	defer g.countsMu.Unlock()
	n := g.counts[k]
	if n == nil {
		tag, _ := g.self()
		n = &nodeCount{turn: make(chan struct{}, 1), key: k, id: g.leaseID(k, tag)}
		n.turn <- struct{}{}
		g.counts[k] = n
	}
	n.users++
	return n
}

// done gives up a user of the count of k. A caller that holds the count's
// turn (owned) removes it with its last user if it holds no lease; a
// lease left, or one that may be, and a count given up without its turn,
// are the renewals' to release and remove.
func (g *Gateway) done(k countKey, n *nodeCount, owned bool) {
	g.countsMu.Lock()
	defer g.countsMu.Unlock()
	if n.users--; n.users == 0 && owned && n.held == 0 && n.units == 0 && n.gone.Load() == 0 && g.counts[k] == n {
		delete(g.counts, k)
	}
}

// take takes the turns of counts, in order, within ctx; it returns their
// release, or false if ctx ended first.
func take(ctx context.Context, counts ...*nodeCount) (func(), bool) {
	for i, n := range counts {
		select {
		case <-n.turn:
		case <-ctx.Done():
			for _, m := range counts[:i] {
				m.turn <- struct{}{}
			}
			return nil, false
		}
	}
	return func() {
		for _, n := range counts {
			n.turn <- struct{}{}
		}
	}, true
}

// ask is a connect waiting, with others of its tenant, for its decision.
type ask struct {
	c       *conn
	st      sluice.TenantSettings
	sn      *nodeCount // its session's count
	res     sluice.Result
	err     error
	decided chan struct{} // closed once res and err are set, and, if refused, its counts given up
}

// maxBatch caps the connects of one batch; a batch also takes at most
// batchSessions sessions, two checks each beside the tenant's two.
const (
	maxBatch      = 64
	batchSessions = (sluice.MaxChecks - 2) / 2
)

// admit decides a connect of tenant to session: the four limits, all or
// nothing, growing this node's leases on the two connection counts by one,
// alone or in a batch with the tenant's other connects waiting. On
// admission the counts are the connection's (c.counts); otherwise they are
// given up.
func (g *Gateway) admit(ctx context.Context, c *conn, st sluice.TenantSettings) (sluice.Result, error) {
	keys := [2]countKey{{c.tenant, ""}, {c.tenant, c.session}}
	tn, sn := g.count(keys[0]), g.count(keys[1])
	a := &ask{c: c, st: st, sn: sn, decided: make(chan struct{})}
	tn.mu.Lock()
	tn.asks = append(tn.asks, a)
	tn.mu.Unlock()
	for wait := true; wait; {
		select {
		case <-a.decided:
			wait = false
		case <-tn.turn:
			// This connect's turn: it decides the connects waiting, its
			// own among the first unless another took it already.
			g.decideAsks(c.tenant, tn)
			tn.turn <- struct{}{}
		case <-ctx.Done():
			tn.mu.Lock()
			i := slices.Index(tn.asks, a)
			if i >= 0 {
				tn.asks = slices.Delete(tn.asks, i, i+1)
			}
			tn.mu.Unlock()
			if i >= 0 {
				g.done(keys[0], tn, false)
				g.done(keys[1], sn, false)
				return sluice.Result{}, ctx.Err()
			}
			<-a.decided // being decided, within the decider's bound
			wait = false
		}
	}
	if a.err == nil && a.res.Allowed {
		c.counts = [2]*nodeCount{tn, sn}
	}
	return a.res, a.err
}

// decide gives a its answer; a connect refused gives up its counts, under
// their turns if the caller holds them (owned).
func (g *Gateway) decide(a *ask, tn *nodeCount, res sluice.Result, err error, owned [2]bool) {
	a.res, a.err = res, err
	if err != nil || !res.Allowed {
		g.done(countKey{a.c.tenant, ""}, tn, owned[0])
		g.done(countKey{a.c.tenant, a.c.session}, a.sn, owned[1])
	}
	close(a.decided)
}

// decideAsks decides the first batch of the connects waiting on tenant
// count tn, whose turn the caller holds: in one decision if they all fit,
// else one at a time. Each store decision is bounded by WriteTimeout,
// whatever the connects' own contexts.
func (g *Gateway) decideAsks(tenant string, tn *nodeCount) {
	tn.settle()
	// The batch: the first connects waiting, of the same settings, as
	// many as fit this node's counts and the caps. A connect that cannot
	// fit this node's counts even alone is refused, without a decision
	// of the store; one that fits alone but not with the batch waits for
	// the next.
	tn.mu.Lock()
	var batch, over []*ask
	var sessions []*nodeCount
	var share []int64 // each session's connects in the batch
	rest := tn.asks[:0]
	for _, a := range tn.asks {
		if len(batch) > 0 && (len(batch) == maxBatch || a.st != batch[0].st) {
			rest = append(rest, a)
			continue
		}
		i := slices.Index(sessions, a.sn)
		var in int64 // the connects of a's session in the batch
		if i >= 0 {
			in = share[i]
		}
		switch {
		case tn.units+1 > a.st.TenantConnections:
			a.res = g.fullHere(policyTenantConns, a.st.TenantConnections)
			over = append(over, a)
		case a.sn.units+1 > a.st.ConnectionsPerSession:
			a.res = g.fullHere(policySessionConns, a.st.ConnectionsPerSession)
			over = append(over, a)
		case tn.units+int64(len(batch))+1 > a.st.TenantConnections,
			a.sn.units+in+1 > a.st.ConnectionsPerSession,
			i < 0 && len(sessions) == batchSessions:
			rest = append(rest, a)
		default:
			if i < 0 {
				sessions, share = append(sessions, a.sn), append(share, 0)
				i = len(sessions) - 1
			}
			share[i]++
			batch = append(batch, a)
		}
	}
	clear(tn.asks[len(rest):])
	tn.asks = rest
	tn.mu.Unlock()
	for _, a := range over {
		// Refused by this node's counts alone: nothing asked of the
		// store, nothing consumed. Its session's count, if left unused,
		// goes at the next renewal.
		g.decide(a, tn, a.res, nil, [2]bool{true, false})
	}
	if len(batch) == 0 {
		return
	}
	if _, live := g.self(); !live {
		// The other nodes may count this node's leases as a dead run's:
		// nothing it admitted would count there.
		for _, a := range batch {
			g.decide(a, tn, sluice.Result{}, errNotLive, [2]bool{true, false})
		}
		return
	}
	ctx, cancel := context.WithTimeout(g.ctx, g.opts.WriteTimeout)
	give, ok := take(ctx, sessions...)
	cancel()
	if !ok {
		for _, a := range batch {
			g.decide(a, tn, sluice.Result{}, context.DeadlineExceeded, [2]bool{true, false})
		}
		return
	}
	defer give()
	g.own(tn)
	for _, sn := range sessions {
		sn.settle()
		g.own(sn)
	}
	if len(batch) > 1 && g.admitBatch(tenant, tn, sessions, share, batch) {
		return
	}
	for _, a := range batch {
		res, err := g.admitOne(tenant, tn, a)
		g.decide(a, tn, res, err, [2]bool{true, true})
	}
}

// admitBatch decides the connects of batch in one decision: the tenant's
// count grown by their number and its connect rate spent by it, and each
// session's by its share. It reports false, deciding nothing, if they do
// not all fit: they are then decided one at a time. A store that fails
// fails them all.
func (g *Gateway) admitBatch(tenant string, tn *nodeCount, sessions []*nodeCount, share []int64, batch []*ask) bool {
	st := batch[0].st
	checks := make([]sluice.Check, 0, 2+2*len(sessions))
	for i, sn := range sessions {
		ch := g.admission(st, batch[slices.IndexFunc(batch, func(a *ask) bool { return a.sn == sn })].c.session)
		if i == 0 {
			tn.check = ch[0]
			checks = append(checks, ch[0], ch[2])
			checks[0].Hits, checks[0].Lease = tn.units+int64(len(batch)), tn.id
			checks[1].Hits = int64(len(batch))
		}
		sn.check = ch[1]
		ch[1].Hits, ch[1].Lease = sn.units+share[i], sn.id
		ch[3].Hits = share[i]
		checks = append(checks, ch[1], ch[3])
	}
	for _, ch := range checks {
		if ch.Hits > ch.Policy.Capacity() {
			// Never all admissible (a request past a policy's capacity
			// is not even valid): one at a time admits those that fit.
			return false
		}
	}
	ctx, cancel := context.WithTimeout(g.ctx, g.opts.WriteTimeout)
	res, err := g.opts.Limiter.Check(ctx, sluice.Request{Tenant: tenant, Checks: checks, Hits: 1})
	cancel()
	switch {
	case sluice.KindOf(err) == sluice.KindInvalid:
		return false // decided nothing: one at a time, each on its own
	case err != nil || res.Decision.FailedClosed:
		// The write may have landed: the next write sets the leases right.
		tn.held = unknown
		for _, sn := range sessions {
			sn.held = unknown
		}
	case !res.Allowed:
		return false
	default:
		tn.units += int64(len(batch))
		g.written(tn, heldAfter(tn, res.Decisions[0]))
		for i, sn := range sessions {
			sn.units += share[i]
			g.written(sn, heldAfter(sn, res.Decisions[2+2*i]))
		}
	}
	for _, a := range batch {
		g.decide(a, tn, res, err, [2]bool{true, true})
	}
	return true
}

// fullHere is the refusal of a connect by a connection limit that this
// node's connections alone fill: no store can admit one more. Another
// connection's end is the soonest a connect can go.
func (g *Gateway) fullHere(policy string, limit int64) sluice.Result {
	d := sluice.Decision{Policy: policy, Limit: limit, RetryAfter: time.Second, ResetAt: g.opts.Now().Add(time.Second)}
	return sluice.Result{Decision: d, Decisions: []sluice.Decision{d}}
}

// heldAfter is a count's held units after an admitted decision d of its
// lease: its units, unless the store did not write it (admitted by fail
// mode), then unknown.
func heldAfter(n *nodeCount, d sluice.Decision) int64 {
	if d.Lease.ID != n.id {
		return unknown
	}
	return n.units
}

// admitOne decides one connect alone: the four limits, all or nothing.
// The caller holds the turns of its counts.
func (g *Gateway) admitOne(tenant string, tn *nodeCount, a *ask) (sluice.Result, error) {
	sn := a.sn
	checks := g.admission(a.st, a.c.session)
	tn.check, sn.check = checks[0], checks[1] // the limits as of now, to resize within
	checks[0].Hits, checks[0].Lease = tn.units+1, tn.id
	checks[1].Hits, checks[1].Lease = sn.units+1, sn.id
	if i := slices.IndexFunc(checks[:2], func(ch sluice.Check) bool { return ch.Hits > ch.Policy.Limit }); i >= 0 {
		return g.fullHere(checks[i].Policy.Name, checks[i].Policy.Limit), nil
	}
	ctx, cancel := context.WithTimeout(g.ctx, g.opts.WriteTimeout)
	res, err := g.opts.Limiter.Check(ctx, sluice.Request{Tenant: tenant, Checks: checks, Hits: 1})
	cancel()
	switch {
	case err != nil || res.Decision.FailedClosed:
		// The write may have landed: the next write sets the leases right.
		tn.held, sn.held = unknown, unknown
	case res.Allowed:
		tn.units++
		sn.units++
		g.written(tn, heldAfter(tn, res.Decisions[0]))
		g.written(sn, heldAfter(sn, res.Decisions[1]))
	}
	return res, err
}

// leave takes the connection out of this node's counts: each lease shrinks
// to the connections left, or is released with the last. A change the
// store could not make is made by the next change or renewal; meanwhile
// the lease counts one connection more than there is, never fewer. A
// leave that cannot take the turns in time leaves its unit to be taken off
// by the next holder (gone).
func (c *conn) leave(ctx context.Context) {
	g := c.g
	if c.counts[0] == nil {
		return
	}
	keys := [2]countKey{{c.tenant, ""}, {c.tenant, c.session}}
	give, ok := take(ctx, c.counts[0], c.counts[1])
	if !ok {
		g.log.Warn("gateway: leaving the connection counts timed out; the next change or renewal takes it off", "tenant", c.tenant)
		for i, n := range c.counts {
			n.gone.Add(1)
			g.done(keys[i], n, false)
		}
		return
	}
	defer give()
	for i, n := range c.counts {
		n.settle()
		g.own(n)
		n.units = max(n.units-1, 0)
		g.resize(ctx, c.tenant, n)
		g.done(keys[i], n, true)
	}
}

// resize brings a count's lease to its units: released at none, set to its
// units otherwise (a shrink always fits). It reports false if the lease was
// lost: it was not live, and its units no longer fit. A store that fails
// leaves held unknown, logged, for the next change or renewal. The caller
// holds the count's turn.
func (g *Gateway) resize(ctx context.Context, tenant string, n *nodeCount) bool {
	if n.held == n.units {
		return true
	}
	if n.units == 0 {
		_, err := g.opts.Limiter.Release(ctx, tenant, n.check, n.id)
		if err != nil && !errors.Is(err, sluice.ErrLeaseNotFound) {
			g.log.Warn("gateway: releasing a connection count; tried again at the next renewal", "tenant", tenant, "policy", n.check.Policy.Name, "err", err)
			n.held = unknown
			return true
		}
		g.written(n, 0)
		return true
	}
	check := n.check
	check.Hits, check.Lease, check.DeadOwners = n.units, n.id, g.dead()
	res, err := g.opts.Limiter.Check(ctx, sluice.Request{Tenant: tenant, Checks: []sluice.Check{check}, Hits: 1})
	switch {
	case err != nil || res.Decision.FailedClosed || (res.Allowed && res.Decisions[0].Lease.ID != n.id):
		g.log.Warn("gateway: resizing a connection count; tried again at the next change or renewal", "tenant", tenant, "policy", check.Policy.Name, "err", err)
		n.held = unknown
		return true
	case !res.Allowed:
		n.held = 0 // the lease was not live: a resize of a live one fits
		return false
	}
	g.written(n, n.units)
	return true
}

// renewCounts brings the node's leases to their counts where a change
// could not be written, and renews those written a third of their
// backstop ago (countBackstop): without Liveness, every renewal; with it,
// rarely. A lease lost (this node stalled past its life: the count may
// already be someone else's) closes the connections it counted. A count
// whose lease may be left after its last connection is released here, and
// removed.
func (g *Gateway) renewCounts(ctx context.Context) {
	g.countsMu.Lock()
	keys := make([]countKey, 0, len(g.counts))
	for k := range g.counts {
		keys = append(keys, k)
	}
	g.countsMu.Unlock()
	for _, k := range keys {
		// A session's count under its tenant's turn too, as its units
		// change (settle).
		tk := countKey{k.tenant, ""}
		n := g.count(k)
		var tn *nodeCount // the tenant's count, for a session's
		turns := []*nodeCount{n}
		if k.session != "" {
			tn = g.count(tk)
			turns = []*nodeCount{tn, n}
		}
		give, ok := take(ctx, turns...)
		if !ok {
			g.done(k, n, false)
			if tn != nil {
				g.done(tk, tn, false)
			}
			return
		}
		n.settle()
		g.own(n)
		lost := false
		switch {
		case n.held != n.units:
			lost = !g.resize(ctx, k.tenant, n)
		case n.held > 0 && g.opts.Now().Sub(n.wrote) >= g.countBackstop()/3-g.opts.RenewEvery/2:
			_, err := g.opts.Limiter.Renew(ctx, k.tenant, n.check, n.id)
			switch {
			case errors.Is(err, sluice.ErrLeaseNotFound):
				n.held = 0
				lost = !g.resize(ctx, k.tenant, n) // counted anew if it fits
			case err != nil:
				g.log.Warn("gateway: renewing a connection count", "tenant", k.tenant, "err", err)
			default:
				g.written(n, n.held)
			}
		}
		g.done(k, n, true)
		if tn != nil {
			g.done(tk, tn, true)
		}
		give()
		if lost {
			g.log.Warn("gateway: a connection count's lease was lost; closing its connections", "tenant", k.tenant)
			for _, c := range g.countedBy(k) {
				c.close(websocket.StatusTryAgainLater, "connection lease lost")
			}
		}
	}
}

// countedBy returns the connections a count counts.
func (g *Gateway) countedBy(k countKey) []*conn {
	if k.session != "" {
		return g.peers(k.tenant, k.session)
	}
	return g.tenantConns(k.tenant)
}
