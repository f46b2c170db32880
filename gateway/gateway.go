// Package gateway is Sluice's WebSocket gateway for SaaS tenants (seeds 000
// and 001): connections join a tenant's session after admission against
// four limits, and messages are echoed to their sender and fanned out to
// the session's other connections.
//
// Unlike the AWS sample it replaces: the four connection limits are decided
// all-or-nothing and atomically before the upgrade, and a refusal consumes
// nothing; a connection holds leases that its node renews, so a node that
// dies stops renewing and its connections' counts come back by themselves
// within three renewal periods, never leaking, never going negative;
// deleting a session closes its connections at once, and an expired
// session's connections are closed within a second or two; a connection
// that has gone away is skipped in a fan-out, which goes on.
//
// Admitted messages go through FIFO queues (package queue): "silo", a queue
// and worker per tenant, or "pooled", one queue whose workers serve tenants
// fairly; order is strict within the message group tenant:session. Not yet
// built: fan-out to the session's connections on other nodes.
package gateway

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/wire"
)

// Options configures a Gateway. Limiter, Sessions and Tenant are
// required; the zero values of the rest are API Gateway's limits.
type Options struct {
	Limiter  sluice.LeaseLimiter
	Sessions sluice.SessionStore
	// Tenant returns what the gateway needs of a tenant, and false if the
	// tenant does not exist.
	Tenant func(ctx context.Context, tenant string) (Tenant, bool, error)
	// StoreTimeout bounds each read of a tenant or a session on a
	// connect's path, so that a slow store fails a connect (503) rather
	// than holding it. Zero: none, for stores in process.
	StoreTimeout time.Duration
	// RenewEvery is how often a node renews its connections' leases; a
	// lease lives three of them. Default 10s.
	RenewEvery time.Duration
	// MaxMessage caps a message's size; larger closes with 1009. Default
	// 128 KiB.
	MaxMessage int64
	// IdleTimeout closes a connection without messages. Default 10m.
	IdleTimeout time.Duration
	// MaxLifetime closes any connection. Default 2h.
	MaxLifetime time.Duration
	// SendBuffer caps the bytes of the frames waiting for one connection
	// (its outbox), and so its memory: at most SendBuffer times the
	// connections per server. Nothing waits for room in it: a frame for
	// a connection whose outbox it would overflow closes the connection
	// (1008, too slow), at once. The connection's own reader takes its
	// client's next message only once the outbox is at most half full
	// (back-pressure on that client alone); the other half is what the
	// client may fall behind the rest of its session. A client that
	// reads keeps every frame of a burst of any length, as long as it
	// stays within the outbox of it. Default 1 MiB.
	SendBuffer int
	// WriteTimeout closes a client that does not take a frame being
	// written within it (1008), however roomy its outbox; it bounds each
	// call to another node too. Default 5s.
	WriteTimeout time.Duration
	// ExpiryEvery is how often the sessions whose known expiry has passed
	// are read again. Default 1s.
	ExpiryEvery time.Duration
	// CheckEvery is how often every session with connections here is
	// read again, to find a deletion another node could not tell this one
	// of. Default 30s; at least ExpiryEvery.
	CheckEvery time.Duration
	// QueueCapacity caps the messages waiting in a tenant's silo queue,
	// and, times PooledWorkers, in the pooled queue; a sender whose message
	// does not fit is told so. Default 1,000.
	QueueCapacity int
	// PooledWorkers serve the pooled queue. Default 4.
	PooledWorkers int
	// VisibilityTimeout is how long a message's delivery (its echo and
	// fan-out) may take before the queue delivers it again, to the
	// connections not reached yet. Default 30s.
	VisibilityTimeout time.Duration
	// AllowedOrigins are the browser origins, besides the server's own
	// host, that may open connections: host patterns ("app.example.com",
	// "*.example.com") or, with a scheme, origin patterns
	// ("https://*.example.com"), matched as path.Match does, case
	// insensitively. A connect whose Origin header is present and matches
	// neither is refused with 403 before it is admitted: the session id in
	// its query string is a credential, which any page a user visits could
	// otherwise use. Clients that send no Origin (not browsers) are let in.
	AllowedOrigins []string
	// Registry, Node and Peer reach a session's connections on other
	// nodes: each connection is registered under its node's base URL
	// (Node), renewed with its leases, and a message for a connection on
	// another node, a management call for it, or its session's deletion
	// goes through Peer (that node's management API). Optional: a single
	// node needs none.
	Registry sluice.Registry
	Node     string
	Peer     Peer
	// Observer is told what the gateway does, for metrics. Optional.
	Observer Observer
	Now      func() time.Time
	Logger   *slog.Logger
}

