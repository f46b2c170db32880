package httpapi

import (
	"context"
	"net/http"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/tenancy"
	"github.com/sluicehq/sluice/wire"
)

// keyEraser erases a key's state (engine.Engine): the Limiter, if it can.
type keyEraser interface {
	Erase(ctx context.Context, tenant, value string, checks []sluice.Check) (int, error)
}

// The erasure of one key's state on request (tenancy: erase.go,
// docs/privacy.md), the admin's:
//
//	POST /v1/tenants/{id}/erase  {"parts": {"user": "alice@example.com"}}
//	                             or {"key": "user=~Ab3…"} or {"keyValue": "alice"}
func (h *Handler) routeErase() {
	h.route("POST", "/v1/tenants/{id}/erase", h.erase)
}

func (h *Handler) erase(w http.ResponseWriter, r *http.Request, who principal) {
	er, ok := h.opts.Limiter.(keyEraser)
	if !ok {
		writeError(w, &sluice.Error{Op: "httpapi.erase", Kind: sluice.KindInternal, Message: "the limiter cannot erase keys"})
		return
	}
	body, err := readBody(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	var in tenancy.EraseRequest
	if err := wire.DecodeStrict(body, &in, ""); err != nil {
		writeError(w, err)
		return
	}
	out, err := h.tenants.Erase(r.Context(), actor(r, who), r.PathValue("id"), in, er.Erase)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}
