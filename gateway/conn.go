package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/wire"
)

// conn is one WebSocket connection. Its reader goroutine, started once
// the connection is upgraded (the connect's handler returns), reads; a
// writer goroutine runs only while frames wait to be written, so that an
// idle connection holds one goroutine, of a small stack. Its leases are renewed, and its idle time
// and lifetime watched, by the gateway's loops, not by timers of its own.
type conn struct {
	g               *Gateway
	ws              *websocket.Conn
	id              string
	tenant, session string
	settings        sluice.TenantSettings
	counts          [2]*nodeCount // this node's leases on them
	connectedAt     time.Time
	sess            *session // this node's state of the session, shared by its connections

	out     outbox
	writers sync.WaitGroup // the writer goroutine, and the close handshake

	mu           sync.Mutex
	lastActiveAt time.Time
	code         websocket.StatusCode
	reason       string

	closeOnce sync.Once
	done      chan struct{}
	ctx       context.Context // cancelled at close, and by the gateway's Close
	cancel    context.CancelFunc
}

// outbox is a connection's frames waiting to be written, bounded in bytes
// (Options.SendBuffer). Nothing that sends to it ever waits for it: not a
// queue's worker in a fan-out, not the management API, not another node.
// A frame that does not fit closes the connection (1008): its client has
// fallen a whole outbox behind, and it is its problem alone. The only
// wait is the connection's own: its reader takes its client's next
// message only once the outbox is at most half full, so that a client
// that does not read what it is sent is not read either, and the other
// half is room for frames from the rest of the session. A client that
// reads keeps every frame while the writer drains the outbox as fast as
// the client takes them.
type outbox struct {
	mu      sync.Mutex
	frames  [][]byte
	size    int           // bytes of the frames waiting, and of the one being written
	writing bool          // a writer goroutine is draining the frames
	open    bool          // the WebSocket is open: frames may be written
	stopped bool          // the connection is closing: no more frames
	space   chan struct{} // closed, and made anew, whenever frames are written
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
		if code == websocket.StatusAbnormalClosure {
			c.ws.CloseNow() // the client is gone: nothing to say
			return
		}
		c.ws.Close(code, reason) // after any frame being written; bounded by the library's own timeouts
	})
	c.opened()
	c.readLoop()
	// The read ended with the client's close, with ours, or abruptly.
	// A writer still running says why first, if it failed (1008); then
	// the connection is gone without a word (1006).
	c.out.stop()
	c.writers.Wait()
	c.close(websocket.StatusAbnormalClosure, "")
	<-closed
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
		c.out.stop()
		close(c.done)
		c.cancel()
	})
}

// registerRemote registers the connection for other nodes' fan-out, with
// the rest of this node's connections of its session: one registration per
// node and session (Gateway.registerSession).
func (c *conn) registerRemote(ctx context.Context) error {
	return c.g.registerSession(ctx, c.tenant, c.session)
}

// release returns the connection's leases at once, and takes it off this
// node's registration of its session. It runs once the connection has
// ended (unregistered), past the gateway's own context when the gateway
// is closing, within a bound of its own.
func (c *conn) release() {
	ctx, cancel := context.WithTimeout(context.Background(), c.g.opts.WriteTimeout)
	defer cancel()
	if c.id != "" {
		c.g.registerSession(ctx, c.tenant, c.session)
	}
	c.leave(ctx)
}