// Observer is told what the gateway does, for metrics. It must be safe for
// concurrent use and fast.
type Observer interface {
	// Connect is told of every connect: "admitted", or why it was
	// refused: a limit's policy (gw:tenant-connections, ...),
	// "forbidden" (unknown tenant or session, another origin),
	// "unavailable" (the store failed), "invalid".
	Connect(tenant, outcome string)
	// Closed is told of every connection's close code.
	Closed(tenant string, code websocket.StatusCode)
	// Message is told of every message: "accepted", "throttled",
	// "duplicate", "queue_full", "unavailable", "invalid", "session_gone".
	Message(tenant, outcome string)
	// Delivered is told of every delivery: its queue ("silo", "pooled"),
	// how long the message waited in it, and how long its fan-out took.
	Delivered(queue string, wait, fanout time.Duration)
}

// nopObserver is the Observer of a gateway without one.
type nopObserver struct{}

func (nopObserver) Connect(string, string)                         {}
func (nopObserver) Closed(string, websocket.StatusCode)            {}
func (nopObserver) Message(string, string)                         {}
func (nopObserver) Delivered(string, time.Duration, time.Duration) {}

// Stats are the gateway's live counts on this node.
type Stats struct {
	Connections int // live connections
	Sessions    int // sessions with a live connection
	Silos       int // silo queues, one per tenant with messages lately
	SiloDepth   int // messages waiting in the silo queues
	PooledDepth int // messages waiting in the pooled queue
}

// Stats returns the gateway's live counts on this node.
func (g *Gateway) Stats() Stats {
	g.mu.Lock()
	st := Stats{Sessions: len(g.conns), Silos: len(g.silos), Connections: len(g.byID)}
	silos := make([]*queue.Queue, 0, len(g.silos))
	for _, q := range g.silos {
		silos = append(silos, q)
	}
	g.mu.Unlock()
	for _, q := range silos {
		st.SiloDepth += q.Len()
	}
	st.PooledDepth = g.pooled.Len()
	return st
}

// Gateway serves WebSocket connections. Create it with New; Close it.
type Gateway struct {
	opts Options
	log  *slog.Logger

	mu       sync.Mutex
	conns    map[sessionKey]map[*conn]struct{}
	sessions map[sessionKey]*session // of the sessions in conns
	counts   map[countKey]*nodeCount // this node's leases on the connection counts
	seed     maphash.Seed            // names this node's leases (leaseID)
	byID     map[string]*conn
	silos    map[string]*queue.Queue // one queue and worker per tenant

	pooled *queue.Queue // one queue for every tenant, fair between them
	dedup  *queue.Dedup // message ids, shared by the queues

	ctx    context.Context // cancelled by Close: no store call outlives it
	cancel context.CancelFunc

	wg     sync.WaitGroup
	stop   chan struct{}
	closed bool
	sweeps atomic.Int64 // expiry sweeps done, for tests to wait on
}

type sessionKey struct{ tenant, id string }

