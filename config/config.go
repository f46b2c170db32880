// Package config loads Sluice's YAML configuration: named policies, the
// endpoints that use them, tiers, per-tenant overrides and defaults, and
// resolves them for a request. Errors name the file, the line and the field.
//
// A Config is immutable once loaded; a reload builds a new one (see Watcher),
// so counters, which are keyed by tenant, policy name and key, carry over.
package config

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fairshare"
	"github.com/sluicehq/sluice/forward"
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
	// Upstreams are the shared upstream quotas, by name, shared fairly
	// among the customers that acquire them (package fairshare). A server
	// reads them at start only: a reload that changes them is logged and
	// waits for a restart.
	Upstreams map[string]Upstream
	// Regions puts a node on a DynamoDB global table in multi-region mode
	// (the flags --region-id and --regions win over it). Read at start.
	Regions Regions
}

// Regions are the regions of a global table: ID is this node's, All every
// one, the same list on every node.
type Regions struct {
	ID  string
	All []string
}

// Upstream is a named upstream quota: at most Rate cost units per Window,
// shared by weighted max-min fairness among customers (a tenant and a key).
type Upstream struct {
	Name string
	// Rate units per Window, Burst at once after a quiet spell (0: the
	// scheduler's default, Rate/10), MaxQueue waiting requests per customer
	// (0: the scheduler's default, 1000), and Cap the most units one
	// customer may have per Window (0: none).
	Rate     int64
	Window   time.Duration
	Burst    int64
	MaxQueue int
	Cap      int64
	// MaxWait is a request's maximum wait when it names none, and the most
	// it may name.
	MaxWait time.Duration
	// TierWeights and TenantWeights are the customers' weights: a tenant's
	// own, else its tier's, else 1.
	TierWeights   map[string]int64
	TenantWeights map[string]int64
	// Margin is headroom for the time between a grant and its call's
	// arrival at the upstream: the scheduler grants at most Rate units in
	// any interval of Window plus Margin, so that the upstream sees at
	// most Rate in any Window while that time varies by at most Margin
	// from one call to the next (docs/fairshare.md). 0: none, unless the
	// upstream has a proxy (DefaultProxyMargin).
	Margin time.Duration
	// Proxy, if not nil, is where Sluice sends its customers' calls
	// itself (ANY /v1/upstreams/{name}/proxy/{path...}).
	Proxy *Proxy
}

// Proxy is an upstream's address, and what may pass to it; zero fields
// take package forward's defaults.
type Proxy struct {
	// URL is the base of every call: http or https, a host and a path.
	URL *url.URL
	// Timeout bounds a call from its send to its answer's end.
	Timeout time.Duration
	// MaxBody and MaxResponse bound a call's request and response bodies,
	// in bytes.
	MaxBody, MaxResponse int64
	// Headers are set on every call (the third party's credentials): a
	// value "${NAME}" is read from the environment variable NAME at load.
	Headers map[string]string
	// ForwardHeaders are the caller's headers passed on beside
	// forward.DefaultForward.
	ForwardHeaders []string
	// MaxConcurrent bounds the calls in flight to the upstream on a node,
	// MaxPerTenant one tenant's.
	MaxConcurrent, MaxPerTenant int
}

// Upstream defaults and bounds.
const (
	DefaultUpstreamWindow  = time.Second
	DefaultUpstreamMaxWait = 2 * time.Second
	MaxUpstreamWait        = time.Minute
	// DefaultProxyMargin is the margin of an upstream with a proxy that
	// names none: the proxy starts each send within half of it of its
	// grant, and leaves the other half to the network's jitter.
	DefaultProxyMargin = 20 * time.Millisecond
)

// Scheduler returns the fair-share configuration of u: its window
// lengthened by its margin.
func (u Upstream) Scheduler() fairshare.Config {
	return fairshare.Config{Rate: u.Rate, Window: u.Window + u.Margin, Burst: u.Burst, MaxQueue: u.MaxQueue, Cap: u.Cap}
}

// Target returns the proxy's target of u, and whether u has a proxy.
func (u Upstream) Target() (forward.Target, bool) {
	p := u.Proxy
	if p == nil {
		return forward.Target{}, false
	}
	h := http.Header{}
	for k, v := range p.Headers {
		h.Set(k, v)
	}
	return forward.Target{
		Name: u.Name, URL: p.URL, Margin: u.Margin, Timeout: p.Timeout, MaxBody: p.MaxBody, MaxResponse: p.MaxResponse,
		Headers: h, Forward: p.ForwardHeaders, MaxConcurrent: p.MaxConcurrent, MaxPerTenant: p.MaxPerTenant,
	}, true
}

// Tier returns the tier of tenant t (as the tenant store holds it; nil if
// unknown): the store's, else the file's, else the default.
func (c *Config) Tier(t *sluice.Tenant, tenantID string) string {
	if t != nil && t.Tier != "" {
		return t.Tier
	}
	if ft := c.Tenants[tenantID]; ft.Tier != "" {
		return ft.Tier
	}
	return c.Defaults.Tier
}

// UpstreamNames returns the names of the configured upstreams, sorted.
func (c *Config) UpstreamNames() []string {
	names := make([]string, 0, len(c.Upstreams))
	for n := range c.Upstreams {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
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
		Upstreams:      map[string]Upstream{},
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
	tier := c.Tier(t, tenantID)
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
