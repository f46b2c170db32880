package gateway

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/sluicehq/sluice"
)

// How connections end other than by their client or the management API:
// their session or tenant deleted (CloseSession, CloseTenant), and the
// gateway's two loops: the expiry sweep (sessions expired or deleted
// elsewhere, tenants deleted, connections idle or too old, and idle silo
// queues released) and the renewal of this node's leases and
// registrations.

// Close codes of the gateway, in the range for applications.
const (
	statusExpired = websocket.StatusCode(4000) // the session expired
	statusDeleted = websocket.StatusCode(4001) // the session or its tenant was deleted
)

// CloseSession closes a session's connections at once (its deletion), on
// this node and on every other live node registered as holding some (each
// reads the session and closes its connections if it is gone): all with
// 4001. It returns once every node has answered, or after the write
// timeout.
func (g *Gateway) CloseSession(tenant, session string) {
	g.flights.forget(sessionKey{tenant, session})
	for _, c := range g.peers(tenant, session) {
		c.close(statusDeleted, "session deleted")
	}
	if g.opts.Registry == nil || g.opts.Peer == nil {
		return
	}
	ctx, cancel := context.WithTimeout(g.ctx, g.opts.WriteTimeout)
	defer cancel()
	nodes, err := g.registeredNodes(ctx, tenant, session)
	if err != nil {
		g.log.Warn("gateway: listing a deleted session's nodes; other nodes close its connections at their sweep", "tenant", tenant, "err", err)
		return
	}
	var wg sync.WaitGroup
	for _, node := range nodes {
		wg.Go(func() {
			if err := g.opts.Peer.SessionGone(ctx, node, tenant, session); err != nil {
				g.log.Warn("gateway: telling another node of a deleted session; it closes its connections at its sweep", "node", node, "err", err)
			}
		})
	}
	wg.Wait()
}

// SessionGone closes this node's connections of a session if the store
// says it is gone (deleted, 4001, or expired, 4000): another node deleted
// it. Whoever calls it, what it does comes from the store, and costs a
// read only for a session this node holds connections of.
func (g *Gateway) SessionGone(ctx context.Context, tenant, session string) error {
	// A read of the session for a connect under way may be older than
	// its deletion: the next connect reads it anew.
	g.flights.forget(sessionKey{tenant, session})
	g.mu.Lock()
	s := g.sessions[sessionKey{tenant, session}]
	g.mu.Unlock()
	if s == nil {
		return nil
	}
	now := g.opts.Now()
	_, err := g.opts.Sessions.GetSession(ctx, now, tenant, session)
	switch {
	case errors.Is(err, sluice.ErrSessionNotFound):
		code, reason := s.gone(now)
		for _, c := range g.peers(tenant, session) {
			c.close(code, reason)
		}
		return nil
	case err != nil:
		return g.unavailable("session store", tenant, err)
	}
	return nil
}

// CloseTenant closes every connection of a tenant at once (its deletion).
// Other nodes close theirs at their next expiry sweep, which finds the
// tenant gone.
func (g *Gateway) CloseTenant(tenant string) {
	g.flights.forgetTenant(tenant)
	for _, c := range g.tenantConns(tenant) {
		c.close(statusDeleted, "tenant deleted")
	}
}

// tenantConns returns a tenant's connections on this node.
func (g *Gateway) tenantConns(tenant string) []*conn {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []*conn
	for k, cs := range g.conns {
		if k.tenant == tenant {
			for c := range cs {
				out = append(out, c)
			}
		}
	}
	return out
}

