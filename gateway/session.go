package gateway

import (
	"context"
	"hash/maphash"
	"slices"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/sluicehq/sluice"
)

// session is what this node knows of a session it holds connections of,
// so that a message costs one store request, its limit's decision, and
// little else:
//
//   - the latest expiry seen, so that the sweep reads only sessions that
//     may have expired, and tells a deletion (gone before its expiry, 4001)
//     from an expiry (4000);
//   - when this node last moved the expiry, so that it writes it at most
//     once per tenth of the TTL, however many messages (touchDue);
//   - the session's connections on other nodes, read once and kept for a
//     renewal period at most, and less if another node says they changed
//     (Gateway.SessionChanged), a node answers that one is gone, or a node
//     cannot be reached: a new connection whose node could not tell this
//     one is reached within a renewal period;
//   - the other nodes holding connections of the session, read with them
//     and kept for a renewal period at most, and less if a node says it has
//     its first: the nodes a connect here tells of itself (announce), so
//     that a connect costs no read of the session's connections.
type session struct {
	mu      sync.Mutex
	expires time.Time
	touched time.Time
	regs    []sluice.Registration // other nodes' connections, if cached
	cached  time.Time             // when regs was read; zero if not cached
	gen     uint64                // moved by every invalidation, so that a read in flight is not kept
	nodes   []string              // other nodes holding connections, if known
	nodesAt time.Time             // when nodes was read; zero if not known
}

// saw records a session expiry read from the store.
func (s *session) saw(t time.Time) {
	s.mu.Lock()
	if t.After(s.expires) {
		s.expires = t
	}
	s.mu.Unlock()
}

// gone returns the close code and reason for a session found gone at now:
// deleted (4001) if it was gone before the latest expiry this node saw,
// which other nodes' activity can only have pushed later; expired (4000)
// otherwise.
func (s *session) gone(now time.Time) (websocket.StatusCode, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if now.Before(s.expires) {
		return statusDeleted, "session deleted"
	}
	return statusExpired, "session expired"
}

// mayHaveExpired reports whether the session's latest known expiry has
// passed at now.
func (s *session) mayHaveExpired(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !now.Before(s.expires)
}

// touchDue reports whether the session's expiry is to be written now: once
// per every, at most. It takes the turn, so that of messages arriving
// together one writes.
func (s *session) touchDue(now time.Time, every time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if now.Sub(s.touched) < every {
		return false
	}
	s.touched = now
	return true
}

// invalidate drops the cached connections of other nodes, and the nodes
// holding them if nodes is set.
func (s *session) invalidate(nodes bool) {
	s.mu.Lock()
	s.regs, s.cached = nil, time.Time{}
	if nodes {
		s.nodes, s.nodesAt = nil, time.Time{}
	}
	s.gen++
	s.mu.Unlock()
}

// expiry returns the latest expiry this node saw.
func (s *session) expiry() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.expires
}

// forget drops one connection from the cache: its node says it is gone.
func (s *session) forget(conn string) {
	s.mu.Lock()
	s.regs = slices.DeleteFunc(slices.Clone(s.regs), func(r sluice.Registration) bool { return r.Conn == conn })
	s.mu.Unlock()
}

// remoteConns returns the session's connections on other nodes: cached,
// or read from the registry and cached unless invalidated meanwhile.
func (g *Gateway) remoteConns(ctx context.Context, c *conn) ([]sluice.Registration, error) {
	s := c.sess
	s.mu.Lock()
	if !s.cached.IsZero() && time.Since(s.cached) < g.opts.RenewEvery {
		regs := s.regs
		s.mu.Unlock()
		return regs, nil
	}
	gen := s.gen
	s.mu.Unlock()
	all, err := g.opts.Registry.Registrations(ctx, g.opts.Now(), c.tenant, c.session)
	if err != nil {
		return nil, err
	}
	regs := slices.DeleteFunc(all, func(r sluice.Registration) bool { return r.Node == g.opts.Node })
	nodes := nodesOf(regs)
	s.mu.Lock()
	if s.gen == gen {
		now := time.Now()
		s.regs, s.cached, s.nodes, s.nodesAt = regs, now, nodes, now
	}
	s.mu.Unlock()
	return regs, nil
}

