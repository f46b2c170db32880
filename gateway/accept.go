package gateway

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/wire"
)

// A connect, before its connection serves (conn.serve): its origin is
// checked, its tenant read and its session known (read only if this node
// holds no live connection of it: sessionFor), and the four connection
// limits decided all or nothing before the upgrade (admit, with this
// node's leases on the connection counts in counts.go); the session's
// expiry is moved (at most once per tenth of its TTL per node), and the
// connection registered on this node (register) and for the other nodes
// (conn.registerRemote, and announce at the node's first connection of
// the session) before the 101 answer hands out its id.

// ServeHTTP is the connect route: GET /v1/ws?tenant=T&session=S.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tenant, session := r.URL.Query().Get("tenant"), r.URL.Query().Get("session")
	if !sluice.ValidID(tenant) || session == "" || len(session) > 128 {
		g.refuse(w, "", errBadConnect)
		return
	}
	if !g.originAllowed(r) {
		g.log.Debug("gateway: connect refused: origin not allowed", "tenant", tenant, "origin", r.Header.Get("Origin"))
		g.refuse(w, tenant, &sluice.Error{Kind: sluice.KindForbidden, Message: fmt.Sprintf("origin %q may not connect: see --ws-allowed-origins", r.Header.Get("Origin"))})
		return
	}
	ctx := r.Context()
	st, s, x, done, err := g.admissible(ctx, tenant, session)
	if err != nil {
		g.refuse(w, tenant, err)
		return
	}
	defer done()
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
		// Counted by the Observer; the request's own line is sampled.
		g.log.Debug("gateway: connect refused", "tenant", tenant, "limit", res.Decision.Policy)
		g.opts.Observer.Connect(tenant, res.Decision.Policy)
		refuseLimit(w, res.Decision.Policy, max(1, wire.CeilSeconds(res.Decision.RetryAfter)), "connection refused: over the limit "+res.Decision.Policy)
		return
	}
	c.id = connID(session)
	c.lastActiveAt = c.connectedAt
	expires, ok := g.refresh(ctx, s, x, time.Duration(st.SessionTTL)*time.Second)
	if !ok {
		c.release()
		g.refuse(w, tenant, errUnknownSession)
		return
	}
	// Registered before the 101 answer hands out its id: the management
	// API knows every connection its client was told of, and so do the
	// other nodes of the session.
	first, ok := g.register(c, s, expires)
	if !ok {
		c.release()
		g.refuse(w, tenant, &sluice.Error{Kind: sluice.KindUnavailable, Message: "server shutting down"})
		return
	}
	if err := c.registerRemote(ctx); err == nil {
		g.announce(ctx, c, first) // a registration that failed is renewed, and found by the other nodes within a renewal
	}
	w.Header().Set("Sluice-Connection", c.id)
	ws, err := websocket.Accept(leanHijack{w}, r, &websocket.AcceptOptions{OriginPatterns: g.opts.AllowedOrigins})
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
	// The connection is served on a goroutine of its own, and the
	// handler's returns: an idle connection then holds one small stack
	// (its read's), not the HTTP server's, nor the request it read.
	go c.serve()
}

// readBuffer and writeBuffer are the sizes of the buffered reader and
// writer a WebSocket keeps for its life, idle or not, in place of the
// HTTP server's 4 KiB each. They hold a frame's header and a small
// message; a larger payload is read into, and written from, the
// message's own buffer directly, bypassing them.
const (
	readBuffer  = 512
	writeBuffer = 512
)

// leanHijack is a ResponseWriter whose Hijack (which websocket.Accept
// calls) hands out the connection with buffers of readBuffer and
// writeBuffer bytes: the HTTP server's 4 KiB reader and writer, kept by
// the WebSocket for its life, were a quarter of an idle connection's
// memory.
type leanHijack struct{ http.ResponseWriter }

