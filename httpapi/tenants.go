package httpapi

import (
	"net/http"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/tenancy"
	"github.com/sluicehq/sluice/wire"
)

// The administration of tenants and their API keys is the tenant layer's
// (tenancy): these routes decode, call it, and encode.

// decodeTenant reads a tenant body.
func decodeTenant(w http.ResponseWriter, r *http.Request) (tenancy.TenantDoc, error) {
	var in tenancy.TenantDoc
	body, err := readBody(w, r)
	if err != nil {
		return in, err
	}
	return in, wire.DecodeStrict(body, &in, "")
}

func (h *Handler) listTenants(w http.ResponseWriter, r *http.Request, who principal) {
	ts, err := h.tenants.Tenants(r.Context(), who)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"tenants": ts})
}

func (h *Handler) createTenant(w http.ResponseWriter, r *http.Request, who principal) {
	if err := who.AdminOnly(); err != nil {
		writeError(w, err)
		return
	}
	in, err := decodeTenant(w, r)
	if err == nil {
		in, err = h.tenants.CreateTenant(r.Context(), actor(r, who), in)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, in)
}

// getTenant: GET /v1/tenants/{id}, the stored tenant; or, for a tenant of
// the configuration file the store does not hold, the file's entry, with
// "source": "file".
func (h *Handler) getTenant(w http.ResponseWriter, r *http.Request, who principal) {
	t, err := h.tenants.ShowTenant(r.Context(), who, r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, t)
}

// limitJSON is a configured policy as a tenant's requests are decided by
// it (tenancy.Limit).
type limitJSON struct {
	policyJSON
	Burst int64  `json:"burst,omitempty"`
	From  string `json:"from"`
}

// tenantLimits: GET /v1/tenants/{id}/limits, every configured policy as
// the tenant's requests are decided by it (tier and overrides applied),
// and where its limit comes from: for the tenant, and the dashboard.
func (h *Handler) tenantLimits(w http.ResponseWriter, r *http.Request, id string) {
	t, err := h.tenants.Lookup(r.Context(), id)
	if err != nil {
		writeError(w, err)
		return
	}
	ls, err := t.Limits()
	if err != nil {
		writeError(w, err)
		return
	}
	out := make([]limitJSON, len(ls))
	for i, l := range ls {
		out[i] = limitJSON{policyJSON: policyOut(l), From: l.From}
		if p := l.Policy; p.Algorithm == sluice.TokenBucket && p.Burst != p.Limit {
			out[i].Burst = p.Burst
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"tenant": id, "tier": t.Tier(), "limits": out})
}

func (h *Handler) putTenant(w http.ResponseWriter, r *http.Request, who principal) {
	if err := who.AdminOnly(); err != nil {
		writeError(w, err)
		return
	}
	in, err := decodeTenant(w, r)
	if err == nil {
		in, err = h.tenants.ReplaceTenant(r.Context(), actor(r, who), r.PathValue("id"), in)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, in)
}

func (h *Handler) deleteTenant(w http.ResponseWriter, r *http.Request, who principal) {
	if err := h.tenants.DeleteTenant(r.Context(), actor(r, who), r.PathValue("id")); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"deleted": r.PathValue("id")})
}

// keyRequest is the body of POST /v1/tenants/{id}/keys.
type keyRequest struct {
	Name string `json:"name"`
}

func (h *Handler) createKey(w http.ResponseWriter, r *http.Request, who principal) {
	if err := who.AdminOnly(); err != nil {
		writeError(w, err)
		return
	}
	body, err := readBody(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	var in keyRequest
	if len(body) > 0 {
		if err := wire.DecodeStrict(body, &in, ""); err != nil {
			writeError(w, err)
			return
		}
	}
	k, err := h.tenants.CreateKey(r.Context(), actor(r, who), r.PathValue("id"), in.Name)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, k)
}

func (h *Handler) listKeys(w http.ResponseWriter, r *http.Request, who principal) {
	keys, err := h.tenants.Keys(r.Context(), who, r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"keys": keys})
}

func (h *Handler) deleteKey(w http.ResponseWriter, r *http.Request, who principal) {
	if err := h.tenants.DeleteKey(r.Context(), actor(r, who), r.PathValue("id"), r.PathValue("key")); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"deleted": r.PathValue("key")})
}

// policyJSON is a configured policy on GET /v1/policies.
type policyJSON struct {
	Name      string   `json:"name"`
	Algorithm string   `json:"algorithm"`
	Limit     int64    `json:"limit"`
	Window    string   `json:"window,omitempty"`
	Key       []string `json:"key"`
	Shadow    bool     `json:"shadow,omitempty"`
	FailMode  string   `json:"failMode"`
}

func policyOut(l tenancy.Limit) policyJSON {
	p := l.Policy
	out := policyJSON{Name: p.Name, Algorithm: p.Algorithm.String(), Limit: p.Limit, Key: append([]string{}, l.Key...),
		Shadow: p.Shadow, FailMode: p.FailMode.String()}
	if p.Window > 0 {
		out.Window = p.Window.String()
	}
	return out
}

// policies: GET /v1/policies, the configured policies, endpoints and
// tiers (tenancy.Catalog).
func (h *Handler) policies(w http.ResponseWriter, r *http.Request, who principal) {
	c := h.tenants.Catalog()
	out := make([]policyJSON, len(c.Policies))
	for i, l := range c.Policies {
		out[i] = policyOut(l)
	}
	writeJSON(w, http.StatusOK, map[string]any{"policies": out, "endpoints": c.Endpoints, "tiers": c.Tiers})
}