// New returns a Gateway and starts its expiry sweep.
func New(opts Options) *Gateway {
	if opts.RenewEvery <= 0 {
		opts.RenewEvery = 10 * time.Second
	}
	if opts.MaxMessage <= 0 {
		opts.MaxMessage = 128 << 10
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = 10 * time.Minute
	}
	if opts.MaxLifetime <= 0 {
		opts.MaxLifetime = 2 * time.Hour
	}
	if opts.SendBuffer <= 0 {
		opts.SendBuffer = 1 << 20
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = 5 * time.Second
	}
	if opts.ExpiryEvery <= 0 {
		opts.ExpiryEvery = time.Second
	}
	if opts.CheckEvery <= 0 {
		opts.CheckEvery = 30 * time.Second
	}
	opts.CheckEvery = max(opts.CheckEvery, opts.ExpiryEvery)
	if opts.QueueCapacity <= 0 {
		opts.QueueCapacity = 1000
	}
	if opts.PooledWorkers <= 0 {
		opts.PooledWorkers = 4
	}
	if opts.VisibilityTimeout <= 0 {
		opts.VisibilityTimeout = 30 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Observer == nil {
		opts.Observer = nopObserver{}
	}
	g := &Gateway{opts: opts, log: opts.Logger, conns: map[sessionKey]map[*conn]struct{}{}, sessions: map[sessionKey]*session{}, counts: map[countKey]*nodeCount{}, byID: map[string]*conn{}, silos: map[string]*queue.Queue{}, seed: maphash.MakeSeed(), stop: make(chan struct{})}
	g.ctx, g.cancel = context.WithCancel(context.Background())
	g.dedup = queue.NewDedup(5*time.Minute, 100_000)
	g.pooled = queue.New(g.queueOptions(queue.Options{Capacity: opts.QueueCapacity * opts.PooledWorkers, TenantCapacity: opts.QueueCapacity, Workers: opts.PooledWorkers}), g.deliver)
	g.wg.Go(g.expiryLoop)
	g.wg.Go(g.renewLoop)
	return g
}

// Close closes every connection (1001, going away) and stops the sweep,
// and waits for their goroutines. The connections' leases are released.
func (g *Gateway) Close() {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return
	}
	g.closed = true
	close(g.stop)
	g.cancel()
	var all []*conn
	for _, cs := range g.conns {
		for c := range cs {
			all = append(all, c)
		}
	}
	g.mu.Unlock()
	for _, c := range all {
		c.close(websocket.StatusGoingAway, "server shutting down")
	}
	g.wg.Wait()
	g.pooled.Close()
	g.mu.Lock()
	silos := g.silos
	g.silos = nil
	g.mu.Unlock()
	for _, q := range silos {
		q.Close()
	}
}

// silo returns the tenant's queue, made on its first message.
func (g *Gateway) silo(tenant string) *queue.Queue {
	g.mu.Lock()
	defer g.mu.Unlock()
	q := g.silos[tenant]
	if q == nil && g.silos != nil {
		q = queue.New(g.queueOptions(queue.Options{Capacity: g.opts.QueueCapacity, Workers: 1}), g.deliver)
		g.silos[tenant] = q
	}
	return q
}

// queueOptions fills the options every queue of the gateway shares.
func (g *Gateway) queueOptions(o queue.Options) queue.Options {
	o.Dedup, o.Now, o.VisibilityTimeout = g.dedup, g.opts.Now, g.opts.VisibilityTimeout
	// Five deliveries, 1, 2, 4 and 8 fifths of a renewal apart: three
	// renewals in all, by when a dead node's registrations have expired
	// and its connections are no longer delivered to.
	o.MaxReceives, o.RetryDelay = 5, max(g.opts.RenewEvery/5, time.Millisecond)
	o.DeadLetter = func(m queue.Message, err error) {
		j := m.Body.(job)
		g.log.Warn("gateway: message dropped after its deliveries failed", "tenant", m.Tenant, "receives", m.Receives, "err", err)
		j.from.send(mustJSON(map[string]any{"error": "Not Delivered", "message": "the message could not be delivered to every connection of the session", "id": j.f.ID}))
	}
	return o
}

// releaseIdleSilos closes the silo queues, and stops the workers, of the
// tenants that have nothing waiting nor in flight; a tenant's next message
// makes its queue anew. An idle queue has no message in flight, so no
// message of a group can overtake another across the two.
func (g *Gateway) releaseIdleSilos() {
	var idle []*queue.Queue
	g.mu.Lock()
	for tenant, q := range g.silos {
		if q.CloseIfIdle() {
			delete(g.silos, tenant)
			idle = append(idle, q)
		}
	}
	g.mu.Unlock()
	for _, q := range idle {
		q.Close() // waits for its worker, not holding g.mu
	}
}

// job is a message waiting in a queue: its sender, its frame, when it was
// accepted, and what of its fan-out is done, shared by its deliveries.
type job struct {
	from *conn
	f    frame
	at   time.Time
	done *fanout
}

// fanout is what a message's deliveries have done so far, so that a
// delivery again after a failure reaches only what the failed one did not.
// One delivery at a time works on it (lock), a later one waiting for an
// earlier one left behind by the visibility timeout, within its context.
type fanout struct {
	lock  chan struct{}   // holds one token: taken by the delivery at work
	sent  map[*conn]int   // frames queued to each connection of this node
	conns map[string]bool // connections on other nodes reached, or gone
}

