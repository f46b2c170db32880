package gateway

import (
	"context"
	"hash/maphash"
	"maps"
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
//     from an expiry (4000); and when the session was made: so that a
//     connect of a session with live connections here, its known expiry
//     ahead, reads nothing (Gateway.sessionFor), and is refused still if
//     the session is older than its tenant (Tenant.owns);
//   - when this node last moved the expiry, so that it writes it at most
//     once per tenth of the TTL, however many messages (touchDue);
//   - the other live nodes holding connections of the session, read once
//     and kept for a renewal period at most, and less if another node says
//     it has its first (Gateway.SessionChanged) or a node cannot be
//     reached: the nodes a message is delivered to, each delivering it to
//     its own connections, and those this node's first connection of the
//     session tells of itself (announce); a node whose first connection
//     could not tell this one is reached within a renewal period.
type session struct {
	mu      sync.Mutex
	expires time.Time
	created time.Time // the session's CreatedAt, as read
	touched time.Time
	gen     uint64    // moved by every invalidation, so that a read in flight is not kept
	nodes   []string  // other nodes holding connections, if known
	nodesAt time.Time // when nodes was read; zero if not known
}

// saw records a session expiry read from the store.
func (s *session) saw(t time.Time) {
	s.mu.Lock()
	if t.After(s.expires) {
		s.expires = t
	}
	s.mu.Unlock()
}

// know records a session read from the store.
func (s *session) know(x sluice.Session) {
	s.mu.Lock()
	s.created = x.CreatedAt
	if x.ExpiresAt.After(s.expires) {
		s.expires = x.ExpiresAt
	}
	s.mu.Unlock()
}

// known returns the session as this node knows it: its creation as read,
// its latest expiry seen.
func (s *session) known(tenant, id string) sluice.Session {
	s.mu.Lock()
	defer s.mu.Unlock()
	return sluice.Session{Tenant: tenant, ID: id, CreatedAt: s.created, ExpiresAt: s.expires}
}

// learn takes what o knows of the same session that s does not: the
// later expiry, the later write of it, o's creation if o was read later.
func (s *session) learn(o *session) {
	o.mu.Lock()
	expires, created, touched := o.expires, o.created, o.touched
	o.mu.Unlock()
	s.mu.Lock()
	if expires.After(s.expires) {
		s.expires = expires
	}
	if !created.IsZero() {
		s.created = created
	}
	if touched.After(s.touched) {
		s.touched = touched
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

// invalidate drops the other nodes known to hold connections.
func (s *session) invalidate() {
	s.mu.Lock()
	s.nodes, s.nodesAt = nil, time.Time{}
	s.gen++
	s.mu.Unlock()
}

// expiry returns the latest expiry this node saw.
func (s *session) expiry() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.expires
}

// sessionFor returns what this node knows of a session a connect names,
// and the session: from what it knows, without a store request, if it
// holds live connections of the session whose latest known expiry is
// ahead; read otherwise, once for every connect of the session that asks
// meanwhile (a single flight per node and session), so that a burst of a
// session new to the node reads it once and writes its expiry once
// (refresh, through the session returned). The connect calls done once it
// is registered, or refused: connects that come until then take the same
// read, and after it find the session held.
//
// A deleted session: a connect that comes once this node has been told
// (CloseSession here, or SessionGone from the node that deleted it: both
// close the session's connections here, and a session with none live is
// read) is refused; if the telling failed, once the sweep's full check
// (CheckEvery) has found it gone and closed them. A connect admitted
// meanwhile from what was known is closed with them.
func (g *Gateway) sessionFor(ctx context.Context, tenant, id string) (s *session, x sluice.Session, done func(), err error) {
	k := sessionKey{tenant, id}
	now := g.opts.Now()
	g.mu.Lock()
	held := g.sessions[k]
	if held != nil && g.liveLocked(k) {
		if x := held.known(tenant, id); now.Before(x.ExpiresAt) {
			g.mu.Unlock()
			return held, x, func() {}, nil
		}
	}
	// Under g.mu, as register installs the session it read: a connect
	// finds either the flight or the session held.
	f, lead := g.flights.join(k, held)
	g.mu.Unlock()
	done = func() { g.flights.leave(k, f) }
	if lead {
		// The read is the node's, for every connect waiting on it: one
		// whose client leaves does not fail the others.
		rctx, cancel := context.WithTimeout(g.ctx, g.readTimeout())
		f.x, f.err = g.opts.Sessions.GetSession(rctx, now, tenant, id)
		cancel()
		if f.err == nil {
			f.s.know(f.x)
		}
		close(f.read)
	}
	select {
	case <-f.read:
		return f.s, f.x, done, f.err
	case <-ctx.Done():
		done()
		return nil, sluice.Session{}, func() {}, ctx.Err()
	}
}

// liveLocked reports whether this node holds a connection of session k not
// closing (one closed for the session's deletion is). It needs g.mu.
func (g *Gateway) liveLocked(k sessionKey) bool {
	for c := range g.conns[k] {
		select {
		case <-c.done:
		default:
			return true
		}
	}
	return false
}

// A flight is one read of a session for the connects that ask meanwhile.
type flight struct {
	s    *session      // what the node will know of the session; register installs it
	read chan struct{} // closed once x and err are set
	x    sluice.Session
	err  error
	refs int // connects under way that took it; under flightMap.mu
}

// flightMap holds the reads of sessions for connects (Gateway.sessionFor),
// by session, each kept while a connect that takes it is under way: at
// most one per connect in flight. The zero flightMap is ready.
type flightMap struct {
	mu sync.Mutex
	m  map[sessionKey]*flight
}

// join takes the flight of k, or starts it (lead) with s, what the node
// knows of the session already (nil: nothing).
func (m *flightMap) join(k sessionKey, s *session) (f *flight, lead bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m == nil {
		m.m = map[sessionKey]*flight{}
	}
	f = m.m[k]
	if f == nil {
		if s == nil {
			s = &session{}
		}
		f, lead = &flight{s: s, read: make(chan struct{})}, true
		m.m[k] = f
	}
	f.refs++
	return f, lead
}

// forget drops k's flight, done or not, so that the next connect reads the
// session anew: the session was deleted, and a read made before is stale.
// The connects that took the flight keep it until they leave.
func (m *flightMap) forget(k sessionKey) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.m, k)
}

