package gateway

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/queue"
)

// conn is one WebSocket connection. Its handler goroutine reads; one more
// goroutine writes its send queue and renews its leases.
type conn struct {
	g               *Gateway
	ws              *websocket.Conn
	id              string
	tenant, session string
	settings        sluice.TenantSettings
	checks          []sluice.Check // the two lease policies
	leases          []uint64
	send            chan []byte // bounded: a client that lets it fill is dropped
	connectedAt     time.Time

	sess            *session // this node's state of the session, shared by its connections

	mu           sync.Mutex
	lastActiveAt time.Time

	closeOnce sync.Once
	done      chan struct{}
	ctx       context.Context // cancelled at close, and by the gateway's Close
	cancel    context.CancelFunc
	code      websocket.StatusCode
	reason    string
}

// frame is a client's message.
type frame struct {
	Action string          `json:"action"`
	Data   json.RawMessage `json:"data"`
	ID     string          `json:"id,omitempty"`
}

// serve runs the connection until it closes, then releases its leases.
func (c *conn) serve() {
	defer c.g.wg.Done()
	writerDone := make(chan struct{})
	go func() { defer close(writerDone); c.writeLoop() }()
	c.readLoop()
	c.close(websocket.StatusNormalClosure, "")
	<-writerDone
	c.g.unregister(c)
	c.release()
	c.g.opts.Observer.Closed(c.tenant, c.code)
}

// connID returns a new connection id: its session's id, a dot, and 96
// random bits. The session in the id lets any node find the node that
// holds the connection (Registry.Registrations) for the management API;
// it tells nothing the connection's tenant does not know already.
func connID(session string) string {
	var b [12]byte
	rand.Read(b[:])
	return session + "." + base64.RawURLEncoding.EncodeToString(b[:])
}

func (c *conn) touch() {
	c.mu.Lock()
	c.lastActiveAt = c.g.opts.Now()
	c.mu.Unlock()
}

// close closes the connection with code, once; the loops see it and end.
func (c *conn) close(code websocket.StatusCode, reason string) {
	c.closeOnce.Do(func() {
		c.code, c.reason = code, reason
		close(c.done)
		c.cancel()
	})
}

// registerRemote registers the connection for other nodes' fan-out, until
// three renewal periods from now.
func (c *conn) registerRemote() {
	g := c.g
	if g.opts.Registry == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), g.opts.RenewEvery)
	defer cancel()
	r := sluice.Registration{Tenant: c.tenant, Session: c.session, Conn: c.id, Node: g.opts.Node, ExpiresAt: g.opts.Now().Add(3 * g.opts.RenewEvery)}
	if err := g.opts.Registry.Register(ctx, r); err != nil {
		g.log.Warn("gateway: registering a connection", "err", err)
	}
}

// release returns the connection's leases at once, and deregisters it.
func (c *conn) release() {
	if c.g.opts.Registry != nil && c.id != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c.g.opts.Registry.Deregister(ctx, c.tenant, c.session, c.id)
		cancel()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i, id := range c.leases {
		if id == 0 {
			continue
		}
		if _, err := c.g.opts.Limiter.Release(ctx, c.tenant, c.checks[i], id); err != nil && !errors.Is(err, sluice.ErrLeaseNotFound) {
			c.g.log.Warn("gateway: releasing a connection lease; it will expire", "tenant", c.tenant, "err", err)
		}
	}
}

// readLoop reads frames until the connection closes or fails. Closing is
// the write loop's: it sends the close frame with the code, and the read
// then returns with it; cancelling a read instead would drop the
// connection without a code.
func (c *conn) readLoop() {
	for {
		typ, b, err := c.ws.Read(context.Background())
		if err != nil {
			if code := websocket.CloseStatus(err); code != -1 {
				c.close(code, "")
			}
			// A message over the read limit is closed 1009 by the
			// library; anything else, the client is gone.
			return
		}
		if typ == websocket.MessageText && !utf8.Valid(b) {
			c.close(websocket.StatusInvalidFramePayloadData, "invalid UTF-8")
			return
		}
		c.touch()
		// A store that hangs cannot hold the connection past its own
		// close nor the gateway's.
		ctx, cancel := context.WithTimeout(c.ctx, 10*time.Second)
		c.handle(ctx, b)
		cancel()
	}
}