// otherNodes returns the other nodes holding connections of c's session:
// known, or read with the session's connections.
func (g *Gateway) otherNodes(ctx context.Context, c *conn) ([]string, error) {
	s := c.sess
	s.mu.Lock()
	if !s.nodesAt.IsZero() && time.Since(s.nodesAt) < g.opts.RenewEvery {
		nodes := s.nodes
		s.mu.Unlock()
		return nodes, nil
	}
	s.regs, s.cached = nil, time.Time{} // read them again, nodes and all
	s.mu.Unlock()
	regs, err := g.remoteConns(ctx, c)
	if err != nil {
		return nil, err
	}
	return nodesOf(regs), nil
}

// nodesOf returns the nodes of regs, each once.
func nodesOf(regs []sluice.Registration) []string {
	var nodes []string
	for _, r := range regs {
		if !slices.Contains(nodes, r.Node) {
			nodes = append(nodes, r.Node)
		}
	}
	return nodes
}

// SessionChanged drops what this node keeps of a session's connections on
// other nodes: another node has a new one (it says so when it registers
// one), and newNode if its first of the session, so that this node's next
// connect of the session tells it too.
func (g *Gateway) SessionChanged(tenant, session string, newNode bool) {
	g.mu.Lock()
	s := g.sessions[sessionKey{tenant, session}]
	g.mu.Unlock()
	if s != nil {
		s.invalidate(newNode)
	}
}

// announce tells the other nodes holding connections of c's session that
// it has a new one here (first: its first here), so that they read its
// connections again. It runs before the connect is answered: a message
// sent once the client is connected reaches it from every node. The nodes
// are those known (otherNodes): a node whose first connection of the
// session came meanwhile said so, and is known again at once.
func (g *Gateway) announce(ctx context.Context, c *conn, first bool) {
	if g.opts.Registry == nil || g.opts.Peer == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, g.opts.WriteTimeout)
	defer cancel()
	nodes, err := g.otherNodes(ctx, c)
	if err != nil {
		g.log.Warn("gateway: telling other nodes of a new connection", "tenant", c.tenant, "err", err)
		return
	}
	var wg sync.WaitGroup
	for _, node := range nodes {
		wg.Go(func() {
			if err := g.opts.Peer.Changed(ctx, node, c.tenant, c.session, first); err != nil {
				g.log.Warn("gateway: telling another node of a new connection", "node", node, "err", err)
			}
		})
	}
	wg.Wait()
}

// registerSession writes this node's registration of a session: its
// connections of it here now, live for three renewal periods; none
// removes it. It is one write per node and session, at a connect, at a
// disconnect and at each renewal, however many connections the node
// holds. Writes of one session are made one at a time, each of the
// connections as they are when it is made, so that the last write is
// never an older set's.
func (g *Gateway) registerSession(ctx context.Context, tenant, session string) error {
	if g.opts.Registry == nil {
		return nil
	}
	mu := &g.regLocks[regLock(tenant, session)]
	mu.Lock()
	defer mu.Unlock()
	g.mu.Lock()
	ids := make([]string, 0, len(g.conns[sessionKey{tenant, session}]))
	for c := range g.conns[sessionKey{tenant, session}] {
		ids = append(ids, c.id)
	}
	g.mu.Unlock()
	slices.Sort(ids)
	ctx, cancel := context.WithTimeout(ctx, g.opts.RenewEvery)
	defer cancel()
	r := sluice.NodeRegistration{Tenant: tenant, Session: session, Node: g.opts.Node, Conns: ids, ExpiresAt: g.opts.Now().Add(3 * g.opts.RenewEvery)}
	if err := g.opts.Registry.Register(ctx, r); err != nil {
		g.log.Warn("gateway: registering a session's connections", "tenant", tenant, "err", err)
		return err
	}
	return nil
}

// regLocks orders the registration writes of a session (registerSession):
// a session takes one of them by the hash of its key.
const regLocks = 64

func regLock(tenant, session string) uint64 {
	return maphash.Comparable(regSeed, sessionKey{tenant, session}) % regLocks
}

var regSeed = maphash.MakeSeed()
