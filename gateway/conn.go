package gateway

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/queue"
)

// conn is one WebSocket connection. Its handler goroutine reads; a writer
// goroutine runs only while frames wait to be written, so that an idle
// connection holds one goroutine. Its leases are renewed, and its idle time
// and lifetime watched, by the gateway's loops, not by timers of its own.
type conn struct {
	g               *Gateway
	ws              *websocket.Conn
	id              string
	tenant, session string
	settings        sluice.TenantSettings
	checks          []sluice.Check // the two lease policies
	connectedAt     time.Time
	sess            *session // this node's state of the session, shared by its connections

	out     outbox
	writers sync.WaitGroup // the writer goroutine, and the close handshake

	mu           sync.Mutex
	lastActiveAt time.Time
	leases       []uint64 // 0 once lost
	code         websocket.StatusCode
	reason       string

	closeOnce sync.Once
	done      chan struct{}
	ctx       context.Context // cancelled at close, and by the gateway's Close
	cancel    context.CancelFunc
}

// outbox is a connection's frames waiting to be written, bounded in bytes.
// A sender waits while it is full (back-pressure: a reader stops reading
// its own client's socket, a queue's worker stops taking messages), and a
// client that takes no frame for the write timeout while some wait is
// dropped: a slow reader that reads is never dropped, however large the
// burst.
type outbox struct {
	mu       sync.Mutex
	frames   [][]byte
	size     int
	writing  bool          // a writer goroutine is draining the frames
	open     bool          // the WebSocket is open: frames may be written
	space    chan struct{} // closed, and made anew, whenever frames are written
	progress time.Time     // when the client last took a frame, or frames began to wait
}

// frame is a client's message.
type frame struct {
	Action string          `json:"action"`
	Data   json.RawMessage `json:"data"`
	ID     string          `json:"id,omitempty"`
}

// serve runs the connection until it closes, then releases its leases.
// The close handshake runs when the connection's context ends: closed by
// either side, by the gateway's loops, or by the gateway's Close.
func (c *conn) serve() {
	defer c.g.wg.Done()
	closed := make(chan struct{})
	context.AfterFunc(c.ctx, func() {
		defer close(closed)
		code, reason := c.closeStatus()
		c.ws.Close(code, reason) // bounded by the library's own 5s handshake timeout
	})
	c.opened()
	c.readLoop()
	c.close(websocket.StatusNormalClosure, "")
	<-closed
	c.writers.Wait()
	c.g.unregister(c)
	c.release()
	code, _ := c.closeStatus()
	c.g.opts.Observer.Closed(c.tenant, code)
}