func (w leanHijack) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w leanHijack) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	nc, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	// Bytes the client sent after its request, which the HTTP server
	// has read already, must be in the new reader's buffer: Accept takes
	// what is buffered and reads the connection after it; more of them
	// than readBuffer (at most the HTTP server's 4 KiB) make the reader
	// that large. (The HTTP server's writer is empty: the 101 was
	// flushed.)
	n := brw.Reader.Buffered()
	if n == 0 {
		return nc, bufio.NewReadWriter(bufio.NewReaderSize(nc, readBuffer), bufio.NewWriterSize(nc, writeBuffer)), nil
	}
	b, _ := brw.Reader.Peek(n)
	br := bufio.NewReaderSize(io.MultiReader(bytes.NewReader(bytes.Clone(b)), nc), max(readBuffer, n))
	if _, err := br.Peek(n); err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, bufio.NewReadWriter(br, bufio.NewWriterSize(nc, writeBuffer)), nil
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

// AdmitHandler answers GET /v1/ws/admit?tenant=T&session=S with what a
// connect would get now, as JSON, consuming nothing: the demo page asks it
// first, since browsers hide a refused handshake's status.
func (g *Gateway) AdmitHandler(w http.ResponseWriter, r *http.Request) {
	ctx, tenant, session := r.Context(), r.URL.Query().Get("tenant"), r.URL.Query().Get("session")
	st, _, _, done, err := g.admissible(ctx, tenant, session)
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	done()
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

// admissible reads the tenant a connect names and knows its session
// (sessionFor): the tenant's settings, what this node knows of the session
// and the session, and done, to call once the connect is registered or
// refused; or the error to answer. A session older than its tenant, as
// read or as known, belongs to an earlier tenant of the id: refused.
func (g *Gateway) admissible(ctx context.Context, tenant, session string) (sluice.TenantSettings, *session, sluice.Session, func(), error) {
	sctx, cancel := g.storeCtx(ctx)
	defer cancel()
	nothing := func() {}
	t, ok, err := g.tenant(sctx, tenant)
	switch {
	case err != nil:
		return t.Settings, nil, sluice.Session{}, nothing, g.unavailable("tenant settings", tenant, err)
	case !ok:
		return t.Settings, nil, sluice.Session{}, nothing, errUnknownTenant(tenant)
	}
	s, x, done, err := g.sessionFor(sctx, tenant, session)
	switch {
	case sluice.KindOf(err) == sluice.KindNotFound || (err == nil && !t.owns(x)):
		done()
		return t.Settings, nil, x, nothing, errUnknownSession
	case err != nil:
		done()
		return t.Settings, nil, x, nothing, g.unavailable("session store", tenant, err)
	}
	return t.Settings, s, x, done, nil
}

// tenant reads a tenant for a connect (Options.Tenant): once for the
// connects of the tenant that come while it is read, so that a burst on a
// node whose cache of it has lapsed reads it once, not once each.
func (g *Gateway) tenant(ctx context.Context, id string) (Tenant, bool, error) {
	reads := &g.tenantReads
	reads.mu.Lock()
	if reads.m == nil {
		reads.m = map[string]*tenantRead{}
	}
	r := reads.m[id]
	lead := r == nil
	if lead {
		r = &tenantRead{read: make(chan struct{})}
		reads.m[id] = r
	}
	reads.mu.Unlock()
	if lead {
		// The node's read, for every connect waiting on it: one whose
		// client leaves does not fail the others.
		rctx, cancel := context.WithTimeout(g.ctx, g.readTimeout())
		r.t, r.ok, r.err = g.opts.Tenant(rctx, id)
		cancel()
		reads.mu.Lock()
		delete(reads.m, id)
		reads.mu.Unlock()
		close(r.read)
	}
	select {
	case <-r.read:
		return r.t, r.ok, r.err
	case <-ctx.Done():
		return Tenant{}, false, ctx.Err()
	}
}

// tenantReads are the tenant reads of connects under way (Gateway.tenant),
// by tenant, each dropped once it answers. The zero tenantReads is ready.
type tenantReads struct {
	mu sync.Mutex
	m  map[string]*tenantRead
}

type tenantRead struct {
	read chan struct{} // closed once t, ok and err are set
	t    Tenant
	ok   bool
	err  error
}

// readTimeout bounds a read made for every connect waiting on it:
// StoreTimeout, or WriteTimeout if there is none.
func (g *Gateway) readTimeout() time.Duration {
	if g.opts.StoreTimeout > 0 {
		return g.opts.StoreTimeout
	}
	return g.opts.WriteTimeout
}

// storeCtx bounds one store read by StoreTimeout.
func (g *Gateway) storeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if g.opts.StoreTimeout > 0 {
		return context.WithTimeout(ctx, g.opts.StoreTimeout)
	}
	return context.WithCancel(ctx)
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
	ttl, dead := g.countBackstop(), g.dead()
	return []sluice.Check{
		{Policy: sluice.Policy{Name: policyTenantConns, Algorithm: sluice.Concurrency, Limit: s.TenantConnections, LeaseTTL: ttl, FailMode: sluice.FailClosed}, Space: sluice.SpaceInternal, DeadOwners: dead, RemainingMayLag: true},
		{Policy: sluice.Policy{Name: policySessionConns, Algorithm: sluice.Concurrency, Limit: s.ConnectionsPerSession, LeaseTTL: ttl, FailMode: sluice.FailClosed}, Key: session, Space: sluice.SpaceInternal, DeadOwners: dead, RemainingMayLag: true},
		{Policy: sluice.Policy{Name: policyTenantRate, Algorithm: sluice.SlidingWindow, Limit: s.TenantPerMinute, Window: time.Minute, FailMode: sluice.FailClosed}, Space: sluice.SpaceInternal, RemainingMayLag: true},
		{Policy: sluice.Policy{Name: policySessionRate, Algorithm: sluice.SlidingWindow, Limit: s.SessionPerMinute, Window: time.Minute, FailMode: sluice.FailClosed}, Key: session, Space: sluice.SpaceInternal, RemainingMayLag: true},
	}
}