func newFanout() *fanout {
	f := &fanout{lock: make(chan struct{}, 1), sent: map[*conn]int{}}
	f.lock <- struct{}{}
	return f
}

// deliver is the queues' consumer (the sample's contract): it echoes the
// message to its sender, and sends the message and the reply to every
// other connection of the session, on this node and on others. It never
// waits for one connection: a frame goes into each connection's outbox
// without waiting, and a connection whose outbox it overflows is closed
// (conn.send); a connection gone or too slow is skipped, and the fan-out
// goes on. A node that could not be reached fails the delivery, which the
// queue makes again, for the connections not reached yet.
func (g *Gateway) deliver(ctx context.Context, m queue.Message) error {
	j := m.Body.(job)
	c, f := j.from, j.f
	msg, reply := delivered(f, "message", "from", c.id), delivered(f, "reply", "to", c.id)
	select {
	case <-j.done.lock:
		defer func() { j.done.lock <- struct{}{} }()
	case <-ctx.Done():
		return ctx.Err()
	}
	start := g.opts.Now()
	defer func() { g.opts.Observer.Delivered(f.Action, start.Sub(j.at), g.opts.Now().Sub(start)) }()
	// This node's connections, each with what it still lacks: the echo
	// for the sender, the message and the reply for the others. A send
	// does not wait, and a connection it does not reach (closing, or
	// closed by it for too slow) is not tried again.
	echo := [][]byte{delivered(f, "echo", "", "")}
	for _, p := range g.peers(c.tenant, c.session) {
		frames := [][]byte{msg, reply}
		if p == c {
			frames = echo
		}
		for ; j.done.sent[p] < len(frames); j.done.sent[p]++ {
			if !p.send(frames[j.done.sent[p]]) {
				j.done.sent[p] = len(frames)
				break
			}
		}
	}
	return g.deliverRemote(ctx, c, j.done, msg, reply)
}

// delivered returns the frame a delivery of f sends: its action, data and
// id, the frame's type, and, unless key is empty, whom it is from or to.
// The data goes in as the client sent it, checked by json.Unmarshal: a
// worker every tenant shares copies it, and does not scan it again (as
// json.Marshal did, three frames a message, 0.2 ms for each 32 KiB).
func delivered(f frame, typ, key, conn string) []byte {
	b := make([]byte, 0, len(f.Data)+len(f.Action)+len(f.ID)+len(conn)+64)
	b = append(b, `{"action":`...)
	b = append(b, mustJSON(f.Action)...)
	b = append(b, `,"data":`...)
	if len(f.Data) == 0 {
		b = append(b, "null"...)
	}
	b = append(b, f.Data...)
	if key != "" {
		b = append(b, `,"`+key+`":`...)
		b = append(b, mustJSON(conn)...)
	}
	b = append(b, `,"id":`...)
	b = append(b, mustJSON(f.ID)...)
	return append(b, `,"type":"`+typ+`"}`...)
}

// deliverRemote sends the message and the reply to the session's
// connections on other nodes not reached yet. The other node queues them
// without waiting for its connection (PostToConnection), so that a call
// waits for that node, never for one slow client of it. A connection gone
// there (410, or closed for too slow) is deregistered and skipped; the
// fan-out goes on, and the first other failure is returned. A node that
// failed is not called again in this delivery: the next one tries it
// again, so that a node that hangs holds the worker for one WriteTimeout,
// not one per connection. The caller holds done's lock.
func (g *Gateway) deliverRemote(ctx context.Context, c *conn, done *fanout, frames ...[]byte) error {
	if g.opts.Registry == nil || g.opts.Peer == nil {
		return nil
	}
	regs, err := g.remoteConns(ctx, c)
	if err != nil {
		return g.unavailable("registry", c.tenant, err)
	}
	var failed error
	var down map[string]bool // nodes that failed in this delivery
	for _, r := range regs {
		if done.conns[r.Conn] || down[r.Node] {
			continue
		}
		for _, f := range frames {
			pctx, cancel := context.WithTimeout(ctx, g.opts.WriteTimeout)
			err = g.opts.Peer.Post(pctx, r.Node, r.Tenant, r.Conn, f)
			cancel()
			if err != nil {
				break
			}
		}
		switch {
		case sluice.KindOf(err) == sluice.KindGone:
			g.opts.Registry.Deregister(ctx, r.Tenant, r.Session, r.Conn)
			c.sess.forget(r.Conn)
		case err != nil:
			g.log.Warn("gateway: delivering to another node", "node", r.Node, "err", err)
			failed = cmp.Or(failed, err)
			if down == nil {
				down = map[string]bool{}
			}
			down[r.Node] = true
			c.sess.invalidate(true) // the node may be gone: read again next time
			continue
		}
		if done.conns == nil {
			done.conns = map[string]bool{}
		}
		done.conns[r.Conn] = true
	}
	return failed
}