// forgetTenant is forget for every session of tenant.
func (m *flightMap) forgetTenant(tenant string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k := range m.m {
		if k.tenant == tenant {
			delete(m.m, k)
		}
	}
}

// leave gives back a connect's turn on f, dropped with the last.
func (m *flightMap) leave(k sessionKey, f *flight) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if f.refs--; f.refs == 0 && m.m[k] == f {
		delete(m.m, k)
	}
}

// otherNodes returns the other live nodes holding connections of c's
// session: known, or read from the registry and kept unless invalidated
// meanwhile.
func (g *Gateway) otherNodes(ctx context.Context, c *conn) ([]string, error) {
	s := c.sess
	s.mu.Lock()
	if !s.nodesAt.IsZero() && time.Since(s.nodesAt) < g.opts.RenewEvery {
		nodes := s.nodes
		s.mu.Unlock()
		return nodes, nil
	}
	gen := s.gen
	s.mu.Unlock()
	nodes, err := g.registeredNodes(ctx, c.tenant, c.session)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.gen == gen {
		s.nodes, s.nodesAt = nodes, time.Now()
	}
	s.mu.Unlock()
	return nodes, nil
}

// registeredNodes reads the other nodes registered as holding connections
// of a session, each once, but those gone (Options.Liveness): a dead
// node's registrations stay until their backstop, passed over.
func (g *Gateway) registeredNodes(ctx context.Context, tenant, session string) ([]string, error) {
	regs, err := g.opts.Registry.Registrations(ctx, g.opts.Now(), tenant, session)
	if err != nil {
		return nil, err
	}
	var nodes []string
	for _, r := range regs {
		if r.Node != g.opts.Node && !slices.Contains(nodes, r.Node) && (g.opts.Liveness == nil || !g.opts.Liveness.Gone(r.Node)) {
			nodes = append(nodes, r.Node)
		}
	}
	return nodes, nil
}