// refresh moves a session's expiry to now plus its tenant's TTL, as any
// activity does (seed 000: a connect too), and returns the expiry: at
// most once per tenth of the TTL per node, as messages do, whose turn it
// shares (s: what this node knows of the session, the same for every
// connect of it under way, so that of connects together one writes). It
// reports false if the session is gone; a store that fails leaves the
// expiry as it was, logged.
func (g *Gateway) refresh(ctx context.Context, s *session, x sluice.Session, ttl time.Duration) (expires time.Time, ok bool) {
	now := g.opts.Now()
	if !s.touchDue(now, ttl/10) {
		// Written by this node within a tenth of the TTL (or being
		// written): the session lives at least until the expiry known.
		return later(s.expiry(), x.ExpiresAt), true
	}
	sctx, cancel := g.storeCtx(ctx)
	defer cancel()
	y, err := g.opts.Sessions.TouchSession(sctx, now, x.Tenant, x.ID, now.Add(ttl))
	switch {
	case errors.Is(err, sluice.ErrSessionNotFound):
		return time.Time{}, false
	case err != nil:
		g.log.Warn("gateway: refreshing a session at connect", "tenant", x.Tenant, "err", err)
		return x.ExpiresAt, true
	}
	s.saw(y.ExpiresAt)
	return y.ExpiresAt, true
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// register adds c to this node's connections, with s, what the connect
// knew of its session (sessionFor), and the session's expiry as the
// connect left it; first if it is the session's first here. It reports
// false if the gateway is closed.
func (g *Gateway) register(c *conn, s *session, expires time.Time) (first, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false, false
	}
	k := sessionKey{c.tenant, c.session}
	if g.conns[k] == nil {
		g.conns[k] = map[*conn]struct{}{}
		s.invalidate() // what it knew of other nodes is of an earlier stay here, if any
		g.sessions[k] = s
		first = true
	}
	c.sess = g.sessions[k]
	if c.sess != s {
		// The session came and went here while the connect was decided.
		c.sess.learn(s)
	}
	c.sess.saw(expires)
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

// refuse answers a connect refused for err, and counts it by its kind.
func (g *Gateway) refuse(w http.ResponseWriter, tenant string, err error) {
	g.opts.Observer.Connect(tenant, refusalOutcome[sluice.KindOf(err)])
	wire.WriteError(w, err)
}

// refusalOutcome is a refused connect's outcome for metrics, by error kind.
var refusalOutcome = map[sluice.Kind]string{
	sluice.KindInvalid: "invalid", sluice.KindForbidden: "forbidden", sluice.KindUnavailable: "unavailable",
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
