package tenancy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/wire"
)

// TenantDoc is a tenant as the API takes and shows it, and as the audit
// trail records it: durations in overrides are strings ("60s") or
// seconds, as in policies.
type TenantDoc struct {
	ID        string                 `json:"id"`
	Tier      string                 `json:"tier,omitempty"`
	Settings  sluice.TenantSettings  `json:"settings"`
	Overrides map[string]OverrideDoc `json:"overrides,omitempty"`
	CreatedAt *time.Time             `json:"createdAt,omitempty"`
	UpdatedAt *time.Time             `json:"updatedAt,omitempty"`
	// Version is the record's (sluice.Tenant.Version). In a replacement,
	// the version the writer read: ReplaceTenant refuses it if the tenant
	// has changed since. Zero: it replaces whatever is there.
	Version int64 `json:"version,omitempty"`
	// Source says where a tenant read comes from: "file" for a tenant of
	// the configuration file that the store does not hold (its limits
	// are changed in the file). The server's to say: refused in a write.
	Source string `json:"source,omitempty"`
}

// OverrideDoc is a policy override in a TenantDoc.
type OverrideDoc struct {
	Limit    *int64          `json:"limit,omitempty"`
	Window   json.RawMessage `json:"window,omitempty"`
	Burst    *int64          `json:"burst,omitempty"`
	LeaseTTL json.RawMessage `json:"leaseTTL,omitempty"`
	Shadow   *bool           `json:"shadow,omitempty"`
}

