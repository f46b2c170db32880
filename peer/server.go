package peer

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/coder/websocket"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/wire"
)

// Gateway is what the management routes ask of the WebSocket gateway
// (*gateway.Gateway). Each call answers gateway.ErrGone for a connection
// that has gone away, and forwards a call for a connection another node
// holds to it when forward is set: for a client's call, not for one
// another node forwarded.
type Gateway interface {
	PostToConnection(ctx context.Context, tenant, id string, data []byte, forward bool) error
	ConnectionInfo(ctx context.Context, tenant, id string, forward bool) (gateway.ConnectionInfo, error)
	CloseConnection(ctx context.Context, tenant, id string, code websocket.StatusCode, reason string, forward bool) error
	// SessionChanged drops what the node keeps of a session's
	// connections on other nodes: another node has a new one (newNode:
	// its first there).
	SessionChanged(tenant, session string, newNode bool)
	// SessionGone closes the node's connections of a session if the
	// store says it is gone (gateway.Gateway.SessionGone).
	SessionGone(ctx context.Context, tenant, session string) error
	// DeliverLocal sends frames, in order, to every connection of the
	// session on this node, without waiting for one, and returns how
	// many it reached (gateway.Gateway.DeliverLocal).
	DeliverLocal(tenant, session string, frames ...[]byte) int
}

// Router routes a tenant's path, /v1/tenants/{id}/..., behind the API's
// authentication: the caller must reach tenant {id}, and fn gets its id
// (*httpapi.Handler).
type Router interface {
	TenantRoute(method, path string, fn func(w http.ResponseWriter, r *http.Request, tenant string))
}

// errNotJSON refuses a post whose body is not a JSON value.
var errNotJSON = sluice.Invalid("body", "is not a JSON value")

// Mount routes the connection management API (API Gateway's
// @connections) and the nodes' calls on sessions to gw, on rt:
//
//	POST   /v1/tenants/{id}/connections/{conn}          send the body, a JSON value, as a frame
//	GET    /v1/tenants/{id}/connections/{conn}          the connection's times
//	DELETE /v1/tenants/{id}/connections/{conn}          close it (?code=4000 to 4999, ?reason=)
//	POST   /v1/tenants/{id}/sessions/{session}/changed  another node has a new connection of the session
//	POST   /v1/tenants/{id}/sessions/{session}/gone     another node deleted the session
//	POST   /v1/tenants/{id}/sessions/{session}/deliver  a message for the session's connections on this node
//
// A client's call reaches a connection on any node; a forwarded one
// (ForwardedHeader) only this node's. A body over wire.MaxBodyBytes is
// refused 413, a connection gone 410.
func Mount(rt Router, gw Gateway) {
	s := &server{gw: gw, seen: newSeen(maxSeenSessions)}
	rt.TenantRoute("POST", "/v1/tenants/{id}/connections/{conn}", s.post)
	rt.TenantRoute("GET", "/v1/tenants/{id}/connections/{conn}", s.info)
	rt.TenantRoute("DELETE", "/v1/tenants/{id}/connections/{conn}", s.close)
	rt.TenantRoute("POST", "/v1/tenants/{id}/sessions/{session}/changed", s.changed)
	rt.TenantRoute("POST", "/v1/tenants/{id}/sessions/{session}/gone", s.gone)
	rt.TenantRoute("POST", "/v1/tenants/{id}/sessions/{session}/deliver", s.deliver)
}

// server is the management routes' half of the protocol.
type server struct {
	gw   Gateway
	seen *seen
}

// post: POST /v1/tenants/{id}/connections/{conn}, the body (a JSON value)
// sent to the connection as a frame.
func (s *server) post(w http.ResponseWriter, r *http.Request, tenant string) {
	body, err := wire.ReadBody(w, r)
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	if !json.Valid(body) {
		wire.WriteError(w, errNotJSON)
		return
	}
	if err := s.gw.PostToConnection(r.Context(), tenant, r.PathValue("conn"), body, !Forwarded(r)); err != nil {
		wire.WriteError(w, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, map[string]string{"sent": r.PathValue("conn")})
}

// info: GET /v1/tenants/{id}/connections/{conn}.
func (s *server) info(w http.ResponseWriter, r *http.Request, tenant string) {
	info, err := s.gw.ConnectionInfo(r.Context(), tenant, r.PathValue("conn"), !Forwarded(r))
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, info)
}