// The admission policies, from the tenant's settings. Connection counts are
// leases, so that a dead node's connections return; connection rates are
// sliding windows, so that no minute boundary lets twice the limit through.
// Their counters are internal (sluice.SpaceInternal): a tenant's check of a
// policy of the same name counts elsewhere, and cannot reset them.
const (
	policyTenantConns   = "gw:tenant-connections"
	policySessionConns  = "gw:session-connections"
	policyTenantRate    = "gw:tenant-connects-per-minute"
	policySessionRate   = "gw:session-connects-per-minute"
	policyTenantMessage = "gw:tenant-messages-per-minute"
)

func (g *Gateway) admission(s sluice.TenantSettings, session string) []sluice.Check {
	ttl := 3 * g.opts.RenewEvery
	return []sluice.Check{
		{Policy: sluice.Policy{Name: policyTenantConns, Algorithm: sluice.Concurrency, Limit: s.TenantConnections, LeaseTTL: ttl, FailMode: sluice.FailClosed}, Space: sluice.SpaceInternal},
		{Policy: sluice.Policy{Name: policySessionConns, Algorithm: sluice.Concurrency, Limit: s.ConnectionsPerSession, LeaseTTL: ttl, FailMode: sluice.FailClosed}, Key: session, Space: sluice.SpaceInternal},
		{Policy: sluice.Policy{Name: policyTenantRate, Algorithm: sluice.SlidingWindow, Limit: s.TenantPerMinute, Window: time.Minute, FailMode: sluice.FailClosed}, Space: sluice.SpaceInternal},
		{Policy: sluice.Policy{Name: policySessionRate, Algorithm: sluice.SlidingWindow, Limit: s.SessionPerMinute, Window: time.Minute, FailMode: sluice.FailClosed}, Key: session, Space: sluice.SpaceInternal},
	}
}

// refusal is the JSON body of a connect refused by a limit (429).
type refusal struct {
	Error      string `json:"error"`
	Message    string `json:"message"`
	Limit      string `json:"limit,omitempty"`
	RetryAfter int64  `json:"retryAfter,omitempty"`
}

// refuseLimit answers a connect over a limit: 429 with Retry-After.
func refuseLimit(w http.ResponseWriter, policy string, retryAfter int64, message string) {
	w.Header().Set("Retry-After", strconv.FormatInt(retryAfter, 10))
	wire.WriteJSON(w, http.StatusTooManyRequests, refusal{Error: "Too Many Requests", Message: message, Limit: policy, RetryAfter: retryAfter})
}

// Errors of a refused connect, answered by wire.WriteError: every other
// refusal than a limit's is an error of the API's kinds.
var (
	errUnknownSession = &sluice.Error{Kind: sluice.KindForbidden, Message: "unknown or expired session"}
	errBadConnect     = sluice.Invalid("tenant", "and session query parameters are required")
)

func errUnknownTenant(tenant string) error {
	return &sluice.Error{Kind: sluice.KindForbidden, Message: fmt.Sprintf("unknown tenant %q", tenant)}
}

// unavailable is a store's failure, logged, as the client sees it: a
// fault, never a limit.
func (g *Gateway) unavailable(what, tenant string, err error) error {
	g.log.Warn("gateway: "+what+" failed", "tenant", tenant, "err", err)
	return &sluice.Error{Kind: sluice.KindUnavailable, Message: what + " unavailable", Err: err}
}