// readLoop reads frames until the connection closes or fails. Closing is
// the write loop's: it sends the close frame with the code, and the read
// then returns with it; cancelling a read instead would drop the
// connection without a code.
func (c *conn) readLoop() {
	for {
		buf := readBufs.Get().(*bytes.Buffer)
		typ, b, err := c.read(buf)
		if err != nil {
			putReadBuf(buf)
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
		// The client's own back-pressure: its messages wait while its
		// outbox is over half full, until its writer has written
		// enough, or the connection closes (the writer closes it if
		// the client takes no frame within the write timeout).
		if !c.out.waitRoom(c.g.opts.SendBuffer/2, c.done) {
			continue // closing: read on, to the close handshake
		}
		// A store that hangs cannot hold the connection past its own
		// close nor the gateway's.
		ctx, cancel := context.WithTimeout(c.ctx, 10*time.Second)
		c.handle(ctx, b) // which keeps nothing of b: parseFrame copies the data
		cancel()
		putReadBuf(buf)
	}
}

// readBufs are the readers' buffers, kept between messages: read whole
// into a buffer grown from nothing, as websocket.Conn.Read does, a 32 KiB
// message left 100 KiB of garbage, and the collector's work slows every
// tenant's messages.
var readBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledRead is the largest read buffer kept between messages: room
// for the default MaxMessage (128 KiB) as a buffer grows to it, and no
// more, so that under a larger --ws-max-message one tenant's rare large
// frames leave no buffers of their size in the pool.
const maxPooledRead = 256 << 10

// putReadBuf returns buf to readBufs, unless it grew past maxPooledRead.
func putReadBuf(buf *bytes.Buffer) {
	if buf.Cap() <= maxPooledRead {
		readBufs.Put(buf)
	}
}

// read reads the next message into buf, emptied first.
func (c *conn) read(buf *bytes.Buffer) (websocket.MessageType, []byte, error) {
	typ, r, err := c.ws.Reader(context.Background())
	if err != nil {
		return 0, nil, err
	}
	buf.Reset()
	if _, err := buf.ReadFrom(r); err != nil {
		return 0, nil, err
	}
	return typ, buf.Bytes(), nil
}

// handle decides one message against the tenant's message limit, at the
// door, before it is queued; an admitted message goes to the silo or pooled
// queue, whose consumer echoes it and fans it out (Gateway.deliver).
func (c *conn) handle(ctx context.Context, b []byte) {
	outcome := "accepted"
	defer func() { c.g.opts.Observer.Message(c.tenant, outcome) }()
	f, err := parseFrame(b)
	if err != nil || (f.Action != "silo" && f.Action != "pooled") {
		outcome = "invalid"
		c.send(mustJSON(wire.WSNotice{Error: wire.WSBadRequest, Message: `want {"action": "silo" | "pooled", "data": ...}`}))
		return
	}
	// Leased: on a store shared by nodes (DynamoDB), each node admits
	// from batches of the tenant's minute, one request per batch, never
	// past the limit by the window's estimate; other stores ignore it.
	lim := sluice.Check{Policy: sluice.Policy{Name: policyTenantMessage, Algorithm: sluice.SlidingWindow, Limit: c.settings.MessagesPerMinute, Window: time.Minute, Leased: true}, Space: sluice.SpaceInternal}
	res, err := c.g.opts.Limiter.Check(ctx, sluice.Request{Tenant: c.tenant, Checks: []sluice.Check{lim}, Hits: 1})
	if err != nil || (!res.Allowed && res.Decision.FailedClosed) {
		// A fault, never a throttle.
		if err != nil {
			c.g.storeLog.Log(c.g.log, c.g.opts.Now(), slog.LevelWarn, "gateway: deciding a message failed", "tenant", c.tenant, "err", err)
		}
		outcome = "unavailable"
		c.send(mustJSON(wire.WSNotice{Error: wire.WSUnavailable, Message: "limiter unavailable; try again", ID: &f.ID}))
		return
	}
	if !res.Allowed {
		outcome = "throttled"
		ms := res.Decision.RetryAfter.Milliseconds()
		c.send(mustJSON(wire.WSNotice{Error: wire.WSThrottled, Message: "message throttled: messagesPerMinute", RetryAfterMs: &ms, ID: &f.ID}))
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
	m := queue.Message{Tenant: c.tenant, Group: c.tenant + ":" + c.session, ID: f.ID, Body: job{from: c, f: f, at: c.g.opts.Now(), done: newFanout()}}
	// A full queue holds the reader (back-pressure on its client) until
	// there is room, for as long as ctx allows.
	if f.Action == "pooled" {
		err = c.g.pooled.EnqueueWait(ctx, m)
	} else {
		// A silo released as idle answers ErrClosed: its next is made.
		err = queue.ErrClosed
		for range 2 {
			q := c.g.silo(c.tenant)
			if q == nil {
				break // shutting down
			}
			if err = q.EnqueueWait(ctx, m); !errors.Is(err, queue.ErrClosed) {
				break
			}
		}
	}
	if errors.Is(err, queue.ErrClosed) {
		outcome = "unavailable"
		c.send(mustJSON(wire.WSNotice{Error: wire.WSUnavailable, Message: "the server is shutting down", ID: &f.ID}))
		return
	}
	switch {
	case errors.Is(err, queue.ErrFull):
		outcome = "queue_full"
		c.send(mustJSON(wire.WSNotice{Error: wire.WSQueueFull, Message: "the " + f.Action + " queue is full; try again", ID: &f.ID}))
	case errors.Is(err, queue.ErrDuplicate):
		outcome = "duplicate"
		c.send(mustJSON(wire.WSNotice{Duplicate: true, Message: "a message with this id was sent in the last 5 minutes", ID: &f.ID}))
	}
}

// send queues a frame for the client, and never waits: whoever sends (a
// queue's worker, the management API for another node, the connection's
// own reader) is never held by this client. A frame that does not fit in
// the outbox closes the connection instead (1008, too slow): dropping the
// frame would leave the client connected and missing messages, and
// keeping it would let one client's memory grow without bound. A frame
// larger than the whole outbox goes alone into an empty one. It reports
// whether the frame was queued: false for a connection closing, or closed
// by this frame.
func (c *conn) send(b []byte) bool {
	o := &c.out
	o.mu.Lock()
	if o.stopped {
		o.mu.Unlock()
		return false
	}
	if o.size > 0 && o.size+len(b) > c.g.opts.SendBuffer {
		o.mu.Unlock()
		c.close(websocket.StatusPolicyViolation, "too slow: more frames waiting than the send buffer holds")
		return false
	}
	if o.space == nil {
		o.space = make(chan struct{})
	}
	o.frames = append(o.frames, b)
	o.size += len(b)
	c.startWriterLocked()
	o.mu.Unlock()
	return true
}

// waitRoom waits until the outbox holds at most mark bytes, and reports
// true then; false if it is stopped or done is closed first. Only the
// connection's own reader waits here.
func (o *outbox) waitRoom(mark int, done <-chan struct{}) bool {
	o.mu.Lock()
	for !o.stopped && o.size > mark {
		space := o.space // not nil while frames wait
		o.mu.Unlock()
		select {
		case <-space:
		case <-done:
			return false
		}
		o.mu.Lock()
	}
	stopped := o.stopped
	o.mu.Unlock()
	return !stopped
}

// startWriterLocked starts the writer if frames wait, the WebSocket is
// open and no writer runs. The caller holds c.out.mu: a writer is never
// started once the outbox is stopped, so that serve's wait for the writers
// is final.
func (c *conn) startWriterLocked() {
	o := &c.out
	if o.open && !o.writing && !o.stopped && len(o.frames) > 0 {
		o.writing = true
		c.writers.Go(c.drain)
	}
}

// opened lets the outbox write, once the WebSocket is open: frames sent
// between the connection's registration and its 101 wait until then.
func (c *conn) opened() {
	c.out.mu.Lock()
	c.out.open = true
	c.startWriterLocked()
	c.out.mu.Unlock()
}

// stop takes no more frames and drops those waiting: the connection is
// closing. A frame being written is finished.
func (o *outbox) stop() {
	o.mu.Lock()
	o.stopped = true
	o.frames, o.size = nil, 0
	if o.space != nil {
		close(o.space) // senders waiting for room find the outbox stopped
		o.space = nil
	}
	o.mu.Unlock()
}

// drain writes the outbox's frames until it is empty or stopped, then the
// goroutine ends. Each frame is written within the write timeout on a
// context of its own, never cut short by a close: the close frame follows
// it. A frame written is activity: a client that only listens is not idle
// while it receives traffic.
func (c *conn) drain() {
	o := &c.out
	for {
		o.mu.Lock()
		if len(o.frames) == 0 || o.stopped {
			o.writing = false
			o.mu.Unlock()
			return
		}
		b := o.frames[0]
		o.frames[0] = nil
		o.frames = o.frames[1:]
		o.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), c.g.opts.WriteTimeout)
		err := c.ws.Write(ctx, websocket.MessageText, b)
		cancel()
		if err != nil {
			c.close(websocket.StatusPolicyViolation, "too slow: a frame was not taken within the write timeout")
			continue
		}
		o.mu.Lock()
		o.size = max(o.size-len(b), 0)
		if o.space != nil {
			close(o.space)
			o.space = make(chan struct{})
		}
		o.mu.Unlock()
		c.touch()
	}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only strings and wire's frames get here
	}
	return b
}