// SessionChanged drops the other nodes this node knows to hold a
// session's connections if another node has its first of the session
// (newNode), so that the next message reaches it. A new connection on a
// node known already changes nothing here: that node delivers to its own.
func (g *Gateway) SessionChanged(tenant, session string, newNode bool) {
	if !newNode {
		return
	}
	g.mu.Lock()
	s := g.sessions[sessionKey{tenant, session}]
	g.mu.Unlock()
	if s != nil {
		s.invalidate()
	}
}

// announce tells the other nodes holding connections of c's session that
// this node has its first one (first), so that they deliver the session's
// messages here too. A later connection tells nobody, nor reads who they
// are: the other nodes deliver to this node, which delivers to its own
// connections. It runs before the connect is answered: a message sent
// once the client is connected reaches it from every node. The nodes are
// those known (otherNodes), read here as a rule (the session is new to
// this node): a node whose first connection of the session came meanwhile
// said so, and is known again at once.
func (g *Gateway) announce(ctx context.Context, c *conn, first bool) {
	if !first || g.opts.Registry == nil || g.opts.Peer == nil {
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

// registerSession brings this node's registration of a session to what
// it holds: written at its first connection of the session, removed with
// its last, and written again only once a third of its backstop has passed
// (regBackstop), so that connections that stay cost no write. Writes of one
// session are made one at a time, each of the connections as they are
// when it is made, so that the last write is never of an older state.
func (g *Gateway) registerSession(ctx context.Context, tenant, session string) error {
	if g.opts.Registry == nil {
		return nil
	}
	k := sessionKey{tenant, session}
	mu := &g.regLocks[regLock(tenant, session)]
	mu.Lock()
	defer mu.Unlock()
	g.mu.Lock()
	held := len(g.conns[k]) > 0
	g.mu.Unlock()
	now := g.opts.Now()
	backstop := g.regBackstop()
	g.regMu.Lock()
	at, written := g.registered[k]
	g.regMu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, g.opts.WriteTimeout)
	defer cancel()
	var err error
	switch {
	case held && written && now.Sub(at) < backstop/3:
		return nil
	case held:
		if err = g.opts.Registry.Register(ctx, sluice.Registration{Tenant: tenant, Session: session, Node: g.opts.Node, ExpiresAt: now.Add(backstop)}); err == nil {
			g.regMu.Lock()
			g.registered[k] = now
			g.regMu.Unlock()
		}
	case written:
		if err = g.opts.Registry.Deregister(ctx, tenant, session, g.opts.Node); err == nil {
			g.regMu.Lock()
			delete(g.registered, k)
			g.regMu.Unlock()
		}
	default:
		return nil
	}
	if err != nil {
		g.log.Warn("gateway: registering a session's connections here; tried again at the next renewal", "tenant", tenant, "err", err)
	}
	return err
}

// registeredKeys returns the sessions this node's registrations were
// written for, those left after the last connection's included.
func (g *Gateway) registeredKeys() []sessionKey {
	g.regMu.Lock()
	defer g.regMu.Unlock()
	return slices.Collect(maps.Keys(g.registered))
}

// regLocks orders the registration writes of a session (registerSession):
// a session takes one of them by the hash of its key.
const regLocks = 64

func regLock(tenant, session string) uint64 {
	return maphash.Comparable(regSeed, sessionKey{tenant, session}) % regLocks
}

var regSeed = maphash.MakeSeed()
