package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"net/http"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
)

// newSessionID returns 128 random bits, base32: the server chooses session
// ids, never the client.
func newSessionID() string {
	var b [16]byte
	rand.Read(b[:])
	return strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
}

// tenantExists reports whether a tenant is known: in the tenant store, or
// in the configuration file's tenants.
func (h *Handler) tenantExists(ctx context.Context, id string) (*sluice.Tenant, error) {
	t, err := h.opts.Tenants.GetTenant(ctx, id)
	if err == nil {
		return &t, nil
	}
	if sluice.KindOf(err) != sluice.KindNotFound {
		return nil, err
	}
	if _, ok := h.opts.Config().Tenants[id]; ok {
		return nil, nil
	}
	return nil, sluice.ErrTenantNotFound
}

// createSession: PUT /v1/tenants/{id}/sessions. The session lives the
// tenant's sessionTTL past its last activity.
func (h *Handler) createSession(w http.ResponseWriter, r *http.Request, tenant string) {
	t, err := h.tenantExists(r.Context(), tenant)
	if err != nil {
		writeError(w, err)
		return
	}
	ttl := time.Duration(h.opts.Config().Settings(t, tenant).SessionTTL) * time.Second
	now := h.opts.Now().UTC()
	x := sluice.Session{Tenant: tenant, ID: newSessionID(), CreatedAt: now, ExpiresAt: now.Add(ttl)}
	if err := h.opts.Sessions.CreateSession(r.Context(), x); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, x)
}

// getSession: GET /v1/tenants/{id}/sessions/{session}.
func (h *Handler) getSession(w http.ResponseWriter, r *http.Request, tenant string) {
	// A deleted tenant's sessions are gone with it.
	if _, err := h.tenantExists(r.Context(), tenant); err != nil {
		writeError(w, err)
		return
	}
	x, err := h.opts.Sessions.GetSession(r.Context(), h.opts.Now(), tenant, r.PathValue("session"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, x)
}

// deleteSession: DELETE /v1/tenants/{id}/sessions/{session}.
func (h *Handler) deleteSession(w http.ResponseWriter, r *http.Request, tenant string) {
	id := r.PathValue("session")
	if err := h.opts.Sessions.DeleteSession(r.Context(), h.opts.Now(), tenant, id); err != nil {
		writeError(w, err)
		return
	}
	if h.opts.OnSessionDeleted != nil {
		h.opts.OnSessionDeleted(tenant, id)
	}
	writeJSON(w, http.StatusOK, map[string]string{"deleted": id})
}
