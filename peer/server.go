package peer

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"

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
//
// A client's call reaches a connection on any node; a forwarded one
// (ForwardedHeader) only this node's. A body over wire.MaxBodyBytes is
// refused 413, a connection gone 410.
func Mount(rt Router, gw Gateway) {
	s := &server{gw: gw}
	rt.TenantRoute("POST", "/v1/tenants/{id}/connections/{conn}", s.post)
	rt.TenantRoute("GET", "/v1/tenants/{id}/connections/{conn}", s.info)
	rt.TenantRoute("DELETE", "/v1/tenants/{id}/connections/{conn}", s.close)
	rt.TenantRoute("POST", "/v1/tenants/{id}/sessions/{session}/changed", s.changed)
}

// server is the management routes' half of the protocol.
type server struct{ gw Gateway }

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

// changed: POST /v1/tenants/{id}/sessions/{session}/changed, from another
// node that has a new connection of the session (?node=new: its first
// there): this node reads the session's connections again before its
// next fan-out (and the nodes holding them, before its next connect's
// announcement). It costs the caller's own tenant a read at most, whoever
// calls it; what it reads comes from the store, never from the call.
func (s *server) changed(w http.ResponseWriter, r *http.Request, tenant string) {
	s.gw.SessionChanged(tenant, r.PathValue("session"), r.URL.Query().Get("node") == "new")
	wire.WriteJSON(w, http.StatusOK, map[string]string{"changed": r.PathValue("session")})
}
