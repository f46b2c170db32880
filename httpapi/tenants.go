package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/wire"
)

// tenantJSON is a tenant on the wire: durations in overrides are strings
// ("60s") or seconds, as in policies.
type tenantJSON struct {
	ID        string                  `json:"id"`
	Tier      string                  `json:"tier,omitempty"`
	Settings  sluice.TenantSettings   `json:"settings"`
	Overrides map[string]overrideJSON `json:"overrides,omitempty"`
	CreatedAt *time.Time              `json:"createdAt,omitempty"`
	UpdatedAt *time.Time              `json:"updatedAt,omitempty"`
	// Version is the record's (sluice.Tenant.Version). In a PUT, the
	// version the writer read: the PUT answers 409 if the tenant has
	// changed since. Omitted: the PUT replaces whatever is there.
	Version int64 `json:"version,omitempty"`
	// Source says where a tenant read comes from: "file" for a tenant of
	// the configuration file that the store does not hold (its limits
	// are changed in the file). The server's to say: refused in a body.
	Source string `json:"source,omitempty"`
}

type overrideJSON struct {
	Limit    *int64          `json:"limit,omitempty"`
	Window   json.RawMessage `json:"window,omitempty"`
	Burst    *int64          `json:"burst,omitempty"`
	LeaseTTL json.RawMessage `json:"leaseTTL,omitempty"`
	Shadow   *bool           `json:"shadow,omitempty"`
}

func tenantOut(t sluice.Tenant) tenantJSON {
	out := tenantJSON{ID: t.ID, Tier: t.Tier, Settings: t.Settings, CreatedAt: &t.CreatedAt, UpdatedAt: &t.UpdatedAt, Version: t.Version}
	if len(t.Overrides) > 0 {
		out.Overrides = map[string]overrideJSON{}
		for name, o := range t.Overrides {
			j := overrideJSON{Limit: o.Limit, Burst: o.Burst, Shadow: o.Shadow}
			if o.Window != nil {
				j.Window, _ = json.Marshal(o.Window.String())
			}
			if o.LeaseTTL != nil {
				j.LeaseTTL, _ = json.Marshal(o.LeaseTTL.String())
			}
			out.Overrides[name] = j
		}
	}
	return out
}

// decodeTenant reads a tenant body; id, if given in the path, must match.
func (h *Handler) decodeTenant(w http.ResponseWriter, r *http.Request, id string) (sluice.Tenant, error) {
	body, err := readBody(w, r)
	if err != nil {
		return sluice.Tenant{}, err
	}
	var in tenantJSON
	if err := wire.DecodeStrict(body, &in, ""); err != nil {
		return sluice.Tenant{}, err
	}
	if id != "" {
		if in.ID == "" {
			in.ID = id
		} else if in.ID != id {
			return sluice.Tenant{}, sluice.Invalid("id", "is %q but the path names %q", in.ID, id)
		}
	}
	t := sluice.Tenant{ID: in.ID, Tier: in.Tier, Settings: in.Settings, Version: in.Version}
	if in.Source != "" {
		return t, sluice.Invalid("source", "is the server's to say, not a field to set")
	}
	if in.Version < 0 {
		return t, sluice.Invalid("version", "must be a version the tenant was read at, got %d", in.Version)
	}
	if in.Tier != "" {
		if _, ok := h.opts.Config().Tiers[in.Tier]; !ok {
			return t, sluice.Invalid("tier", "%q is not a configured tier", in.Tier)
		}
	}
	if len(in.Overrides) > 0 {
		t.Overrides = map[string]sluice.PolicyOverride{}
		cfg := h.opts.Config()
		for name, o := range in.Overrides {
			field := "overrides." + name
			np, ok := cfg.Policies[name]
			if !ok {
				return t, sluice.Invalid(field, "%q is not a configured policy", name)
			}
			po := sluice.PolicyOverride{Limit: o.Limit, Burst: o.Burst, Shadow: o.Shadow}
			for _, d := range []struct {
				raw   json.RawMessage
				dst   **time.Duration
				field string
			}{{o.Window, &po.Window, field + ".window"}, {o.LeaseTTL, &po.LeaseTTL, field + ".leaseTTL"}} {
				if len(d.raw) == 0 {
					continue
				}
				v, err := wire.ParseDuration(d.raw)
				if err != nil {
					return t, sluice.Invalid(d.field, "%v", err)
				}
				*d.dst = &v
			}
			// The override must leave a valid policy, or every request
			// on it would fail for this tenant.
			if merged := po.Apply(np.Policy); merged.Validate() != nil {
				err := merged.Validate()
				return t, err.(*sluice.Error).In(field)
			}
			t.Overrides[name] = po
		}
	}
	return t, t.Validate()
}

