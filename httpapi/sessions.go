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

// storeCtx bounds one read of the tenant store by StoreTimeout.
func (h *Handler) storeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if h.opts.StoreTimeout > 0 {
		return context.WithTimeout(ctx, h.opts.StoreTimeout)
	}
	return context.WithCancel(ctx)
}

// readTenant reads a tenant's stored record under the store deadline.
func (h *Handler) readTenant(ctx context.Context, id string) (sluice.Tenant, error) {
	return h.tenants.Stored(ctx, id)
}

// createSession: PUT /v1/tenants/{id}/sessions. The session lives the
// tenant's sessionTTL past its last activity.
func (h *Handler) createSession(w http.ResponseWriter, r *http.Request, tenant string) {
	t, err := h.tenants.Lookup(r.Context(), tenant)
	if err != nil {
		writeError(w, err)
		return
	}
	ttl := time.Duration(t.Settings().SessionTTL) * time.Second
	now := h.opts.Now().UTC()
	x := sluice.Session{Tenant: tenant, ID: newSessionID(), CreatedAt: now, ExpiresAt: now.Add(ttl)}
	if err := h.opts.Sessions.CreateSession(r.Context(), x); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, x)
}

// session returns a live session of the tenant as it is now: a deleted
// tenant's sessions are gone with it, and an earlier tenant's of the same
// id are not this one's.
func (h *Handler) session(ctx context.Context, tenant, id string) (sluice.Session, error) {
	t, err := h.tenants.Lookup(ctx, tenant)
	if err != nil {
		return sluice.Session{}, err
	}
	x, err := h.opts.Sessions.GetSession(ctx, h.opts.Now(), tenant, id)
	if err == nil && x.CreatedAt.Before(t.Since()) {
		return sluice.Session{}, sluice.ErrSessionNotFound
	}
	return x, err
}

// getSession: GET /v1/tenants/{id}/sessions/{session}.
func (h *Handler) getSession(w http.ResponseWriter, r *http.Request, tenant string) {
	x, err := h.session(r.Context(), tenant, r.PathValue("session"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, x)
}

// deleteSession: DELETE /v1/tenants/{id}/sessions/{session}.
func (h *Handler) deleteSession(w http.ResponseWriter, r *http.Request, tenant string) {
	id := r.PathValue("session")
	if _, err := h.session(r.Context(), tenant, id); err != nil {
		writeError(w, err)
		return
	}
	if err := h.opts.Sessions.DeleteSession(r.Context(), h.opts.Now(), tenant, id); err != nil {
		writeError(w, err)
		return
	}
	if h.opts.OnSessionDeleted != nil {
		h.opts.OnSessionDeleted(tenant, id)
	}
	writeJSON(w, http.StatusOK, map[string]string{"deleted": id})
}
