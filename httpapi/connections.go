package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/coder/websocket"

	"github.com/sluicehq/sluice"
)

// ForwardedHeader marks a management call one node forwarded to the node
// that holds the connection: that node answers for its own connections
// only, so that no call goes round.
const ForwardedHeader = "Sluice-Forwarded"

func forward(r *http.Request) bool { return r.Header.Get(ForwardedHeader) == "" }

// postToConnection: POST /v1/tenants/{id}/connections/{conn}, the body
// (a JSON value) sent to the connection as a frame.
func (h *Handler) postToConnection(w http.ResponseWriter, r *http.Request, tenant string) {
	body, err := readBody(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	if !json.Valid(body) {
		writeError(w, errInvalidJSONBody)
		return
	}
	if err := h.opts.Gateway.PostToConnection(r.Context(), tenant, r.PathValue("conn"), body, forward(r)); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"sent": r.PathValue("conn")})
}

// connectionInfo: GET /v1/tenants/{id}/connections/{conn}.
func (h *Handler) connectionInfo(w http.ResponseWriter, r *http.Request, tenant string) {
	info, err := h.opts.Gateway.ConnectionInfo(r.Context(), tenant, r.PathValue("conn"), forward(r))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, info)
}

// closeConnection: DELETE /v1/tenants/{id}/connections/{conn}, closing with
// 1000, or with ?code=4000 to 4999 and ?reason= (at most 123 bytes, the
// close frame's room).
func (h *Handler) closeConnection(w http.ResponseWriter, r *http.Request, tenant string) {
	code, reason := websocket.StatusNormalClosure, "closed by the server"
	if q := r.URL.Query().Get("code"); q != "" {
		n, err := strconv.Atoi(q)
		if err != nil || n < 4000 || n > 4999 {
			writeError(w, sluice.Invalid("code", "must be a close code for applications, 4000 to 4999, got %q", q))
			return
		}
		code = websocket.StatusCode(n)
	}
	if q := r.URL.Query().Get("reason"); q != "" {
		if len(q) > 123 {
			writeError(w, sluice.Invalid("reason", "is %d bytes, at most 123 fit in a close frame", len(q)))
			return
		}
		reason = q
	}
	if err := h.opts.Gateway.CloseConnection(r.Context(), tenant, r.PathValue("conn"), code, reason, forward(r)); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"closed": r.PathValue("conn")})
}

// sessionChanged: POST /v1/tenants/{id}/sessions/{session}/changed, from
// another node that has a new connection of the session (?node=new: its
// first there): this node reads the session's connections again before
// its next fan-out (and the nodes holding them, before its next connect's
// announcement). It costs the caller's own tenant a read at most, whoever
// calls it; what it reads comes from the store, never from the call.
func (h *Handler) sessionChanged(w http.ResponseWriter, r *http.Request, tenant string) {
	h.opts.Gateway.SessionChanged(tenant, r.PathValue("session"), r.URL.Query().Get("node") == "new")
	writeJSON(w, http.StatusOK, map[string]string{"changed": r.PathValue("session")})
}