func (h *Handler) listTenants(w http.ResponseWriter, r *http.Request, who principal) {
	ts, err := h.opts.Tenants.ListTenants(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	out := []tenantJSON{}
	seen := map[string]bool{}
	cfg := h.opts.Config()
	for _, t := range ts {
		seen[t.ID] = true
		ft, inFile := cfg.Tenants[t.ID]
		switch {
		case !who.can(t.ID):
		case t.File && inFile:
			out = append(out, fileTenantOut(t.ID, ft, &t))
		default:
			out = append(out, tenantOut(t))
		}
	}
	// The configuration file's tenants exist too.
	for id, ft := range cfg.Tenants {
		if !seen[id] && who.can(id) {
			out = append(out, fileTenantOut(id, ft, nil))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	writeJSON(w, http.StatusOK, map[string]any{"tenants": out})
}

func (h *Handler) createTenant(w http.ResponseWriter, r *http.Request, who principal) {
	if !who.admin {
		writeError(w, errAdminOnly)
		return
	}
	t, err := h.decodeTenant(w, r, "")
	if err != nil {
		writeError(w, err)
		return
	}
	t.CreatedAt = h.opts.Now().UTC()
	t.UpdatedAt = t.CreatedAt
	if err := h.opts.Tenants.CreateTenant(r.Context(), t); err != nil {
		writeError(w, err)
		return
	}
	h.audit(r, who, "tenant.create", t.ID, nil, tenantOut(t))
	writeJSON(w, http.StatusCreated, tenantOut(t))
}

// getTenant: GET /v1/tenants/{id}, the stored tenant; or, for a tenant of
// the configuration file the store does not hold, the file's entry, with
// "source": "file".
func (h *Handler) getTenant(w http.ResponseWriter, r *http.Request, id string) {
	t, err := h.tenants.Lookup(r.Context(), id)
	switch {
	case err != nil:
		writeError(w, err)
	case t.FileOnly():
		writeJSON(w, http.StatusOK, fileTenantOut(id, h.opts.Config().Tenants[id], t.Record))
	default:
		writeJSON(w, http.StatusOK, tenantOut(*t.Record))
	}
}

// errFileTenant answers a change of a tenant of the configuration file's
// limits.
func errFileTenant(id string) error {
	return &sluice.Error{Kind: sluice.KindConflict, Field: "id", Message: fmt.Sprintf("tenant %q is the configuration file's: change its limits in that file", id)}
}

// fileTenantOut is a tenant of the configuration file as the file gives
// it, with the version of the record that holds its blocks and keys, if
// it has one (rec).
func fileTenantOut(id string, ft config.Tenant, rec *sluice.Tenant) tenantJSON {
	out := tenantOut(sluice.Tenant{ID: id, Tier: ft.Tier, Settings: ft.Settings, Overrides: ft.Overrides})
	out.CreatedAt, out.UpdatedAt, out.Source = nil, nil, "file"
	if rec != nil {
		out.Version = rec.Version
	}
	return out
}

// limitJSON is a configured policy as a tenant's requests are decided by
// it (tenancy.Limit).
type limitJSON struct {
	Name      string   `json:"name"`
	Algorithm string   `json:"algorithm"`
	Limit     int64    `json:"limit"`
	Window    string   `json:"window,omitempty"`
	Burst     int64    `json:"burst,omitempty"`
	Key       []string `json:"key"`
	Shadow    bool     `json:"shadow,omitempty"`
	FailMode  string   `json:"failMode"`
	From      string   `json:"from"`
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
		p := l.Policy
		out[i] = limitJSON{Name: p.Name, Algorithm: p.Algorithm.String(), Limit: p.Limit, Key: append([]string{}, l.Key...),
			Shadow: p.Shadow, FailMode: p.FailMode.String(), From: l.From}
		if p.Window > 0 {
			out[i].Window = p.Window.String()
		}
		if p.Algorithm == sluice.TokenBucket && p.Burst != p.Limit {
			out[i].Burst = p.Burst
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"tenant": id, "tier": t.Tier(), "limits": out})
}

func (h *Handler) putTenant(w http.ResponseWriter, r *http.Request, who principal) {
	if !who.admin {
		writeError(w, errAdminOnly)
		return
	}
	id := r.PathValue("id")
	t, err := h.decodeTenant(w, r, id)
	if err != nil {
		writeError(w, err)
		return
	}
	// Blocks are changed by their own routes: a PUT keeps them.
	read := t.Version
	old, t, err := h.tenants.Update(r.Context(), id, func(old sluice.Tenant) (sluice.Tenant, error) {
		if old.File {
			return t, errFileTenant(id)
		}
		if read != 0 && read != old.Version {
			return t, sluice.ErrTenantChanged // the writer's own precondition: not tried again
		}
		t.CreatedAt, t.UpdatedAt, t.Blocks, t.Version = old.CreatedAt, h.opts.Now().UTC(), old.Blocks, old.Version
		return t, nil
	})
	if _, inFile := h.opts.Config().Tenants[id]; inFile && sluice.KindOf(err) == sluice.KindNotFound {
		err = errFileTenant(id)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	h.audit(r, who, "tenant.update", id, tenantOut(old), tenantOut(t))
	writeJSON(w, http.StatusOK, tenantOut(t))
}

func (h *Handler) deleteTenant(w http.ResponseWriter, r *http.Request, who principal) {
	if !who.admin {
		writeError(w, errAdminOnly)
		return
	}
	old, err := h.opts.Tenants.GetTenant(r.Context(), r.PathValue("id"))
	if err == nil {
		err = h.opts.Tenants.DeleteTenant(r.Context(), r.PathValue("id"))
	}
	if err != nil {
		writeError(w, err)
		return
	}
	h.audit(r, who, "tenant.delete", old.ID, tenantOut(old), nil)
	if h.opts.OnTenantDeleted != nil {
		h.opts.OnTenantDeleted(r.PathValue("id"))
	}
	writeJSON(w, http.StatusOK, map[string]string{"deleted": r.PathValue("id")})
}

// keyRequest is the body of POST /v1/tenants/{id}/keys.
type keyRequest struct {
	Name string `json:"name"`
}

type keyJSON struct {
	ID        string    `json:"id"`
	Tenant    string    `json:"tenant"`
	Name      string    `json:"name,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
	// Token is the secret, shown once, at creation.
	Token string `json:"token,omitempty"`
}

func (h *Handler) createKey(w http.ResponseWriter, r *http.Request, who principal) {
	if !who.admin {
		writeError(w, errAdminOnly)
		return
	}
	tenant := r.PathValue("id")
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
	if len(in.Name) > 128 {
		writeError(w, sluice.Invalid("name", "is longer than 128 bytes"))
		return
	}
	// A tenant of the file holds its keys in a record of its own.
	if err := h.tenants.Adopt(r.Context(), tenant); err != nil {
		writeError(w, err)
		return
	}
	id, token, hash := newToken(tenant)
	k := sluice.APIKey{ID: id, Tenant: tenant, Name: in.Name, Hash: hash, CreatedAt: h.opts.Now().UTC()}
	if err := h.opts.Tenants.PutAPIKey(r.Context(), k); err != nil {
		writeError(w, err)
		return
	}
	h.audit(r, who, "key.create", tenant, nil, keyJSON{ID: id, Tenant: tenant, Name: k.Name, CreatedAt: k.CreatedAt})
	writeJSON(w, http.StatusCreated, keyJSON{ID: id, Tenant: tenant, Name: k.Name, CreatedAt: k.CreatedAt, Token: token})
}

func (h *Handler) listKeys(w http.ResponseWriter, r *http.Request, tenant string) {
	if _, err := h.tenants.Lookup(r.Context(), tenant); err != nil {
		writeError(w, err)
		return
	}
	keys, err := h.opts.Tenants.ListAPIKeys(r.Context(), tenant)
	if err != nil {
		writeError(w, err)
		return
	}
	out := []keyJSON{}
	for _, k := range keys {
		out = append(out, keyJSON{ID: k.ID, Tenant: k.Tenant, Name: k.Name, CreatedAt: k.CreatedAt})
	}
	writeJSON(w, http.StatusOK, map[string]any{"keys": out})
}

func (h *Handler) deleteKey(w http.ResponseWriter, r *http.Request, who principal) {
	tenant := r.PathValue("id")
	if !who.can(tenant) {
		writeError(w, errForbidden)
		return
	}
	if err := h.opts.Tenants.DeleteAPIKey(r.Context(), tenant, r.PathValue("key")); err != nil {
		writeError(w, err)
		return
	}
	h.audit(r, who, "key.delete", tenant, map[string]string{"id": r.PathValue("key")}, nil)
	h.keys.Delete(tenant + "\x00" + r.PathValue("key"))
	writeJSON(w, http.StatusOK, map[string]string{"deleted": r.PathValue("key")})
}

// policies: GET /v1/policies, the configured policies and endpoints.
func (h *Handler) policies(w http.ResponseWriter, r *http.Request, who principal) {
	cfg := h.opts.Config()
	type policyOut struct {
		Name      string   `json:"name"`
		Algorithm string   `json:"algorithm"`
		Limit     int64    `json:"limit"`
		Window    string   `json:"window,omitempty"`
		Key       []string `json:"key"`
		Shadow    bool     `json:"shadow,omitempty"`
		FailMode  string   `json:"failMode"`
	}
	out := []policyOut{}
	for _, name := range cfg.PolicyNames() {
		p := cfg.Policies[name]
		fm := cfg.Defaults.FailMode
		if p.FailModeSet {
			fm = p.FailMode
		}
		po := policyOut{Name: name, Algorithm: p.Algorithm.String(), Limit: p.Limit, Key: append([]string{}, p.Key...), Shadow: p.Shadow, FailMode: fm.String()}
		if p.Window > 0 {
			po.Window = p.Window.String()
		}
		out = append(out, po)
	}
	eps := map[string][]string{}
	for name, ps := range cfg.Endpoints {
		eps[name] = ps
	}
	tiers := []string{}
	for t := range cfg.Tiers {
		tiers = append(tiers, t)
	}
	sort.Strings(tiers)
	writeJSON(w, http.StatusOK, map[string]any{"policies": out, "endpoints": eps, "tiers": tiers})
}
