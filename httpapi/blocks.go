package httpapi

import (
	"context"
	"net/http"
	"strconv"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/tenancy"
	"github.com/sluicehq/sluice/wire"
)

// boxLifter lifts a key's penalty box (engine.Engine), for a lift of a
// block: the Limiter, if it can.
type boxLifter interface {
	Lift(ctx context.Context, tenant string, c sluice.Check) (bool, error)
}

// The operator's hand on single keys and the audit trail, the tenant
// layer's (tenancy: blocks.go, audit.go):
//
//	GET    /v1/tenants/{id}/blocks                 the tenant's live blocks (its key or the admin)
//	POST   /v1/tenants/{id}/blocks                 the admin blocks a key of a policy for a time
//	DELETE /v1/tenants/{id}/blocks?policy=P&key=K  the admin ends a key's block and penalty
//	DELETE /v1/tenants/{id}/blocks {"policy": P, "parts": {...}}  the same, by the key's parts
//	GET    /v1/tenants/{id}/audit?n=50             the tenant's trail of changes, newest first
func (h *Handler) routeBlocks() {
	h.route("GET", "/v1/tenants/{id}/blocks", h.listBlocks)
	h.route("POST", "/v1/tenants/{id}/blocks", h.block)
	h.route("DELETE", "/v1/tenants/{id}/blocks", h.lift)
	h.route("GET", "/v1/tenants/{id}/audit", h.listAudit)
}

func (h *Handler) listBlocks(w http.ResponseWriter, r *http.Request, who principal) {
	bs, err := h.tenants.Blocks(r.Context(), who, r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"blocks": bs})
}

func (h *Handler) block(w http.ResponseWriter, r *http.Request, who principal) {
	if err := who.AdminOnly(); err != nil {
		writeError(w, err)
		return
	}
	body, err := readBody(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	var in tenancy.BlockRequest
	if err := wire.DecodeStrict(body, &in, ""); err != nil {
		writeError(w, err)
		return
	}
	b, err := h.tenants.Block(r.Context(), actor(r, who), r.PathValue("id"), in)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, b)
}

func (h *Handler) lift(w http.ResponseWriter, r *http.Request, who principal) {
	if err := who.AdminOnly(); err != nil {
		writeError(w, err)
		return
	}
	// The key as listed in the query (?policy=P&key=K), or in a body as
	// a block names it: {"policy": P, "parts": {...}} or {"key": K}.
	var in tenancy.LiftRequest
	body, err := readBody(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	q := r.URL.Query()
	switch {
	case len(body) > 0:
		if q.Has("key") || q.Has("policy") {
			writeError(w, sluice.Invalid("key", "give the key in the query or in the body, not both"))
			return
		}
		if err := wire.DecodeStrict(body, &in, ""); err != nil {
			writeError(w, err)
			return
		}
	case !q.Has("key"):
		writeError(w, sluice.Invalid("key", "is required: the key as the abuse view lists it, or parts in the body"))
		return
	default:
		key := q.Get("key")
		in = tenancy.LiftRequest{Policy: q.Get("policy"), Key: &key}
	}
	var box func(ctx context.Context, tenant string, c sluice.Check) (bool, error)
	if kk, ok := h.opts.Limiter.(boxLifter); ok {
		box = kk.Lift
	}
	l, err := h.tenants.Lift(r.Context(), actor(r, who), r.PathValue("id"), in, box)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"lifted": true, "block": l.Block, "penalty": l.Penalty})
}

func (h *Handler) listAudit(w http.ResponseWriter, r *http.Request, who principal) {
	if !who.Can(r.PathValue("id")) {
		writeError(w, tenancy.ErrForbidden)
		return
	}
	n := 50
	if v := r.URL.Query().Get("n"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 || n > tenancy.MaxAudit {
			writeError(w, sluice.Invalid("n", "must be 1 to %d, got %q", tenancy.MaxAudit, v))
			return
		}
	}
	entries, err := h.tenants.Audit(r.Context(), who, r.PathValue("id"), n)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"entries": entries})
}