// closeStatus returns the code and reason the connection closes with:
// those given to close, or 1001 (going away) if the gateway is closing.
func (c *conn) closeStatus() (websocket.StatusCode, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.code == 0 {
		return websocket.StatusGoingAway, "server shutting down"
	}
	return c.code, c.reason
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

// close closes the connection with code, once: its context ends, which
// starts the close handshake, and the loops see it and end.
func (c *conn) close(code websocket.StatusCode, reason string) {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.code, c.reason = code, reason
		c.mu.Unlock()
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
	c.mu.Lock()
	leases := slices.Clone(c.leases)
	c.mu.Unlock()
	for i, id := range leases {
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
		c.send(ctx, mustJSON(map[string]any{"error": "Bad Request", "message": `want {"action": "silo" | "pooled", "data": ...}`}))
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
		c.send(ctx, mustJSON(map[string]any{"error": "Service Unavailable", "message": "limiter unavailable; try again", "id": f.ID}))
		return
	}
	if !res.Allowed {
		outcome = "throttled"
		c.send(ctx, mustJSON(map[string]any{"error": "Too Many Requests", "message": "message throttled: messagesPerMinute", "retryAfterMs": res.Decision.RetryAfter.Milliseconds(), "id": f.ID}))
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
	// A full queue holds the reader (back-pressure on its client) until
	// there is room, for as long as ctx allows.
	if f.Action == "pooled" {
		err = c.g.pooled.EnqueueWait(ctx, m)
	} else {
		// A silo released as idle answers ErrClosed: its next is made.
		for range 2 {
			q := c.g.silo(c.tenant)
			if q == nil {
				return // shutting down
			}
			if err = q.EnqueueWait(ctx, m); !errors.Is(err, queue.ErrClosed) {
				break
			}
		}
	}
	switch {
	case errors.Is(err, queue.ErrFull):
		outcome = "queue_full"
		c.send(ctx, mustJSON(map[string]any{"error": "Queue Full", "message": "the " + f.Action + " queue is full; try again", "id": f.ID}))
	case errors.Is(err, queue.ErrDuplicate):
		outcome = "duplicate"
		c.send(ctx, mustJSON(map[string]any{"duplicate": true, "message": "a message with this id was sent in the last 5 minutes", "id": f.ID}))
	}
}

// send queues a frame for the client, waiting while its outbox is full
// until there is room, ctx ends, or the client has taken no frame for the
// write timeout: then the client is dropped (1008). A frame larger than the
// outbox goes alone.
func (c *conn) send(ctx context.Context, b []byte) {
	o := &c.out
	o.mu.Lock()
	for o.size > 0 && o.size+len(b) > c.g.opts.SendBuffer {
		wait := c.g.opts.WriteTimeout - time.Since(o.progress)
		if wait <= 0 {
			o.mu.Unlock()
			c.close(websocket.StatusPolicyViolation, "too slow: took no frame for the write timeout")
			return
		}
		space := o.space
		o.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-space:
		case <-t.C:
		case <-ctx.Done():
		case <-c.done:
		}
		t.Stop()
		if ctx.Err() != nil || c.ctx.Err() != nil {
			return
		}
		o.mu.Lock()
	}
	if o.size == 0 {
		o.progress = time.Now() // the client is waited for from now
	}
	if o.space == nil {
		o.space = make(chan struct{})
	}
	o.frames = append(o.frames, b)
	o.size += len(b)
	start := o.open && !o.writing
	o.writing = o.writing || start
	o.mu.Unlock()
	if start {
		c.writers.Go(c.drain)
	}
}

// opened lets the outbox write, once the WebSocket is open: frames sent
// between the connection's registration and its 101 wait until then.
func (c *conn) opened() {
	o := &c.out
	o.mu.Lock()
	o.open = true
	start := len(o.frames) > 0 && !o.writing
	o.writing = o.writing || start
	o.mu.Unlock()
	if start {
		c.writers.Go(c.drain)
	}
}

// drain writes the outbox's frames, each within the write timeout, until
// it is empty; then the goroutine ends. A frame written is activity: a
// client that only listens is not idle while it receives traffic.
func (c *conn) drain() {
	o := &c.out
	for {
		o.mu.Lock()
		if len(o.frames) == 0 || c.ctx.Err() != nil {
			o.frames, o.size, o.writing = nil, 0, false
			o.mu.Unlock()
			return
		}
		b := o.frames[0]
		o.frames[0] = nil
		o.frames = o.frames[1:]
		o.mu.Unlock()
		ctx, cancel := context.WithTimeout(c.ctx, c.g.opts.WriteTimeout)
		err := c.ws.Write(ctx, websocket.MessageText, b)
		cancel()
		if err != nil {
			c.close(websocket.StatusPolicyViolation, "write failed")
			continue
		}
		o.mu.Lock()
		o.size -= len(b)
		o.progress = time.Now()
		close(o.space)
		o.space = make(chan struct{})
		o.mu.Unlock()
		c.touch()
	}
}

// renew renews the connection's leases and its registration, and drops
// the connection if a lease was lost (this node stalled past its TTL: the
// count may already be someone else's).
func (c *conn) renew(ctx context.Context) {
	c.registerRemote()
	c.mu.Lock()
	leases := slices.Clone(c.leases)
	c.mu.Unlock()
	for i, id := range leases {
		if id == 0 {
			continue
		}
		if _, err := c.g.opts.Limiter.Renew(ctx, c.tenant, c.checks[i], id); errors.Is(err, sluice.ErrLeaseNotFound) {
			c.mu.Lock()
			c.leases[i] = 0
			c.mu.Unlock()
			c.close(websocket.StatusTryAgainLater, "connection lease lost")
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