// close: DELETE /v1/tenants/{id}/connections/{conn}, closing with 1000,
// or with ?code=4000 to 4999 and ?reason= (at most 123 bytes, the close
// frame's room).
func (s *server) close(w http.ResponseWriter, r *http.Request, tenant string) {
	code, reason := websocket.StatusNormalClosure, "closed by the server"
	if q := r.URL.Query().Get("code"); q != "" {
		n, err := strconv.Atoi(q)
		if err != nil || n < 4000 || n > 4999 {
			wire.WriteError(w, sluice.Invalid("code", "must be a close code for applications, 4000 to 4999, got %q", q))
			return
		}
		code = websocket.StatusCode(n)
	}
	if q := r.URL.Query().Get("reason"); q != "" {
		if len(q) > 123 {
			wire.WriteError(w, sluice.Invalid("reason", "is %d bytes, at most 123 fit in a close frame", len(q)))
			return
		}
		reason = q
	}
	if err := s.gw.CloseConnection(r.Context(), tenant, r.PathValue("conn"), code, reason, !Forwarded(r)); err != nil {
		wire.WriteError(w, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, map[string]string{"closed": r.PathValue("conn")})
}

// gone: POST /v1/tenants/{id}/sessions/{session}/gone, from the node
// that deleted the session: this node reads it, and closes its
// connections of it if the store says it is gone. Whoever calls it, what
// it does comes from the store; a node holding no connection of the
// session reads nothing.
func (s *server) gone(w http.ResponseWriter, r *http.Request, tenant string) {
	if err := s.gw.SessionGone(r.Context(), tenant, r.PathValue("session")); err != nil {
		wire.WriteError(w, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, map[string]string{"checked": r.PathValue("session")})
}

// changed: POST /v1/tenants/{id}/sessions/{session}/changed, from another
// node that has a new connection of the session; if its first there
// (?node=new), this node reads the nodes holding the session again before
// its next fan-out and its next connect's announcement. It costs the
// caller's own tenant a read at most, whoever calls it; what it reads
// comes from the store, never from the call.
func (s *server) changed(w http.ResponseWriter, r *http.Request, tenant string) {
	s.gw.SessionChanged(tenant, r.PathValue("session"), r.URL.Query().Get("node") == "new")
	wire.WriteJSON(w, http.StatusOK, map[string]string{"changed": r.PathValue("session")})
}

// DeliveryIDHeader names a delivery's message (Client.Deliver), so that a
// node drops a message it took already; DeliveryFramesHeader holds the
// lengths of the frames its body is made of, comma-separated.
const (
	DeliveryIDHeader     = "Sluice-Delivery"
	DeliveryFramesHeader = "Sluice-Frames"
)

// maxDeliveryBody bounds a delivery's body: a message and its reply, each
// at most the gateway's largest message (128 KiB by default), twice over.
const maxDeliveryBody = 512 << 10

// deliver: POST /v1/tenants/{id}/sessions/{session}/deliver, from another
// node, a message for every connection of the session on this node: the
// frames (each a JSON value, valid UTF-8) go to each connection's outbox,
// in order, before the answer, so that the sender's next message, sent
// after it, comes after it on every connection. A message id seen already
// for the session (its answer lost, the delivery made again) is answered
// 200 and not sent again. A tenant's own key may call it too: it can reach
// its own connections only, as posting to each would.
func (s *server) deliver(w http.ResponseWriter, r *http.Request, tenant string) {
	frames, err := readFrames(w, r)
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	session := r.PathValue("session")
	if id := r.Header.Get(DeliveryIDHeader); id != "" && !s.seen.add(tenant, session, id) {
		wire.WriteJSON(w, http.StatusOK, map[string]any{"repeat": true})
		return
	}
	wire.WriteJSON(w, http.StatusOK, map[string]int{"reached": s.gw.DeliverLocal(tenant, session, frames...)})
}

// readFrames reads a delivery's body, cut into its frames by
// DeliveryFramesHeader.
func readFrames(w http.ResponseWriter, r *http.Request) ([][]byte, error) {
	var lens []int
	total := 0
	for _, f := range strings.Split(r.Header.Get(DeliveryFramesHeader), ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 || total+n > maxDeliveryBody {
			return nil, sluice.Invalid(DeliveryFramesHeader, "must be the lengths of the frames, together at most %d bytes", maxDeliveryBody)
		}
		lens, total = append(lens, n), total+n
	}
	// Read as it comes, not into a buffer of the size the header claims:
	// a caller that claims the most and sends nothing holds nothing.
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(total)+1))
	if err != nil || len(body) != total {
		return nil, sluice.Invalid("body", "is not the %d bytes of its frames (read %d: %v)", total, len(body), err)
	}
	frames := make([][]byte, len(lens))
	for i, n := range lens {
		frames[i], body = body[:n:n], body[n:]
		if !json.Valid(frames[i]) || !utf8.Valid(frames[i]) {
			return nil, errNotJSON
		}
	}
	return frames, nil
}

// maxSeenSessions bounds the sessions whose recent message ids a node
// keeps, a sixteenth of them for one tenant; seenPerSession, the ids kept
// per session.
const (
	maxSeenSessions = 4096
	seenPerSession  = 64
)

// seenKey is a session of a tenant.
type seenKey struct{ tenant, session string }

// seen is the message ids a node took lately, per session: the last
// seenPerSession of each of the last maxSeenSessions sessions to get one,
// and of a tenant's last max/16, so that one tenant's many sessions do not
// push out the others'. A delivery made again after more have passed is
// taken again: a lost answer is retried within seconds, by the sender's
// queue, after at most a few other messages of the session (one at a
// time, in order).
type seen struct {
	mu       sync.Mutex
	max      int
	ids      map[seenKey][]string // per session, oldest first
	order    []seenKey            // sessions, oldest first
	sessions map[string]int       // per tenant, its sessions in order
}

func newSeen(max int) *seen {
	return &seen{max: max, ids: map[seenKey][]string{}, sessions: map[string]int{}}
}

// add records id for the tenant's session, and reports whether it is new.
func (s *seen) add(tenant, session, id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := seenKey{tenant, session}
	ids, ok := s.ids[k]
	if slices.Contains(ids, id) {
		return false
	}
	if !ok {
		switch {
		case s.sessions[tenant] >= max(s.max/16, 1):
			s.forget(slices.IndexFunc(s.order, func(o seenKey) bool { return o.tenant == tenant }))
		case len(s.order) >= s.max:
			s.forget(0)
		}
		s.order = append(s.order, k)
		s.sessions[tenant]++
	}
	if len(ids) >= seenPerSession {
		ids = ids[1:]
	}
	s.ids[k] = append(ids, id)
	return true
}

// forget drops the session at order[i].
func (s *seen) forget(i int) {
	k := s.order[i]
	delete(s.ids, k)
	s.order = slices.Delete(s.order, i, i+1)
	if s.sessions[k.tenant]--; s.sessions[k.tenant] == 0 {
		delete(s.sessions, k.tenant)
	}
}