// Tenant is what the gateway knows of a tenant.
type Tenant struct {
	Settings sluice.TenantSettings
	// Since is when the tenant was created; zero for a tenant of the
	// configuration file. A session older than its tenant belongs to an
	// earlier tenant of the same id, deleted since: it is not this one's.
	Since time.Time
}

// owns reports whether session x belongs to this tenant, not to an earlier
// one of the same id.
func (t Tenant) owns(x sluice.Session) bool { return !x.CreatedAt.Before(t.Since) }

// storeCtx bounds one store read by StoreTimeout.
func (g *Gateway) storeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if g.opts.StoreTimeout > 0 {
		return context.WithTimeout(ctx, g.opts.StoreTimeout)
	}
	return context.WithCancel(ctx)
}

// admissible reads the tenant and the session a connect names: the
// tenant's settings and the session, or the error to answer.
func (g *Gateway) admissible(ctx context.Context, tenant, session string) (sluice.TenantSettings, sluice.Session, error) {
	sctx, cancel := g.storeCtx(ctx)
	defer cancel()
	t, ok, err := g.opts.Tenant(sctx, tenant)
	switch {
	case err != nil:
		return t.Settings, sluice.Session{}, g.unavailable("tenant settings", tenant, err)
	case !ok:
		return t.Settings, sluice.Session{}, errUnknownTenant(tenant)
	}
	x, err := g.opts.Sessions.GetSession(sctx, g.opts.Now(), tenant, session)
	switch {
	case sluice.KindOf(err) == sluice.KindNotFound || (err == nil && !t.owns(x)):
		return t.Settings, x, errUnknownSession
	case err != nil:
		return t.Settings, x, g.unavailable("session store", tenant, err)
	}
	return t.Settings, x, nil
}

// refresh moves a session's expiry to now plus its tenant's TTL, as any
// activity does (seed 000: a connect too), and returns the expiry: at
// most once per tenth of the TTL per node, as messages do. It reports
// false if the session is gone; a store that fails leaves the expiry as
// it was, logged.
func (g *Gateway) refresh(ctx context.Context, x sluice.Session, ttl time.Duration) (expires time.Time, wrote, ok bool) {
	now := g.opts.Now()
	g.mu.Lock()
	s := g.sessions[sessionKey{x.Tenant, x.ID}]
	g.mu.Unlock()
	if s != nil && !s.touchDue(now, ttl/10) {
		// Written by this node within a tenth of the TTL: the session
		// lives at least nine tenths of it from now.
		if e := s.expiry(); e.After(x.ExpiresAt) {
			return e, false, true
		}
		return x.ExpiresAt, false, true
	}
	sctx, cancel := g.storeCtx(ctx)
	defer cancel()
	y, err := g.opts.Sessions.TouchSession(sctx, now, x.Tenant, x.ID, now.Add(ttl))
	switch {
	case errors.Is(err, sluice.ErrSessionNotFound):
		return time.Time{}, false, false
	case err != nil:
		g.log.Warn("gateway: refreshing a session at connect", "tenant", x.Tenant, "err", err)
		return x.ExpiresAt, false, true
	}
	return y.ExpiresAt, true, true
}

// AdmitHandler answers GET /v1/ws/admit?tenant=T&session=S with what a
// connect would get now, as JSON, consuming nothing: the demo page asks it
// first, since browsers hide a refused handshake's status.
func (g *Gateway) AdmitHandler(w http.ResponseWriter, r *http.Request) {
	ctx, tenant, session := r.Context(), r.URL.Query().Get("tenant"), r.URL.Query().Get("session")
	st, _, err := g.admissible(ctx, tenant, session)
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	res, err := g.opts.Limiter.Check(ctx, sluice.Request{Tenant: tenant, Checks: g.admission(st, session), Hits: 0})
	if err != nil {
		wire.WriteError(w, g.unavailable("limiter", tenant, err))
		return
	}
	for _, d := range res.Decisions {
		if d.FailedClosed {
			wire.WriteError(w, wire.FailedClosed(d.Policy))
			return
		}
		if d.Remaining < 1 {
			refuseLimit(w, d.Policy, max(1, wire.CeilSeconds(d.ResetAt.Sub(g.opts.Now()))), "over the limit "+d.Policy)
			return
		}
	}
	wire.WriteJSON(w, http.StatusOK, map[string]bool{"admit": true})
}

