package httpapi

import (
	"encoding/json"
	"net/http"
)

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
	if err := h.opts.Gateway.PostToConnection(tenant, r.PathValue("conn"), body); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"sent": r.PathValue("conn")})
}

// connectionInfo: GET /v1/tenants/{id}/connections/{conn}.
func (h *Handler) connectionInfo(w http.ResponseWriter, r *http.Request, tenant string) {
	info, err := h.opts.Gateway.ConnectionInfo(tenant, r.PathValue("conn"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, info)
}

// closeConnection: DELETE /v1/tenants/{id}/connections/{conn}.
func (h *Handler) closeConnection(w http.ResponseWriter, r *http.Request, tenant string) {
	if err := h.opts.Gateway.CloseConnection(tenant, r.PathValue("conn")); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"closed": r.PathValue("conn")})
}
