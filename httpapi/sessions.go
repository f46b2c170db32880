package httpapi

import (
	"net/http"
)

// createSession: PUT /v1/tenants/{id}/sessions, a session of the server's
// choosing (tenancy.Service.CreateSession).
func (h *Handler) createSession(w http.ResponseWriter, r *http.Request, who principal) {
	x, err := h.tenants.CreateSession(r.Context(), who, r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, x)
}

// getSession: GET /v1/tenants/{id}/sessions/{session}.
func (h *Handler) getSession(w http.ResponseWriter, r *http.Request, who principal) {
	x, err := h.tenants.Session(r.Context(), who, r.PathValue("id"), r.PathValue("session"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, x)
}

// deleteSession: DELETE /v1/tenants/{id}/sessions/{session}.
func (h *Handler) deleteSession(w http.ResponseWriter, r *http.Request, who principal) {
	id := r.PathValue("session")
	if err := h.tenants.DeleteSession(r.Context(), who, r.PathValue("id"), id); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"deleted": id})
}