// docOf returns the document of stored tenant t.
func docOf(t sluice.Tenant) TenantDoc {
	out := TenantDoc{ID: t.ID, Tier: t.Tier, Settings: t.Settings, CreatedAt: &t.CreatedAt, UpdatedAt: &t.UpdatedAt, Version: t.Version}
	if len(t.Overrides) > 0 {
		out.Overrides = map[string]OverrideDoc{}
		for name, o := range t.Overrides {
			j := OverrideDoc{Limit: o.Limit, Burst: o.Burst, Shadow: o.Shadow}
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

// fileDoc is a tenant of the configuration file as the file gives it,
// with the version of the record that holds its blocks and keys, if it
// has one (rec).
func fileDoc(id string, ft config.Tenant, rec *sluice.Tenant) TenantDoc {
	out := docOf(sluice.Tenant{ID: id, Tier: ft.Tier, Settings: ft.Settings, Overrides: ft.Overrides})
	out.CreatedAt, out.UpdatedAt, out.Source = nil, nil, "file"
	if rec != nil {
		out.Version = rec.Version
	}
	return out
}

// tenantOf returns the tenant d describes, checked against the
// configuration: a configured tier, overrides of configured policies that
// leave them valid. id, if given (the tenant written), must be d's, or d
// names none.
func (s *Service) tenantOf(d TenantDoc, id string) (sluice.Tenant, error) {
	if id != "" {
		if d.ID == "" {
			d.ID = id
		} else if d.ID != id {
			return sluice.Tenant{}, sluice.Invalid("id", "is %q but the path names %q", d.ID, id)
		}
	}
	t := sluice.Tenant{ID: d.ID, Tier: d.Tier, Settings: d.Settings, Version: d.Version}
	if d.Source != "" {
		return t, sluice.Invalid("source", "is the server's to say, not a field to set")
	}
	if d.Version < 0 {
		return t, sluice.Invalid("version", "must be a version the tenant was read at, got %d", d.Version)
	}
	cfg := s.opts.Config()
	if d.Tier != "" {
		if _, ok := cfg.Tiers[d.Tier]; !ok {
			return t, sluice.Invalid("tier", "%q is not a configured tier", d.Tier)
		}
	}
	if len(d.Overrides) > 0 {
		t.Overrides = map[string]sluice.PolicyOverride{}
		for name, o := range d.Overrides {
			field := "overrides." + name
			np, ok := cfg.Policies[name]
			if !ok {
				return t, sluice.Invalid(field, "%q is not a configured policy", name)
			}
			po := sluice.PolicyOverride{Limit: o.Limit, Burst: o.Burst, Shadow: o.Shadow}
			for _, dur := range []struct {
				raw   json.RawMessage
				dst   **time.Duration
				field string
			}{{o.Window, &po.Window, field + ".window"}, {o.LeaseTTL, &po.LeaseTTL, field + ".leaseTTL"}} {
				if len(dur.raw) == 0 {
					continue
				}
				v, err := wire.ParseDuration(dur.raw)
				if err != nil {
					return t, sluice.Invalid(dur.field, "%v", err)
				}
				*dur.dst = &v
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

// Tenants returns the tenants who reaches, by id: the store's and the
// configuration file's, a tenant of both as the file gives it.
func (s *Service) Tenants(ctx context.Context, who Principal) ([]TenantDoc, error) {
	ts, err := s.opts.Store.ListTenants(ctx)
	if err != nil {
		return nil, err
	}
	out := []TenantDoc{}
	seen := map[string]bool{}
	cfg := s.opts.Config()
	for _, t := range ts {
		seen[t.ID] = true
		ft, inFile := cfg.Tenants[t.ID]
		switch {
		case !who.Can(t.ID):
		case t.File && inFile:
			out = append(out, fileDoc(t.ID, ft, &t))
		default:
			out = append(out, docOf(t))
		}
	}
	// The configuration file's tenants exist too.
	for id, ft := range cfg.Tenants {
		if !seen[id] && who.Can(id) {
			out = append(out, fileDoc(id, ft, nil))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// ShowTenant returns tenant id for who: the stored tenant, or, for a
// tenant of the configuration file the store does not hold (or holds only
// its blocks and keys for), the file's entry, its Source "file".
func (s *Service) ShowTenant(ctx context.Context, who Principal, id string) (TenantDoc, error) {
	if !who.Can(id) {
		return TenantDoc{}, ErrForbidden
	}
	t, err := s.Lookup(ctx, id)
	switch {
	case err != nil:
		return TenantDoc{}, err
	case t.FileOnly():
		return fileDoc(id, t.cfg.Tenants[id], t.Record), nil
	}
	return docOf(*t.Record), nil
}

// CreateTenant creates the tenant d describes, for the admin, and records
// it in the audit trail.
func (s *Service) CreateTenant(ctx context.Context, a Actor, d TenantDoc) (TenantDoc, error) {
	if err := a.AdminOnly(); err != nil {
		return TenantDoc{}, err
	}
	t, err := s.tenantOf(d, "")
	if err != nil {
		return TenantDoc{}, err
	}
	t.CreatedAt = s.opts.Now().UTC()
	t.UpdatedAt = t.CreatedAt
	// Counters of its own, none of an earlier tenant of the id's: at
	// random, not of the clock, which two nodes may not agree on.
	t.Epoch = rand.Int64N(math.MaxInt64) + 1
	if err := s.opts.Store.CreateTenant(ctx, t); err != nil {
		return TenantDoc{}, err
	}
	s.audit(ctx, a, "tenant.create", t.ID, nil, docOf(t))
	if err := s.dropLeftKeys(ctx, t.ID, t.CreatedAt); err != nil {
		return TenantDoc{}, err
	}
	return docOf(t), nil
}

// dropLeftKeys deletes the API keys of tenant id, just created at
// created, that a deletion of an earlier tenant of the id left behind (a
// store that deletes a tenant's keys after the tenant, and failed
// between), so that none of them authenticates as the new tenant. A key is
// made only for a tenant that exists, so every key made before the tenant
// was created is left behind; a second's grace keeps the keys other nodes,
// whose clocks may be behind, make at once.
func (s *Service) dropLeftKeys(ctx context.Context, id string, created time.Time) error {
	keys, err := s.opts.Store.ListAPIKeys(ctx, id)
	if err != nil {
		return fmt.Errorf("tenant %q created, but the keys an earlier tenant of the id left could not be listed (delete the tenant and create it again): %w", id, err)
	}
	for _, k := range keys {
		if !k.CreatedAt.Before(created.Add(-time.Second)) {
			continue
		}
		if err := s.opts.Store.DeleteAPIKey(ctx, id, k.ID); err != nil && !errors.Is(err, sluice.ErrKeyNotFound) {
			return fmt.Errorf("tenant %q created, but a key an earlier tenant of the id left could not be deleted (delete the tenant and create it again): %w", id, err)
		}
		s.keys.forget(id, k.ID)
	}
	return nil
}

// errFileTenant answers a change of a tenant of the configuration file's
// limits.
func errFileTenant(id string) error {
	return &sluice.Error{Kind: sluice.KindConflict, Field: "id", Message: fmt.Sprintf("tenant %q is the configuration file's: change its limits in that file", id)}
}

// ReplaceTenant replaces stored tenant id by the one d describes, for the
// admin, keeping its blocks (changed by their own calls) and its creation;
// with d.Version set, only if the tenant is still at that version
// (sluice.ErrTenantChanged otherwise). A tenant of the configuration file
// is changed in the file: a conflict naming it. The change is recorded in
// the audit trail.
func (s *Service) ReplaceTenant(ctx context.Context, a Actor, id string, d TenantDoc) (TenantDoc, error) {
	if err := a.AdminOnly(); err != nil {
		return TenantDoc{}, err
	}
	t, err := s.tenantOf(d, id)
	if err != nil {
		return TenantDoc{}, err
	}
	read := t.Version
	old, t, err := s.Update(ctx, id, func(old sluice.Tenant) (sluice.Tenant, error) {
		if old.File {
			return t, errFileTenant(id)
		}
		if read != 0 && read != old.Version {
			return t, sluice.ErrTenantChanged // the writer's own precondition: not tried again
		}
		t.CreatedAt, t.UpdatedAt, t.Blocks, t.Version, t.Epoch = old.CreatedAt, s.opts.Now().UTC(), old.Blocks, old.Version, old.Epoch
		return t, nil
	})
	if _, inFile := s.opts.Config().Tenants[id]; inFile && sluice.KindOf(err) == sluice.KindNotFound {
		err = errFileTenant(id)
	}
	if err != nil {
		return TenantDoc{}, err
	}
	s.audit(ctx, a, "tenant.update", id, docOf(old), docOf(t))
	return docOf(t), nil
}

// DeleteTenant deletes stored tenant id and its API keys, for the admin:
// it records the deletion in the audit trail, forgets what it holds of the
// tenant, and tells the subscribers (OnTenantDeleted).
func (s *Service) DeleteTenant(ctx context.Context, a Actor, id string) error {
	if err := a.AdminOnly(); err != nil {
		return err
	}
	old, err := s.opts.Store.GetTenant(ctx, id)
	if err == nil {
		err = s.opts.Store.DeleteTenant(ctx, id)
	}
	if err != nil {
		return err
	}
	s.audit(ctx, a, "tenant.delete", old.ID, docOf(old), nil)
	s.tenantDeleted(id)
	return nil
}

// APIKey is a tenant's API key as the API shows it and the audit trail
// records it: never its hash, and its token (its secret) once, at its
// creation.
type APIKey struct {
	ID        string    `json:"id"`
	Tenant    string    `json:"tenant"`
	Name      string    `json:"name,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
	Token     string    `json:"token,omitempty"`
}

// CreateKey creates an API key of tenant named name (at most 128 bytes),
// for the admin, and records it in the audit trail. The key returned
// holds its token, which nothing shows again.
func (s *Service) CreateKey(ctx context.Context, a Actor, tenant, name string) (APIKey, error) {
	if err := a.AdminOnly(); err != nil {
		return APIKey{}, err
	}
	if len(name) > 128 {
		return APIKey{}, sluice.Invalid("name", "is longer than 128 bytes")
	}
	// A tenant of the file holds its keys in a record of its own.
	if err := s.Adopt(ctx, tenant); err != nil {
		return APIKey{}, err
	}
	id, token, hash := newToken(tenant)
	k := sluice.APIKey{ID: id, Tenant: tenant, Name: name, Hash: hash, CreatedAt: s.opts.Now().UTC()}
	if err := s.opts.Store.PutAPIKey(ctx, k); err != nil {
		return APIKey{}, err
	}
	out := APIKey{ID: id, Tenant: tenant, Name: k.Name, CreatedAt: k.CreatedAt}
	s.audit(ctx, a, "key.create", tenant, nil, out)
	out.Token = token
	return out, nil
}

// Keys returns tenant's API keys, for who.
func (s *Service) Keys(ctx context.Context, who Principal, tenant string) ([]APIKey, error) {
	if !who.Can(tenant) {
		return nil, ErrForbidden
	}
	if _, err := s.Lookup(ctx, tenant); err != nil {
		return nil, err
	}
	keys, err := s.opts.Store.ListAPIKeys(ctx, tenant)
	if err != nil {
		return nil, err
	}
	out := make([]APIKey, 0, len(keys))
	for _, k := range keys {
		out = append(out, APIKey{ID: k.ID, Tenant: k.Tenant, Name: k.Name, CreatedAt: k.CreatedAt})
	}
	return out, nil
}

// DeleteKey deletes tenant's API key id, for the admin or a key of the
// tenant, and records it in the audit trail: the key stops working at
// once.
func (s *Service) DeleteKey(ctx context.Context, a Actor, tenant, id string) error {
	if !a.Can(tenant) {
		return ErrForbidden
	}
	if err := s.opts.Store.DeleteAPIKey(ctx, tenant, id); err != nil {
		return err
	}
	s.audit(ctx, a, "key.delete", tenant, map[string]string{"id": id}, nil)
	s.keys.forget(tenant, id)
	return nil
}

// Catalog is what the configuration offers every tenant: its policies by
// name (From "policy", each with the fail mode it is decided by, the
// default's if it sets none), its endpoints and its tiers, sorted.
type Catalog struct {
	Policies  []Limit
	Endpoints map[string][]string
	Tiers     []string
}

// Catalog returns what the configuration offers now.
func (s *Service) Catalog() Catalog {
	cfg := s.opts.Config()
	out := Catalog{Policies: []Limit{}, Endpoints: map[string][]string{}, Tiers: []string{}}
	for _, name := range cfg.PolicyNames() {
		p := cfg.Policies[name]
		l := Limit{Policy: p.Policy, Key: append([]string{}, p.Key...), From: "policy"}
		l.Policy.Name = name
		if !p.FailModeSet {
			l.Policy.FailMode = cfg.Defaults.FailMode
		}
		out.Policies = append(out.Policies, l)
	}
	for name, ps := range cfg.Endpoints {
		out.Endpoints[name] = ps
	}
	for t := range cfg.Tiers {
		out.Tiers = append(out.Tiers, t)
	}
	sort.Strings(out.Tiers)
	return out
}

// Configured reports whether policy names a configured policy.
func (s *Service) Configured(policy string) bool {
	_, ok := s.opts.Config().Policies[policy]
	return ok
}

// KeyLabel is a configured policy's counter key as people read it and
// the API shows it ("user=bot-7", ReadableKey); any other key as it is.
func (s *Service) KeyLabel(policy, key string) string {
	if p, ok := s.opts.Config().Policies[policy]; ok {
		if r, ok := ReadableKey(p.Key, key); ok {
			return r
		}
	}
	return key
}
