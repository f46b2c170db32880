package gateway

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"time"

	"github.com/sluicehq/sluice/queue"
)

// A message's delivery, the consumer of the silo and pooled queues: its
// echo to its sender, and the message and its reply to every other
// connection of its session, on this node through each connection's outbox
// and on the other nodes through Options.Peer.

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
	nodes map[string]bool // other nodes that took the message
	id    string          // the message's id for other nodes, to drop a repeat
}

func newFanout() *fanout {
	var b [8]byte
	rand.Read(b[:])
	f := &fanout{lock: make(chan struct{}, 1), sent: map[*conn]int{}, id: hex.EncodeToString(b[:])}
	f.lock <- struct{}{}
	return f
}

// DeliverLocal sends frames, in order, to every connection of the
// session on this node, the other half of Peer.Deliver: it never
// waits for one, and a connection whose outbox a frame overflows is
// closed (as the local half of a delivery does). It returns the number
// of connections reached.
func (g *Gateway) DeliverLocal(tenant, session string, frames ...[]byte) int {
	n := 0
	for _, p := range g.peers(tenant, session) {
		ok := true
		for _, f := range frames {
			if ok = p.send(f); !ok {
				break
			}
		}
		if ok {
			n++
		}
	}
	return n
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

// deliverRemote sends the frames once to each other node holding
// connections of the session and not reached yet (that node queues them
// for its connections without waiting for any: DeliverLocal), all nodes
// at once, each call bounded by WriteTimeout, so that a delivery waits for
// the slowest node, never for one slow client of it; it returns when
// every call has answered. A node that fails is logged and tried again by
// the next delivery (the first failure is returned); the nodes that took
// the message are not called again. The caller holds done's lock.
func (g *Gateway) deliverRemote(ctx context.Context, c *conn, done *fanout, frames ...[]byte) error {
	if g.opts.Registry == nil || g.opts.Peer == nil {
		return nil
	}
	others, err := g.otherNodes(ctx, c)
	if err != nil {
		return g.unavailable("registry", c.tenant, err)
	}
	var nodes []string
	for _, n := range others {
		if !done.nodes[n] {
			nodes = append(nodes, n)
		}
	}
	errs := make([]error, len(nodes))
	call := func(i int) {
		pctx, cancel := context.WithTimeout(ctx, g.opts.WriteTimeout)
		defer cancel()
		errs[i] = g.opts.Peer.Deliver(pctx, nodes[i], c.tenant, c.session, done.id, frames...)
	}
	var wg sync.WaitGroup
	for i := 1; i < len(nodes); i++ {
		wg.Go(func() { call(i) })
	}
	if len(nodes) > 0 {
		call(0) // the first on this goroutine: one other node is the common case
	}
	wg.Wait()
	var failed error
	for i, err := range errs {
		if err != nil {
			g.log.Warn("gateway: delivering to another node", "node", nodes[i], "tenant", c.tenant, "err", err)
			failed = cmp.Or(failed, err)
			c.sess.invalidate() // the node may be gone: read again next time
			continue
		}
		if done.nodes == nil {
			done.nodes = map[string]bool{}
		}
		done.nodes[nodes[i]] = true
	}
	return failed
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
