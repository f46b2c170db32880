package gateway

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/sluicehq/sluice"
)

// The connection management API (API Gateway's @connections): post to a
// connection, read its times, close it, through any node. A node that does
// not hold the connection forwards the call to the node that does, found
// in the registry by the session its id names; a connection gone
// everywhere answers ErrGone (410).

// Peer reaches a connection held by another node, through that node's
// management API. Each call answers as the other node's gateway does:
// ErrGone (sluice.KindGone) for a connection it does not hold.
type Peer interface {
	Post(ctx context.Context, node, tenant, conn string, data []byte) error
	Info(ctx context.Context, node, tenant, conn string) (ConnectionInfo, error)
	Close(ctx context.Context, node, tenant, conn string, code websocket.StatusCode, reason string) error
	// Changed tells node that a session it holds connections of has a
	// new one elsewhere, newNode if the first of the session on its node
	// (Gateway.SessionChanged).
	Changed(ctx context.Context, node, tenant, session string, newNode bool) error
	// SessionGone tells node that a session it may hold connections of
	// was deleted (Gateway.SessionGone there).
	SessionGone(ctx context.Context, node, tenant, session string) error
	// Deliver gives node the frames for every connection of the session it
	// holds, in order (Gateway.DeliverLocal there): one call per node,
	// whatever the number of its connections. id names the message: a
	// node that took it already (the answer was lost, and the delivery
	// made again) drops it.
	Deliver(ctx context.Context, node, tenant, session, id string, frames ...[]byte) error
}

// ErrGone is the management API's answer for a connection that has gone
// away, or never was, or is another tenant's (410, as API Gateway).
var ErrGone = &sluice.Error{Kind: sluice.KindGone, Message: "connection gone"}

// ConnectionInfo is what the management API tells of a connection.
type ConnectionInfo struct {
	ID           string    `json:"id"`
	Tenant       string    `json:"tenant"`
	Session      string    `json:"session"`
	ConnectedAt  time.Time `json:"connectedAt"`
	LastActiveAt time.Time `json:"lastActiveAt"`
}

// lookup returns tenant's live connection id on this node, or ErrGone.
func (g *Gateway) lookup(tenant, id string) (*conn, error) {
	g.mu.Lock()
	c := g.byID[id]
	g.mu.Unlock()
	if c == nil || c.tenant != tenant {
		return nil, ErrGone
	}
	select {
	case <-c.done:
		return nil, ErrGone
	default:
		return c, nil
	}
}

// atOwner makes call at the node that holds tenant's connection id, if
// another node does and forward is set; ErrGone otherwise. The id names
// its session, not its node: each other live node registered as holding
// connections of the session is asked in turn, until one does not answer
// ErrGone. forward is true for a client's call, false for one another
// node forwarded, so that no call goes round.
func (g *Gateway) atOwner(ctx context.Context, tenant, id string, forward bool, call func(node string) error) error {
	i := strings.LastIndexByte(id, '.')
	session, ok := id[:max(i, 0)], i > 0
	if !forward || !ok || g.opts.Registry == nil || g.opts.Peer == nil {
		return ErrGone
	}
	nodes, err := g.registeredNodes(ctx, tenant, session)
	if err != nil {
		return g.unavailable("registry", tenant, err)
	}
	for _, node := range nodes {
		if err := call(node); !errors.Is(err, ErrGone) {
			return err
		}
	}
	return ErrGone
}

// PostToConnection sends data to a connection as a frame. It queues the
// frame without waiting for the client to take it: a connection whose
// outbox it would overflow is closed (1008) and answers ErrGone, as one
// closing does.
func (g *Gateway) PostToConnection(ctx context.Context, tenant, id string, data []byte, forward bool) error {
	c, err := g.lookup(tenant, id)
	if err == nil {
		if !c.send(data) {
			return ErrGone
		}
		return nil
	}
	return g.atOwner(ctx, tenant, id, forward, func(node string) error {
		return g.opts.Peer.Post(ctx, node, tenant, id, data)
	})
}

// ConnectionInfo returns a connection's times.
func (g *Gateway) ConnectionInfo(ctx context.Context, tenant, id string, forward bool) (ConnectionInfo, error) {
	c, err := g.lookup(tenant, id)
	if err == nil {
		c.mu.Lock()
		defer c.mu.Unlock()
		return ConnectionInfo{ID: c.id, Tenant: c.tenant, Session: c.session, ConnectedAt: c.connectedAt.UTC(), LastActiveAt: c.lastActiveAt.UTC()}, nil
	}
	var info ConnectionInfo
	err = g.atOwner(ctx, tenant, id, forward, func(node string) (err error) {
		info, err = g.opts.Peer.Info(ctx, node, tenant, id)
		return err
	})
	return info, err
}

// CloseConnection closes a connection with code (1000 for a client's
// call, 4001 for its session's deletion) and reason.
func (g *Gateway) CloseConnection(ctx context.Context, tenant, id string, code websocket.StatusCode, reason string, forward bool) error {
	c, err := g.lookup(tenant, id)
	if err == nil {
		c.close(code, reason)
		return nil
	}
	return g.atOwner(ctx, tenant, id, forward, func(node string) error {
		return g.opts.Peer.Close(ctx, node, tenant, id, code, reason)
	})
}
