package httpapi

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/tenancy"
	"github.com/sluicehq/sluice/wire"
)

// acquire: POST /v1/leases.
func (h *Handler) acquire(w http.ResponseWriter, r *http.Request, who principal) {
	in, tenant, check, err := h.leaseCheck(w, r, who, true)
	if err != nil {
		writeError(w, err)
		return
	}
	units := int64(1)
	if in.Units != nil {
		units = *in.Units
	}
	if units < 1 || units > check.Policy.Limit {
		writeError(w, sluice.Invalid("units", "must be between 1 and the policy's limit %d, got %d", check.Policy.Limit, units))
		return
	}
	req := sluice.Request{Tenant: tenant, Hits: units, Checks: []sluice.Check{check}}
	res, err := h.opts.Limiter.Check(r.Context(), req)
	if err != nil {
		writeError(w, err)
		return
	}
	if !res.Allowed && res.Decision.FailedClosed {
		writeError(w, wire.FailedClosed(check.Policy.Name))
		return
	}
	out := wire.FromResult(res)
	if d := res.Decision; res.Allowed && d.Lease.ID != 0 {
		tok, err := h.tenants.LeaseToken(r.Context(), tenant, check, d.Lease.ID)
		if err != nil {
			// The lease cannot be named: give its units back.
			h.opts.Limiter.Release(r.Context(), tenant, check, d.Lease.ID)
			writeError(w, err)
			return
		}
		out.Lease.Token = tok
		out.Decisions[0].Lease = out.Lease
	}
	wire.WriteRateLimitHeaders(w.Header(), res, []sluice.Policy{check.Policy}, h.opts.Now())
	writeJSON(w, statusOfResult(res), out)
}

// renew: POST /v1/leases/{token}/renew.
func (h *Handler) renew(w http.ResponseWriter, r *http.Request, who principal) {
	h.updateLease(w, r, who, h.opts.Limiter.Renew)
}

// release: DELETE /v1/leases/{token}.
func (h *Handler) release(w http.ResponseWriter, r *http.Request, who principal) {
	h.updateLease(w, r, who, h.opts.Limiter.Release)
}

func (h *Handler) updateLease(w http.ResponseWriter, r *http.Request, who principal,
	update func(ctx context.Context, tenant string, c sluice.Check, lease uint64) (sluice.Decision, error)) {
	_, tenant, check, err := h.leaseCheck(w, r, who, false)
	if err != nil {
		writeError(w, err)
		return
	}
	key, id, err := h.tenants.ParseLeaseToken(r.Context(), tenant, check, r.PathValue("token"))
	if err != nil {
		writeError(w, err)
		return
	}
	check.Key = key
	d, err := update(r.Context(), tenant, check, id)
	if err != nil {
		writeError(w, err)
		return
	}
	out := wire.FromDecision(d)
	if out.Lease != nil {
		out.Lease.Token = r.PathValue("token")
	}
	writeJSON(w, http.StatusOK, out)
}

// leaseCheck decodes a lease body into its tenant and check (the tenant
// layer's LeaseCheck or InlineLeaseCheck). withKey is false for renew and
// release, whose key is in the token.
func (h *Handler) leaseCheck(w http.ResponseWriter, r *http.Request, who principal, withKey bool) (wire.LeaseRequest, string, sluice.Check, error) {
	var in wire.LeaseRequest
	body, err := readBody(w, r)
	if err != nil {
		return in, "", sluice.Check{}, err
	}
	if err := wire.DecodeStrict(body, &in, ""); err != nil {
		return in, "", sluice.Check{}, err
	}
	tenant, err := who.TenantOf(in.Tenant)
	if err != nil {
		return in, "", sluice.Check{}, err
	}
	var check sluice.Check
	switch {
	case len(in.Policy) == 0 || string(in.Policy) == "null":
		err = sluice.Invalid("policy", "is missing: a concurrency policy's name, or an inline policy")
	case in.Policy[0] == '"':
		var name string
		if json.Unmarshal(in.Policy, &name) != nil {
			return in, "", sluice.Check{}, sluice.Invalid("policy", "is not a valid string")
		}
		var parts *tenancy.KeyParts
		if withKey {
			kp := h.keyParts(r, in.Key)
			parts = &kp
		}
		check, err = h.tenants.LeaseCheck(r.Context(), tenant, name, parts)
	default:
		var p sluice.Policy
		if p, err = wire.DecodePolicy(in.Policy, "policy"); err == nil {
			check, err = h.tenants.InlineLeaseCheck(p, in.KeyValue)
			check.Key = h.tenants.HideKey(tenant, check.Key)
		}
	}
	if err != nil {
		return in, "", sluice.Check{}, err
	}
	return in, tenant, check, nil
}
