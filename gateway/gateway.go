package gateway

import (
	"context"
	"hash/maphash"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/logevery"
	"github.com/sluicehq/sluice/queue"
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
	// RenewEvery is how often a node brings its connection counts and
	// registrations to what it holds, and, without Liveness, renews
	// them: a lease and a registration then live three of them. It is
	// also how long the other nodes holding a session are known without
	// a read. Default 10s.
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
	// nodes: a node registers that it holds connections of a session
	// under its base URL (Node), at its first and until its last, and a
	// message for the session, a management call for one connection, or
	// the session's deletion goes to each other node registered, through
	// Peer (that node's management API). Optional: a single node needs
	// none.
	Registry sluice.Registry
	Node     string
	Peer     Peer
	// Liveness, on a store shared by many nodes, says which nodes' runs
	// are live (peer.Cluster). This node's connection counts and
	// registrations then live as long as its run, not a few renewals:
	// they are written when they change, and otherwise only once a third
	// of their backstop has passed (CountBackstop, RegistrationBackstop),
	// so that idle connections cost no write. A dead run's counts stop
	// counting at the next decision of each, since every decision names
	// the dead runs (sluice.Check.DeadOwners), and its registrations are
	// passed over by readers. A node whose own run is not live admits no
	// connection (503). Nil: counts and registrations live three
	// renewals, and are renewed every RenewEvery.
	Liveness Liveness
	// Observer is told what the gateway does, for metrics. Optional.
	Observer Observer
	Now      func() time.Time
	Logger   *slog.Logger
}

// Liveness is what the gateway needs of the nodes' runs (peer.Cluster).
type Liveness interface {
	// Self returns the tag of this node's run, which its leases carry
	// (sluice.OwnedLease), and whether its run is live now.
	Self() (tag uint16, live bool)
	// Dead returns the tags of dead runs whose leases may be left, at
	// most sluice.MaxDeadOwners, never a live run's.
	Dead() []uint16
	// Gone reports whether node (a base URL) is known to have no live
	// run: a node not heard of yet (just started) is not gone.
	Gone(node string) bool
	// Heartbeat is how often a node records its run: a dead node is
	// gone, and its leases count for nothing, within five of them.
	Heartbeat() time.Duration
}

// The backstops of a node's counts and registrations under Liveness: how
// long one lives unless written again, which a node does every third of
// it. They matter only if every node dies: a dead node's are passed over
// long before. A dead run is named dead (Liveness.Dead) for longer than
// its leases live.
const (
	CountBackstop        = 2 * time.Hour
	RegistrationBackstop = 24 * time.Hour
)

// errNotLive refuses a connect on a node whose run is not live.
var errNotLive = &sluice.Error{Kind: sluice.KindUnavailable, Message: "this node's heartbeat has not reached the store in time: it admits no connection until it does"}

// countBackstop is how long a lease of a connection count lives unless
// written again.
func (g *Gateway) countBackstop() time.Duration {
	if g.opts.Liveness == nil {
		return 3 * g.opts.RenewEvery
	}
	return CountBackstop
}

// regBackstop is how long a registration lives unless written again.
func (g *Gateway) regBackstop() time.Duration {
	if g.opts.Liveness == nil {
		return 3 * g.opts.RenewEvery
	}
	return RegistrationBackstop
}

// deadWithin bounds how long a dead node's registrations are still read
// as live: its heartbeat's five periods, or, without Liveness, three
// renewals.
func (g *Gateway) deadWithin() time.Duration {
	if g.opts.Liveness == nil {
		return 3 * g.opts.RenewEvery
	}
	return 5 * g.opts.Liveness.Heartbeat()
}

// self returns the tag of this node's run, and whether it is live.
func (g *Gateway) self() (uint16, bool) {
	if g.opts.Liveness == nil {
		return 0, true
	}
	return g.opts.Liveness.Self()
}

// dead returns the tags of the dead runs, for a decision of a count.
func (g *Gateway) dead() []uint16 {
	if g.opts.Liveness == nil {
		return nil
	}
	return g.opts.Liveness.Dead()
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

// Gateway serves WebSocket connections. Create it with New; Close it.
type Gateway struct {
	opts Options
	log  *slog.Logger
	// storeLog bounds the lines of a store's failure, which every
	// connect or message meets during an outage, to one an interval.
	storeLog logevery.Gate

	// mu guards this node's connections, by session and by id, and
	// closed: a connection is registered (register) only while the
	// gateway is open, so that Close finds every one to close.
	mu       sync.Mutex
	conns    map[sessionKey]map[*conn]struct{}
	sessions map[sessionKey]*session // of the sessions in conns
	byID     map[string]*conn        // the connections in conns
	closed   bool

	flights     flightMap   // reads of sessions for connects under way (sessionFor)
	tenantReads tenantReads // reads of tenants for connects under way (tenant)

	regLocks   [regLocks]sync.Mutex // order each session's registration writes (registerSession)
	regMu      sync.Mutex
	registered map[sessionKey]time.Time // when this node's registration of a session was written; under regMu

	countsMu sync.Mutex              // guards counts, and each nodeCount's users
	counts   map[countKey]*nodeCount // this node's leases on the connection counts
	seed     maphash.Seed            // names this node's leases (leaseID)

	silosMu sync.Mutex              // guards silos
	silos   map[string]*queue.Queue // one queue and worker per tenant; nil once closed

	pooled *queue.Queue // one queue for every tenant, fair between them
	dedup  *queue.Dedup // message ids, shared by the queues

	ctx    context.Context // cancelled by Close: no store call outlives it
	cancel context.CancelFunc

	wg       sync.WaitGroup
	stop     chan struct{}
	sweeps   atomic.Int64 // expiry sweeps done, for tests to wait on
	renewals atomic.Int64 // renewal rounds done, the same
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
	g := &Gateway{opts: opts, log: opts.Logger, conns: map[sessionKey]map[*conn]struct{}{}, sessions: map[sessionKey]*session{}, counts: map[countKey]*nodeCount{}, byID: map[string]*conn{}, registered: map[sessionKey]time.Time{}, silos: map[string]*queue.Queue{}, seed: maphash.MakeSeed(), stop: make(chan struct{})}
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
	g.silosMu.Lock()
	silos := g.silos
	g.silos = nil
	g.silosMu.Unlock()
	for _, q := range silos {
		q.Close()
	}
}

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
	st := Stats{Sessions: len(g.conns), Connections: len(g.byID)}
	g.mu.Unlock()
	g.silosMu.Lock()
	st.Silos = len(g.silos)
	silos := make([]*queue.Queue, 0, len(g.silos))
	for _, q := range g.silos {
		silos = append(silos, q)
	}
	g.silosMu.Unlock()
	for _, q := range silos {
		st.SiloDepth += q.Len()
	}
	st.PooledDepth = g.pooled.Len()
	return st
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

// unavailable is a store's failure, logged, as the client sees it: a
// fault, never a limit.
func (g *Gateway) unavailable(what, tenant string, err error) error {
	g.storeLog.Log(g.log, g.opts.Now(), slog.LevelWarn, "gateway: "+what+" failed", "tenant", tenant, "err", err)
	return &sluice.Error{Kind: sluice.KindUnavailable, Message: what + " unavailable", Err: err}
}
