// Package config loads Sluice's YAML configuration: named policies, the
// endpoints that use them, tiers, per-tenant overrides and defaults, and
// resolves them for a request. Errors name the file, the line and the field.
//
// A Config is immutable once loaded; a reload builds a new one (see Watcher),
// so counters, which are keyed by tenant, policy name and key, carry over.
package config

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/sluicehq/sluice"
)

// Config is a loaded configuration.
type Config struct {
	// File is where it was loaded from.
	File string
	// Defaults apply to every policy that does not say otherwise.
	Defaults Defaults
	// TenantDefaults are the gateway settings of a tenant that sets none.
	TenantDefaults sluice.TenantSettings
	// Policies by name.
	Policies map[string]Policy
	// Endpoints map an endpoint to the names of its policies, in order.
	Endpoints map[string][]string
	// Tiers map a tier to its overrides, by policy name.
	Tiers map[string]map[string]sluice.PolicyOverride
	// Tenants holds per-tenant configuration, by tenant id.
	Tenants map[string]Tenant
}

// Defaults are the configuration-wide defaults.
type Defaults struct {
	// FailMode of policies that set none.
	FailMode sluice.FailMode
	// Timeout is the deadline of one decision's store operation.
	Timeout time.Duration
	// Tier of tenants that have none.
	Tier string
}

// Policy is a named policy and how its counters are keyed.
type Policy struct {
	sluice.Policy
	// Key lists the request's key parts that make up the counter's key,
	// in order: "user", "ip", or any descriptor name. Empty: one counter
	// per tenant.
	Key []string
	// FailModeSet records whether the file set the fail mode, so that the
	// default applies otherwise.
	FailModeSet bool
}

// Tenant is a tenant's configuration in the file.
type Tenant struct {
	Tier      string
	Settings  sluice.TenantSettings
	Overrides map[string]sluice.PolicyOverride
}

// Default values.
const (
	DefaultTimeout = 50 * time.Millisecond
	DefaultTier    = "free"
)

// Default returns the configuration used without a file: no named
// policies, the default timeout and fail-open, and the AWS sample's tenant
// settings.
func Default() *Config {
	return &Config{
		Defaults:       Defaults{FailMode: sluice.FailOpen, Timeout: DefaultTimeout, Tier: DefaultTier},
		TenantDefaults: DefaultTenantSettings,
		Policies:       map[string]Policy{},
		Endpoints:      map[string][]string{},
		Tiers:          map[string]map[string]sluice.PolicyOverride{},
		Tenants:        map[string]Tenant{},
	}
}

// DefaultTenantSettings are the settings of a tenant that sets none.
var DefaultTenantSettings = sluice.TenantSettings{
	ConnectionsPerSession: 3,
	TenantConnections:     100,
	SessionPerMinute:      10,
	TenantPerMinute:       100,
	SessionTTL:            300,
	MessagesPerMinute:     120,
}

// Resolved is a policy as it applies to one tenant, and the key parts of
// its counter.
type Resolved struct {
	Policy sluice.Policy
	Key    []string
}

// Resolve returns the policies that apply to a request of tenant t (as the
// tenant store holds it; nil if unknown) to an endpoint, or to the named
// policies if endpoint is empty. Overrides apply in order: the tenant's
// tier, the file's entry for the tenant, the tenant store's overrides.
func (c *Config) Resolve(t *sluice.Tenant, tenantID, endpoint string, names []string) ([]Resolved, error) {
	if endpoint != "" {
		var ok bool
		if names, ok = c.Endpoints[endpoint]; !ok {
			return nil, sluice.Invalid("endpoint", "%q is not configured (known: %v)", endpoint, c.endpointNames())
		}
	}
	if len(names) == 0 {
		return nil, sluice.Invalid("policies", "name an endpoint or at least one policy")
	}
	ft := c.Tenants[tenantID]
	tier := c.Defaults.Tier
	if ft.Tier != "" {
		tier = ft.Tier
	}
	if t != nil && t.Tier != "" {
		tier = t.Tier
	}
	out := make([]Resolved, 0, len(names))
	for i, name := range names {
		np, ok := c.Policies[name]
		if !ok {
			field := fmt.Sprintf("policies[%d]", i)
			if endpoint != "" {
				field = "endpoint"
			}
			return nil, sluice.Invalid(field, "%q is not a configured policy", name)
		}
		p := np.Policy
		if !np.FailModeSet {
			p.FailMode = c.Defaults.FailMode
		}
		if o, ok := c.Tiers[tier][name]; ok {
			p = o.Apply(p)
		}
		if o, ok := ft.Overrides[name]; ok {
			p = o.Apply(p)
		}
		if t != nil {
			if o, ok := t.Overrides[name]; ok {
				p = o.Apply(p)
			}
		}
		if err := p.Validate(); err != nil {
			// An override made it invalid: say whose.
			return nil, &sluice.Error{Kind: sluice.KindInvalid, Field: "tenant", Message: fmt.Sprintf("overrides make policy %q invalid: %v", name, err)}
		}
		out = append(out, Resolved{Policy: p, Key: np.Key})
	}
	return out, nil
}

// Settings returns tenant t's gateway settings: the tenant store's, then
// the file's, then the defaults, field by field.
func (c *Config) Settings(t *sluice.Tenant, tenantID string) sluice.TenantSettings {
	s := c.TenantDefaults
	merge := func(o sluice.TenantSettings) {
		for _, f := range []struct{ dst, src *int64 }{
			{&s.ConnectionsPerSession, &o.ConnectionsPerSession},
			{&s.TenantConnections, &o.TenantConnections},
			{&s.SessionPerMinute, &o.SessionPerMinute},
			{&s.TenantPerMinute, &o.TenantPerMinute},
			{&s.SessionTTL, &o.SessionTTL},
			{&s.MessagesPerMinute, &o.MessagesPerMinute},
		} {
			if *f.src != 0 {
				*f.dst = *f.src
			}
		}
	}
	merge(c.Tenants[tenantID].Settings)
	if t != nil {
		merge(t.Settings)
	}
	return s
}

func (c *Config) endpointNames() []string {
	names := make([]string, 0, len(c.Endpoints))
	for n := range c.Endpoints {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// PolicyNames returns the names of the configured policies, sorted.
func (c *Config) PolicyNames() []string {
	names := make([]string, 0, len(c.Policies))
	for n := range c.Policies {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