// expiryLoop closes the connections of sessions that have expired, of
// tenants deleted, idle or too old, and releases idle silo queues, every
// ExpiryEvery. It reads every tenant with connections here, and only the
// sessions whose latest known expiry has passed: another node's activity
// may have pushed it later, or it has expired. Every CheckEvery it also
// reads every session with connections here, to find deletions made
// through a node that could not tell this one (a session's deletion is told
// to every node at once, CloseSession): a fallback, not the rule.
func (g *Gateway) expiryLoop() {
	t := time.NewTicker(g.opts.ExpiryEvery)
	defer t.Stop()
	var lastFull time.Time
	for {
		select {
		case <-g.stop:
			return
		case <-t.C:
		}
		g.releaseIdleSilos()
		g.closeIdleAndOld()
		now := g.opts.Now()
		full := time.Since(lastFull) >= g.opts.CheckEvery
		if full {
			lastFull = time.Now()
		}
		g.mu.Lock()
		sessions := make(map[sessionKey]*session, len(g.sessions))
		tenants := map[string]*Tenant{} // nil: gone
		for k, s := range g.sessions {
			tenants[k.tenant] = nil
			if full || s.mayHaveExpired(now) {
				sessions[k] = s
			}
		}
		g.mu.Unlock()
		// Tenants at every sweep: a tenant deleted through another node
		// closes here within a sweep or two (its read is cached by the
		// store for a second), at one read per tenant, not per session.
		for tenant := range tenants {
			tenants[tenant] = g.checkTenant(tenant)
		}
		for k, s := range sessions {
			t := tenants[k.tenant]
			if t == nil {
				continue // closed with its tenant
			}
			ctx, cancel := context.WithTimeout(g.ctx, g.opts.ExpiryEvery)
			x, err := g.opts.Sessions.GetSession(ctx, now, k.tenant, k.id)
			cancel()
			switch {
			case err == nil && t != nil && !t.owns(x):
				for _, c := range g.peers(k.tenant, k.id) {
					c.close(statusDeleted, "tenant deleted")
				}
			case errors.Is(err, sluice.ErrSessionNotFound):
				code, reason := s.gone(now)
				for _, c := range g.peers(k.tenant, k.id) {
					c.close(code, reason)
				}
			case err == nil:
				s.saw(x.ExpiresAt)
			}
		}
		g.sweeps.Add(1)
	}
}

// checkTenant reads a tenant with connections here, and closes them if it
// was deleted: it returns nil then, the tenant otherwise (a zero Tenant if
// the read failed, which proves nothing).
func (g *Gateway) checkTenant(tenant string) *Tenant {
	ctx, cancel := context.WithTimeout(g.ctx, g.opts.ExpiryEvery)
	t, ok, err := g.opts.Tenant(ctx, tenant)
	cancel()
	switch {
	case err != nil:
		return &Tenant{}
	case !ok:
		g.CloseTenant(tenant)
		return nil
	}
	return &t
}

// closeIdleAndOld closes the connections idle for IdleTimeout (neither
// sending nor receiving), and those older than MaxLifetime.
func (g *Gateway) closeIdleAndOld() {
	now := g.opts.Now()
	for _, c := range g.allConns() {
		c.mu.Lock()
		idle, age := now.Sub(c.lastActiveAt), now.Sub(c.connectedAt)
		c.mu.Unlock()
		switch {
		case age >= g.opts.MaxLifetime:
			c.close(websocket.StatusNormalClosure, "maximum connection time reached")
		case idle >= g.opts.IdleTimeout:
			c.close(websocket.StatusNormalClosure, "idle timeout")
		}
	}
}

// allConns returns this node's connections.
func (g *Gateway) allConns() []*conn {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]*conn, 0, len(g.byID))
	for _, c := range g.byID {
		out = append(out, c)
	}
	return out
}

// renewers bounds the sessions renewed at once by renewLoop.
const renewers = 16

// renewLoop brings this node's leases and registrations to what it holds
// every RenewEvery, renewers sessions at a time, and renews those due
// (renewCounts, registerSession): without Liveness a lease and a
// registration live three renewals, so a node that dies stops renewing,
// its connections' counts come back by themselves and other nodes stop
// finding its connections; with it, they are passed over once its run is
// dead.
func (g *Gateway) renewLoop() {
	t := time.NewTicker(g.opts.RenewEvery)
	defer t.Stop()
	for {
		select {
		case <-g.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(g.ctx, g.opts.RenewEvery)
		g.renewCounts(ctx)
		work := make(chan sessionKey)
		var wg sync.WaitGroup
		for range renewers {
			wg.Go(func() {
				for k := range work {
					g.registerSession(ctx, k.tenant, k.id)
				}
			})
		}
		keys := g.sessionKeys()
		held := make(map[sessionKey]bool, len(keys))
		for _, k := range keys {
			held[k] = true
		}
		for _, k := range g.registeredKeys() {
			if !held[k] {
				keys = append(keys, k) // its last connection gone, its registration maybe not
			}
		}
		for _, k := range keys {
			select {
			case work <- k:
			case <-ctx.Done():
			}
		}
		close(work)
		wg.Wait()
		cancel()
		g.renewals.Add(1)
	}
}

// sessionKeys returns the sessions this node holds connections of.
func (g *Gateway) sessionKeys() []sessionKey {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Collect(maps.Keys(g.conns))
}