// originAllowed reports whether r's Origin, if it has one, is the
// server's own host or matches an allowed origin.
func (g *Gateway) originAllowed(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	return OriginAllowed(origin, r.Host, g.opts.AllowedOrigins)
}

// OriginAllowed reports whether a page of origin (an Origin header) may
// call a server reached as host: an http or https origin of that host, or
// one matching a pattern of allowed (path.Match, case-folded, against the
// origin's host, or its scheme and host where the pattern has "://"). The
// gateway's connects and the HTTP API's writes check pages alike.
func OriginAllowed(origin, host string, allowed []string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	if strings.EqualFold(u.Host, host) {
		return true
	}
	for _, pat := range allowed {
		target := u.Host
		if strings.Contains(pat, "://") {
			target = u.Scheme + "://" + u.Host
		}
		if ok, _ := path.Match(strings.ToLower(pat), strings.ToLower(target)); ok {
			return true
		}
	}
	return false
}

// ServeHTTP is the connect route: GET /v1/ws?tenant=T&session=S.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tenant, session := r.URL.Query().Get("tenant"), r.URL.Query().Get("session")
	if !sluice.ValidID(tenant) || session == "" || len(session) > 128 {
		g.refuse(w, "", errBadConnect)
		return
	}
	if !g.originAllowed(r) {
		g.log.Info("gateway: connect refused: origin not allowed", "tenant", tenant, "origin", r.Header.Get("Origin"))
		g.refuse(w, tenant, &sluice.Error{Kind: sluice.KindForbidden, Message: fmt.Sprintf("origin %q may not connect: see --ws-allowed-origins", r.Header.Get("Origin"))})
		return
	}
	ctx := r.Context()
	st, x, err := g.admissible(ctx, tenant, session)
	if err != nil {
		g.refuse(w, tenant, err)
		return
	}
	// The four limits, all or nothing, before the upgrade.
	c := &conn{g: g, tenant: tenant, session: session, settings: st, done: make(chan struct{}), connectedAt: g.opts.Now()}
	c.ctx, c.cancel = context.WithCancel(g.ctx)
	res, err := g.admit(ctx, c, st)
	if err != nil || !res.Allowed {
		c.cancel()
	}
	switch {
	case err != nil:
		g.refuse(w, tenant, g.unavailable("limiter", tenant, err))
		return
	case !res.Allowed && res.Decision.FailedClosed:
		// The store could not decide: a fault, never a limit.
		g.refuse(w, tenant, wire.FailedClosed(res.Decision.Policy))
		return
	case !res.Allowed:
		g.log.Info("gateway: connect refused", "tenant", tenant, "limit", res.Decision.Policy)
		g.opts.Observer.Connect(tenant, res.Decision.Policy)
		refuseLimit(w, res.Decision.Policy, max(1, wire.CeilSeconds(res.Decision.RetryAfter)), "connection refused: over the limit "+res.Decision.Policy)
		return
	}
	c.id = connID(session)
	c.lastActiveAt = c.connectedAt
	expires, wrote, ok := g.refresh(ctx, x, time.Duration(st.SessionTTL)*time.Second)
	if !ok {
		c.release()
		g.refuse(w, tenant, errUnknownSession)
		return
	}
	// Registered before the 101 answer hands out its id: the management
	// API knows every connection its client was told of, and so do the
	// other nodes of the session.
	first, ok := g.register(c, expires, wrote)
	if !ok {
		c.release()
		g.refuse(w, tenant, &sluice.Error{Kind: sluice.KindUnavailable, Message: "server shutting down"})
		return
	}
	if err := c.registerRemote(ctx); err == nil {
		g.announce(ctx, c, first) // a registration that failed is renewed, and found by the other nodes within a renewal
	}
	w.Header().Set("Sluice-Connection", c.id)
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{OriginPatterns: g.opts.AllowedOrigins})
	if err != nil {
		c.close(websocket.StatusInternalError, "upgrade failed")
		g.unregister(c)
		c.release()
		g.wg.Done()
		return
	}
	ws.SetReadLimit(g.opts.MaxMessage)
	c.ws = ws
	g.opts.Observer.Connect(tenant, "admitted")
	c.serve()
}

// refuse answers a connect refused for err, and counts it by its kind.
func (g *Gateway) refuse(w http.ResponseWriter, tenant string, err error) {
	g.opts.Observer.Connect(tenant, refusalOutcome[sluice.KindOf(err)])
	wire.WriteError(w, err)
}