// handle decides one message against the tenant's message limit, at the
// door, before it is queued; an admitted message goes to the silo or pooled
// queue, whose consumer echoes it and fans it out (Gateway.deliver).
func (c *conn) handle(ctx context.Context, b []byte) {
	var f frame
	outcome := "accepted"
	defer func() { c.g.opts.Observer.Message(c.tenant, outcome) }()
	if err := json.Unmarshal(b, &f); err != nil || (f.Action != "silo" && f.Action != "pooled") {
		outcome = "invalid"
		c.enqueue(mustJSON(map[string]any{"error": "Bad Request", "message": `want {"action": "silo" | "pooled", "data": ...}`}))
		return
	}
	lim := sluice.Check{Policy: sluice.Policy{Name: policyTenantMessage, Algorithm: sluice.SlidingWindow, Limit: c.settings.MessagesPerMinute, Window: time.Minute}, Space: sluice.SpaceInternal}
	res, err := c.g.opts.Limiter.Check(ctx, sluice.Request{Tenant: c.tenant, Checks: []sluice.Check{lim}, Hits: 1})
	if err != nil || (!res.Allowed && res.Decision.FailedClosed) {
		// A fault, never a throttle.
		if err != nil {
			c.g.log.Warn("gateway: deciding a message failed", "tenant", c.tenant, "err", err)
		}
		outcome = "unavailable"
		c.enqueue(mustJSON(map[string]any{"error": "Service Unavailable", "message": "limiter unavailable; try again", "id": f.ID}))
		return
	}
	if !res.Allowed {
		outcome = "throttled"
		c.enqueue(mustJSON(map[string]any{"error": "Too Many Requests", "message": "message throttled: messagesPerMinute", "retryAfterMs": res.Decision.RetryAfter.Milliseconds(), "id": f.ID}))
		return
	}
	// Activity refreshes the session: one write per tenth of the TTL at
	// most, so that it expires no sooner than nine tenths of its TTL
	// after its last message.
	now := c.g.opts.Now()
	ttl := time.Duration(c.settings.SessionTTL) * time.Second
	if c.sess.touchDue(now, ttl/10) {
		x, err := c.g.opts.Sessions.TouchSession(ctx, now, c.tenant, c.session, now.Add(ttl))
		switch {
		case errors.Is(err, sluice.ErrSessionNotFound):
			outcome = "session_gone"
			c.close(c.sess.gone(now))
			return
		case err == nil:
			c.sess.saw(x.ExpiresAt)
		}
	}
	m := queue.Message{Tenant: c.tenant, Group: c.tenant + ":" + c.session, ID: f.ID, Body: job{from: c, f: f, at: c.g.opts.Now(), done: &fanout{}}}
	if f.Action == "pooled" {
		err = c.g.pooled.Enqueue(m)
	} else {
		// A silo released as idle answers ErrClosed: its next is made.
		for range 2 {
			q := c.g.silo(c.tenant)
			if q == nil {
				return // shutting down
			}
			if err = q.Enqueue(m); !errors.Is(err, queue.ErrClosed) {
				break
			}
		}
	}
	switch {
	case errors.Is(err, queue.ErrFull):
		outcome = "queue_full"
		c.enqueue(mustJSON(map[string]any{"error": "Queue Full", "message": "the " + f.Action + " queue is full; try again", "id": f.ID}))
	case errors.Is(err, queue.ErrDuplicate):
		outcome = "duplicate"
		c.enqueue(mustJSON(map[string]any{"duplicate": true, "message": "a message with this id was sent in the last 5 minutes", "id": f.ID}))
	}
}

// enqueue queues a frame; a full queue drops the connection rather than
// block the sender.
func (c *conn) enqueue(b []byte) {
	select {
	case <-c.done:
	case c.send <- b:
	default:
		c.close(websocket.StatusPolicyViolation, "too slow: send queue full")
	}
}

// writeLoop writes queued frames with a deadline each, renews the leases
// every renewal period, and closes the connection at its maximum lifetime
// or when it has been idle too long (checked every renewal, or every tenth
// of the idle timeout if that is sooner), until the connection closes. One
// goroutine for all of it keeps a connection's memory small.
func (c *conn) writeLoop() {
	every := c.g.opts.RenewEvery
	renew := time.NewTicker(every)
	defer renew.Stop()
	idle := time.NewTicker(max(min(every, c.g.opts.IdleTimeout/10), 10*time.Millisecond))
	defer idle.Stop()
	lifetime := time.NewTimer(c.g.opts.MaxLifetime)
	defer lifetime.Stop()
	for {
		select {
		case <-lifetime.C:
			c.close(websocket.StatusNormalClosure, "maximum connection time reached")
		case <-idle.C:
			c.mu.Lock()
			last := c.lastActiveAt
			c.mu.Unlock()
			if c.g.opts.Now().Sub(last) >= c.g.opts.IdleTimeout {
				c.close(websocket.StatusNormalClosure, "idle timeout")
			}
		case <-c.done:
			c.ws.Close(c.code, c.reason) // bounded by the library's own 5s handshake timeout
			return
		case b := <-c.send:
			ctx, cancel := context.WithTimeout(context.Background(), c.g.opts.WriteTimeout)
			err := c.ws.Write(ctx, websocket.MessageText, b)
			cancel()
			if err != nil {
				c.close(websocket.StatusPolicyViolation, "write failed")
			}
		case <-renew.C:
			c.registerRemote()
			ctx, cancel := context.WithTimeout(context.Background(), c.g.opts.RenewEvery)
			for i, id := range c.leases {
				if _, err := c.g.opts.Limiter.Renew(ctx, c.tenant, c.checks[i], id); errors.Is(err, sluice.ErrLeaseNotFound) {
					// The lease ran out (this node stalled): the count
					// may already be someone else's. Drop the connection.
					c.leases[i] = 0
					c.close(websocket.StatusTryAgainLater, "connection lease lost")
				}
			}
			cancel()
		}
	}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only maps of marshalable values get here
	}
	return b
}