// refusalOutcome is a refused connect's outcome for metrics, by error kind.
var refusalOutcome = map[sluice.Kind]string{
	sluice.KindInvalid: "invalid", sluice.KindForbidden: "forbidden", sluice.KindUnavailable: "unavailable",
}

// register adds c to this node's connections, its session's expiry
// as the connect left it (wrote: written by it just now); first if it is
// the session's first here. It reports false if the gateway is closed.
func (g *Gateway) register(c *conn, expires time.Time, wrote bool) (first, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false, false
	}
	k := sessionKey{c.tenant, c.session}
	if g.conns[k] == nil {
		g.conns[k] = map[*conn]struct{}{}
		g.sessions[k] = &session{}
		first = true
	}
	c.sess = g.sessions[k]
	c.sess.saw(expires)
	if wrote {
		c.sess.touchDue(g.opts.Now(), 0)
	}
	g.conns[k][c] = struct{}{}
	g.byID[c.id] = c
	g.wg.Add(1)
	return first, true
}

func (g *Gateway) unregister(c *conn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	k := sessionKey{c.tenant, c.session}
	delete(g.conns[k], c)
	if len(g.conns[k]) == 0 {
		delete(g.conns, k)
		delete(g.sessions, k)
	}
	delete(g.byID, c.id)
}

// peers returns the session's connections on this node.
func (g *Gateway) peers(tenant, session string) []*conn {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]*conn, 0, len(g.conns[sessionKey{tenant, session}]))
	for c := range g.conns[sessionKey{tenant, session}] {
		out = append(out, c)
	}
	return out
}

// CloseSession closes a session's connections at once (its deletion), on
// this node and, through their management API, on every other node that
// holds one: all with 4001. It returns once every node has answered, or
// after the write timeout.
func (g *Gateway) CloseSession(tenant, session string) {
	for _, c := range g.peers(tenant, session) {
		c.close(statusDeleted, "session deleted")
	}
	if g.opts.Registry == nil || g.opts.Peer == nil {
		return
	}
	ctx, cancel := context.WithTimeout(g.ctx, g.opts.WriteTimeout)
	defer cancel()
	regs, err := g.opts.Registry.Registrations(ctx, g.opts.Now(), tenant, session)
	if err != nil {
		g.log.Warn("gateway: listing a deleted session's connections; other nodes close them at their sweep", "tenant", tenant, "err", err)
		return
	}
	var wg sync.WaitGroup
	for _, r := range regs {
		if r.Node == g.opts.Node {
			continue
		}
		wg.Go(func() {
			err := g.opts.Peer.Close(ctx, r.Node, r.Tenant, r.Conn, statusDeleted, "session deleted")
			if err != nil && sluice.KindOf(err) != sluice.KindGone {
				g.log.Warn("gateway: closing a deleted session's connection on another node", "node", r.Node, "err", err)
			}
		})
	}
	wg.Wait()
}

// CloseTenant closes every connection of a tenant at once (its deletion).
// Other nodes close theirs at their next expiry sweep, which finds the
// tenant gone.
func (g *Gateway) CloseTenant(tenant string) {
	for _, c := range g.tenantConns(tenant) {
		c.close(statusDeleted, "tenant deleted")
	}
}

// Close codes of the gateway, in the range for applications.
const (
	statusExpired = websocket.StatusCode(4000) // the session expired
	statusDeleted = websocket.StatusCode(4001) // the session or its tenant was deleted
)

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

// Connections returns the number of live connections on this node.
func (g *Gateway) Connections() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, cs := range g.conns {
		n += len(cs)
	}
	return n
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

// renewers bounds the connections renewed at once by renewLoop.
const renewers = 16

// renewLoop renews every connection's leases and registration every
// RenewEvery, renewers at a time: a lease lives three renewals, so a node
// that dies stops renewing and its connections' counts come back by
// themselves.
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
		work := make(chan *conn)
		var wg sync.WaitGroup
		for range renewers {
			wg.Go(func() {
				for c := range work {
					c.renew(ctx)
				}
			})
		}
		for _, c := range g.allConns() {
			select {
			case work <- c:
			case <-ctx.Done():
			}
		}
		close(work)
		wg.Wait()
		cancel()
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
