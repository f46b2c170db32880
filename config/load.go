package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fairshare"
)

// Error is a configuration error: the file, the line and the field.
type Error struct {
	File  string
	Line  int
	Field string
	Msg   string
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s:%d: %s: %s", e.File, e.Line, e.Field, e.Msg)
}

// MaxFileBytes caps a configuration file.
const MaxFileBytes = 1 << 20

// Load reads and validates the configuration in file.
func Load(file string) (*Config, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return Parse(file, b)
}

// Parse validates the configuration in b, read from file. Every error names
// the file, the line and the field; unknown fields are errors.
func Parse(file string, b []byte) (*Config, error) {
	if len(b) > MaxFileBytes {
		return nil, &Error{File: file, Line: 1, Field: "file", Msg: fmt.Sprintf("is %d bytes, at most %d", len(b), MaxFileBytes)}
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) { // an empty file
			c := Default()
			c.File = file
			return c, nil
		}
		return nil, &Error{File: file, Line: yamlLine(err), Field: "file", Msg: err.Error()}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, &Error{File: file, Line: extra.Line, Field: "file", Msg: "holds more than one YAML document"}
	}
	p := &parser{file: file, c: Default()}
	p.c.File = file
	if len(doc.Content) == 0 {
		return p.c, nil
	}
	if err := p.root(doc.Content[0]); err != nil {
		return nil, err
	}
	return p.c, nil
}

// yamlLine digs the line out of a yaml syntax error ("yaml: line 3: ...").
func yamlLine(err error) int {
	var n int
	if _, e := fmt.Sscanf(err.Error(), "yaml: line %d:", &n); e == nil {
		return n
	}
	return 1
}

type parser struct {
	file string
	c    *Config
	tier *yaml.Node // defaults.tier, for its line
}

func (p *parser) errf(n *yaml.Node, field, format string, args ...any) error {
	return &Error{File: p.file, Line: n.Line, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// fields walks a mapping node, calling fn for each key with its value, and
// refuses unknown and repeated keys.
func (p *parser) fields(n *yaml.Node, path string, known []string, fn func(key string, v *yaml.Node) error) error {
	if n.Kind != yaml.MappingNode {
		return p.errf(n, path, "must be a mapping")
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		field := join(path, k.Value)
		if known != nil && !contains(known, k.Value) {
			return p.errf(k, field, "is not a known field (known: %v)", known)
		}
		if seen[k.Value] {
			return p.errf(k, field, "is repeated")
		}
		seen[k.Value] = true
		if err := fn(k.Value, v); err != nil {
			return err
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

func (p *parser) root(n *yaml.Node) error {
	var policies, endpoints, tiers, tenants, upstreams *yaml.Node
	err := p.fields(n, "", []string{"version", "defaults", "tenantDefaults", "policies", "endpoints", "tiers", "tenants", "upstreams", "regions"}, func(k string, v *yaml.Node) error {
		switch k {
		case "version":
			if v.Value != "1" {
				return p.errf(v, "version", "must be 1, got %q", v.Value)
			}
		case "defaults":
			return p.defaults(v)
		case "tenantDefaults":
			return p.settings(v, "tenantDefaults", &p.c.TenantDefaults)
		case "policies":
			policies = v
		case "endpoints":
			endpoints = v
		case "tiers":
			tiers = v
		case "tenants":
			tenants = v
		case "upstreams":
			upstreams = v
		case "regions":
			return p.regions(v)
		}
		return nil
	})
	if err != nil {
		return err
	}
	// Policies first: the other sections refer to them.
	for _, s := range []struct {
		n  *yaml.Node
		fn func(*yaml.Node) error
	}{{policies, p.policies}, {endpoints, p.endpoints}, {tiers, p.tiers}, {tenants, p.tenants}, {upstreams, p.upstreams}} {
		if s.n != nil {
			if err := s.fn(s.n); err != nil {
				return err
			}
		}
	}
	if _, ok := p.c.Tiers[p.c.Defaults.Tier]; !ok && len(p.c.Tiers) > 0 {
		at := n
		if p.tier != nil {
			at = p.tier
		}
		return p.errf(at, "defaults.tier", "%q is not a configured tier", p.c.Defaults.Tier)
	}
	return nil
}

func (p *parser) defaults(n *yaml.Node) error {
	return p.fields(n, "defaults", []string{"failMode", "timeout", "tier"}, func(k string, v *yaml.Node) error {
		field := "defaults." + k
		switch k {
		case "failMode":
			if err := p.c.Defaults.FailMode.UnmarshalText([]byte(v.Value)); err != nil {
				return p.errf(v, field, "%v", err)
			}
		case "timeout":
			d, err := p.duration(v, field)
			if err != nil {
				return err
			}
			if d < time.Millisecond || d > time.Minute {
				return p.errf(v, field, "must be between 1ms and 1m, got %v", d)
			}
			p.c.Defaults.Timeout = d
		case "tier":
			p.c.Defaults.Tier, p.tier = v.Value, v
		}
		return nil
	})
}

func (p *parser) settings(n *yaml.Node, path string, s *sluice.TenantSettings) error {
	return p.fields(n, path, []string{"connectionsPerSession", "tenantConnections", "sessionPerMinute", "tenantPerMinute", "sessionTTL", "messagesPerMinute"}, func(k string, v *yaml.Node) error {
		x, err := p.int(v, join(path, k), 1, sluice.MaxLimit)
		if err != nil {
			return err
		}
		switch k {
		case "connectionsPerSession":
			s.ConnectionsPerSession = x
		case "tenantConnections":
			s.TenantConnections = x
		case "sessionPerMinute":
			s.SessionPerMinute = x
		case "tenantPerMinute":
			s.TenantPerMinute = x
		case "sessionTTL":
			s.SessionTTL = x
		case "messagesPerMinute":
			s.MessagesPerMinute = x
		}
		return nil
	})
}

var policyFields = []string{"algorithm", "limit", "window", "burst", "leaseTTL", "buckets", "calendar", "key", "shadow", "failMode", "penalty", "leased", "scope"}

func (p *parser) policies(n *yaml.Node) error {
	return p.fields(n, "policies", nil, func(name string, v *yaml.Node) error {
		path := "policies." + name
		if !sluice.ValidPolicyName(name) {
			return p.errf(n, path, "is not a valid policy name: 1 to 128 letters, digits, '.', '_', ':', '/' or '-'")
		}
		np := Policy{Policy: sluice.Policy{Name: name}}
		lines := map[string]*yaml.Node{}
		err := p.fields(v, path, policyFields, func(k string, v *yaml.Node) error {
			lines[k] = v
			field := join(path, k)
			var err error
			switch k {
			case "algorithm":
				if np.Algorithm, err = sluice.ParseAlgorithm(v.Value); err != nil {
					return p.errf(v, field, "%v", err)
				}
			case "limit":
				np.Limit, err = p.int(v, field, 1, sluice.MaxLimit)
			case "window":
				np.Window, err = p.duration(v, field)
			case "burst":
				np.Burst, err = p.int(v, field, 1, sluice.MaxLimit) // 0 would silently mean the limit: omit it
			case "leaseTTL":
				np.LeaseTTL, err = p.duration(v, field)
			case "buckets":
				var b int64
				b, err = p.int(v, field, 1, sluice.MaxBuckets)
				np.Buckets = int(b)
			case "calendar":
				if err := np.Calendar.UnmarshalText([]byte(v.Value)); err != nil {
					return p.errf(v, field, "%v", err)
				}
			case "key":
				np.Key, err = p.strings(v, field)
			case "shadow":
				np.Shadow, err = p.bool(v, field)
			case "leased":
				np.Leased, err = p.bool(v, field)
			case "scope":
				if err := np.Scope.UnmarshalText([]byte(v.Value)); err != nil {
					return p.errf(v, field, "must be global or regional, got %q", v.Value)
				}
			case "failMode":
				if err := np.FailMode.UnmarshalText([]byte(v.Value)); err != nil {
					return p.errf(v, field, "%v", err)
				}
				np.FailModeSet = true
			case "penalty":
				err = p.penalty(v, field, &np.Penalty)
			}
			return err
		})
		if err != nil {
			return err
		}
		if err := np.Validate(); err != nil {
			f := sluice.FieldOf(err)
			at := v
			if l, ok := lines[firstPart(f)]; ok {
				at = l
			}
			return p.errf(at, join(path, f), "%s", errMessage(err))
		}
		p.c.Policies[name] = np
		return nil
	})
}

func firstPart(field string) string {
	for i := range len(field) {
		if field[i] == '.' {
			return field[:i]
		}
	}
	return field
}

// errMessage is a sluice error's message without its field.
func errMessage(err error) string {
	var e *sluice.Error
	if errors.As(err, &e) {
		return e.Message
	}
	return err.Error()
}

func (p *parser) penalty(n *yaml.Node, path string, pen *sluice.Penalty) error {
	return p.fields(n, path, []string{"after", "base", "max"}, func(k string, v *yaml.Node) error {
		field := join(path, k)
		var err error
		switch k {
		case "after":
			var a int64
			a, err = p.int(v, field, 1, 1_000_000)
			pen.After = int(a)
		case "base":
			pen.Base, err = p.duration(v, field)
		case "max":
			pen.Max, err = p.duration(v, field)
		}
		return err
	})
}

func (p *parser) endpoints(n *yaml.Node) error {
	return p.fields(n, "endpoints", nil, func(name string, v *yaml.Node) error {
		field := "endpoints." + name
		names, err := p.strings(v, field)
		if err != nil {
			return err
		}
		if len(names) == 0 || len(names) > sluice.MaxChecks {
			return p.errf(v, field, "must list 1 to %d policies", sluice.MaxChecks)
		}
		for i, pn := range names {
			if _, ok := p.c.Policies[pn]; !ok {
				at := v
				if v.Kind == yaml.SequenceNode {
					at = v.Content[i]
				}
				return p.errf(at, fmt.Sprintf("%s[%d]", field, i), "%q is not a policy of this file", pn)
			}
		}
		p.c.Endpoints[name] = names
		return nil
	})
}

func (p *parser) tiers(n *yaml.Node) error {
	return p.fields(n, "tiers", nil, func(tier string, v *yaml.Node) error {
		o, err := p.overrides(v, "tiers."+tier)
		if err != nil {
			return err
		}
		p.c.Tiers[tier] = o
		return nil
	})
}

func (p *parser) tenants(n *yaml.Node) error {
	return p.fields(n, "tenants", nil, func(id string, v *yaml.Node) error {
		path := "tenants." + id
		if !sluice.ValidID(id) {
			return p.errf(v, path, "is not a valid tenant id")
		}
		var t Tenant
		err := p.fields(v, path, []string{"tier", "settings", "overrides"}, func(k string, v *yaml.Node) error {
			switch k {
			case "tier":
				if _, ok := p.c.Tiers[v.Value]; !ok {
					return p.errf(v, path+".tier", "%q is not a configured tier", v.Value)
				}
				t.Tier = v.Value
			case "settings":
				return p.settings(v, path+".settings", &t.Settings)
			case "overrides":
				o, err := p.overrides(v, path+".overrides")
				t.Overrides = o
				return err
			}
			return nil
		})
		if err != nil {
			return err
		}
		p.c.Tenants[id] = t
		return nil
	})
}

// overrides reads a mapping of policy names to partial policies.
func (p *parser) overrides(n *yaml.Node, path string) (map[string]sluice.PolicyOverride, error) {
	out := map[string]sluice.PolicyOverride{}
	if n.Kind == yaml.ScalarNode && (n.Tag == "!!null" || n.Value == "") {
		return out, nil
	}
	err := p.fields(n, path, nil, func(name string, v *yaml.Node) error {
		field := join(path, name)
		np, ok := p.c.Policies[name]
		if !ok {
			return p.errf(v, field, "%q is not a policy of this file", name)
		}
		var o sluice.PolicyOverride
		err := p.fields(v, field, []string{"limit", "window", "burst", "leaseTTL", "shadow"}, func(k string, v *yaml.Node) error {
			f := join(field, k)
			switch k {
			case "limit":
				x, err := p.int(v, f, 1, sluice.MaxLimit)
				o.Limit = &x
				return err
			case "burst":
				x, err := p.int(v, f, 1, sluice.MaxLimit) // 0 would silently mean the limit: omit it
				o.Burst = &x
				return err
			case "window":
				d, err := p.duration(v, f)
				o.Window = &d
				return err
			case "leaseTTL":
				d, err := p.duration(v, f)
				o.LeaseTTL = &d
				return err
			case "shadow":
				b, err := p.bool(v, f)
				o.Shadow = &b
				return err
			}
			return nil
		})
		if err != nil {
			return err
		}
		if merged := o.Apply(np.Policy); merged.Validate() != nil {
			verr := merged.Validate()
			return p.errf(v, join(field, sluice.FieldOf(verr)), "%s", errMessage(verr))
		}
		out[name] = o
		return nil
	})
	return out, err
}

func (p *parser) int(n *yaml.Node, field string, lo, hi int64) (int64, error) {
	if n.Kind != yaml.ScalarNode {
		return 0, p.errf(n, field, "must be a number")
	}
	x, err := strconv.ParseInt(n.Value, 10, 64)
	if err != nil {
		return 0, p.errf(n, field, "must be a whole number, got %q", n.Value)
	}
	if x < lo || x > hi {
		return 0, p.errf(n, field, "must be between %d and %d, got %d", lo, hi, x)
	}
	return x, nil
}

func (p *parser) bool(n *yaml.Node, field string) (bool, error) {
	switch n.Value {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, p.errf(n, field, "must be true or false, got %q", n.Value)
}

// duration reads "60s", "1h30m" or a number of seconds.
func (p *parser) duration(n *yaml.Node, field string) (time.Duration, error) {
	if n.Kind != yaml.ScalarNode {
		return 0, p.errf(n, field, "must be a duration like 60s")
	}
	if secs, err := strconv.ParseFloat(n.Value, 64); err == nil {
		if secs <= 0 || secs > float64(sluice.MaxWindow/time.Second) {
			return 0, p.errf(n, field, "must be positive and at most %v, got %s seconds", sluice.MaxWindow, n.Value)
		}
		return time.Duration(secs * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(n.Value)
	if err != nil {
		return 0, p.errf(n, field, "is not a duration like 60s or 1h: %q", n.Value)
	}
	if d <= 0 {
		return 0, p.errf(n, field, "must be positive, got %v", d)
	}
	return d, nil
}

func (p *parser) strings(n *yaml.Node, field string) ([]string, error) {
	if n.Kind == yaml.ScalarNode {
		return []string{n.Value}, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, p.errf(n, field, "must be a list of names")
	}
	out := make([]string, 0, len(n.Content))
	for i, c := range n.Content {
		if c.Kind != yaml.ScalarNode || c.Value == "" {
			return nil, p.errf(c, fmt.Sprintf("%s[%d]", field, i), "must be a name")
		}
		out = append(out, c.Value)
	}
	return out, nil
}

var upstreamFields = []string{"rate", "window", "burst", "maxQueue", "cap", "maxWait", "weights", "margin", "proxy"}

// upstreams reads the upstream quotas; after tiers and tenants, which
// their weights name.
func (p *parser) upstreams(n *yaml.Node) error {
	return p.fields(n, "upstreams", nil, func(name string, v *yaml.Node) error {
		path := "upstreams." + name
		if !sluice.ValidPolicyName(name) {
			return p.errf(n, path, "is not a valid upstream name: 1 to 128 letters, digits, '.', '_', ':', '/' or '-'")
		}
		u := Upstream{Name: name, Window: DefaultUpstreamWindow, MaxWait: DefaultUpstreamMaxWait}
		lines := map[string]*yaml.Node{}
		err := p.fields(v, path, upstreamFields, func(k string, v *yaml.Node) error {
			lines[k] = v
			field := join(path, k)
			var err error
			switch k {
			case "rate":
				u.Rate, err = p.int(v, field, 1, 1e9)
			case "window":
				u.Window, err = p.duration(v, field)
				if err == nil && u.Window > 24*time.Hour {
					err = p.errf(v, field, "must be at most 24h, got %v", u.Window)
				}
			case "burst":
				u.Burst, err = p.int(v, field, 1, 1e9) // 0 would silently mean the default: omit it
			case "maxQueue":
				var q int64
				q, err = p.int(v, field, 1, 1_000_000)
				u.MaxQueue = int(q)
			case "cap":
				u.Cap, err = p.int(v, field, 1, 1e9) // 0 would silently mean none: omit it
			case "maxWait":
				u.MaxWait, err = p.duration(v, field)
				if err == nil && (u.MaxWait < time.Millisecond || u.MaxWait > MaxUpstreamWait) {
					err = p.errf(v, field, "must be between 1ms and %v, got %v", MaxUpstreamWait, u.MaxWait)
				}
			case "weights":
				err = p.weights(v, field, &u)
			case "margin":
				u.Margin, err = p.duration(v, field)
			case "proxy":
				u.Proxy, err = p.proxy(v, field)
			}
			return err
		})
		if err != nil {
			return err
		}
		if u.Proxy != nil && lines["margin"] == nil {
			u.Margin = DefaultProxyMargin
		}
		switch {
		case lines["rate"] == nil:
			return p.errf(v, join(path, "rate"), "is required: the units the upstream allows per window")
		case int64(u.Window) < u.Rate:
			return p.errf(orNode(lines["window"], v), join(path, "window"), "must be at least rate (%d) nanoseconds, got %v", u.Rate, u.Window)
		case u.Burst > u.Rate:
			return p.errf(lines["burst"], join(path, "burst"), "must be at most rate (%d), got %d", u.Rate, u.Burst)
		case u.Cap > u.Rate:
			return p.errf(lines["cap"], join(path, "cap"), "must be at most rate (%d), got %d", u.Rate, u.Cap)
		case u.Margin > u.Window:
			return p.errf(lines["margin"], join(path, "margin"), "must be at most the window (%v), got %v", u.Window, u.Margin)
		}
		if err := u.Scheduler().Validate(); err != nil { // a guard: the checks above should have caught it
			return p.errf(v, path, "%v", err)
		}
		if t, ok := u.Target(); ok {
			if err := t.Check(); err != nil {
				return p.errf(lines["proxy"], join(path, "proxy"), "%v", strings.TrimPrefix(err.Error(), "forward: "))
			}
		}
		p.c.Upstreams[name] = u
		return nil
	})
}

var proxyFields = []string{"url", "timeout", "maxBody", "maxResponse", "headers", "forwardHeaders", "maxConcurrent", "maxConcurrentPerTenant"}

// proxy reads an upstream's proxy: where Sluice sends its calls.
func (p *parser) proxy(n *yaml.Node, path string) (*Proxy, error) {
	px := &Proxy{}
	var at *yaml.Node
	err := p.fields(n, path, proxyFields, func(k string, v *yaml.Node) error {
		field := join(path, k)
		var err error
		switch k {
		case "url":
			at = v
			px.URL, err = url.Parse(v.Value)
			if err != nil || !px.URL.IsAbs() {
				return p.errf(v, field, "must be an absolute http or https URL, got %q", v.Value)
			}
		case "timeout":
			px.Timeout, err = p.duration(v, field)
			if err == nil && px.Timeout > 10*time.Minute {
				err = p.errf(v, field, "must be at most 10m, got %v", px.Timeout)
			}
		case "maxBody":
			px.MaxBody, err = p.int(v, field, 1, 1<<30)
		case "maxResponse":
			px.MaxResponse, err = p.int(v, field, 1, 1<<30)
		case "maxConcurrent", "maxConcurrentPerTenant":
			var x int64
			x, err = p.int(v, field, 1, 100_000)
			if k == "maxConcurrent" {
				px.MaxConcurrent = int(x)
			} else {
				px.MaxPerTenant = int(x)
			}
		case "forwardHeaders":
			px.ForwardHeaders, err = p.strings(v, field)
		case "headers":
			px.Headers = map[string]string{}
			err = p.fields(v, field, nil, func(name string, hv *yaml.Node) error {
				value := hv.Value
				if env, ok := strings.CutPrefix(value, "${"); ok && strings.HasSuffix(env, "}") {
					env = strings.TrimSuffix(env, "}")
					if value, ok = os.LookupEnv(env); !ok {
						return p.errf(hv, join(field, name), "reads the environment variable %s, which is not set", env)
					}
				}
				if hv.Kind != yaml.ScalarNode || !validHeaderName(name) {
					return p.errf(hv, join(field, name), "must be a header name and a text value")
				}
				px.Headers[name] = value
				return nil
			})
		}
		return err
	})
	if err == nil && at == nil {
		err = p.errf(n, join(path, "url"), "is required: the address calls are sent under")
	}
	return px, err
}

// validHeaderName reports whether s is an HTTP header name (RFC 9110's
// token).
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

func (p *parser) weights(n *yaml.Node, path string, u *Upstream) error {
	return p.fields(n, path, []string{"tiers", "tenants"}, func(k string, v *yaml.Node) error {
		m := map[string]int64{}
		err := p.fields(v, join(path, k), nil, func(name string, w *yaml.Node) error {
			field := join(join(path, k), name)
			switch {
			case k == "tiers" && len(p.c.Tiers) > 0 && !p.hasTier(name):
				return p.errf(w, field, "%q is not a configured tier", name)
			case k == "tenants" && !sluice.ValidID(name):
				return p.errf(w, field, "is not a valid tenant id")
			}
			x, err := p.int(w, field, 1, fairshare.MaxWeight)
			m[name] = x
			return err
		})
		if k == "tiers" {
			u.TierWeights = m
		} else {
			u.TenantWeights = m
		}
		return err
	})
}

// hasTier reports whether tier is configured; in a file that configures no
// tiers, any name is (the tenant store's tiers are free text then).
func (p *parser) hasTier(tier string) bool {
	_, ok := p.c.Tiers[tier]
	return ok || len(p.c.Tiers) == 0
}

func orNode(n, otherwise *yaml.Node) *yaml.Node {
	if n != nil {
		return n
	}
	return otherwise
}

// regions reads this node's region and the global table's.
func (p *parser) regions(n *yaml.Node) error {
	var id *yaml.Node
	err := p.fields(n, "regions", []string{"id", "all"}, func(k string, v *yaml.Node) error {
		var err error
		switch k {
		case "id":
			id, p.c.Regions.ID = v, v.Value
		case "all":
			p.c.Regions.All, err = p.strings(v, "regions.all")
		}
		return err
	})
	if err != nil {
		return err
	}
	switch {
	case p.c.Regions.ID == "":
		return p.errf(n, "regions.id", "is required: this node's region, one of regions.all")
	case !slices.Contains(p.c.Regions.All, p.c.Regions.ID):
		return p.errf(id, "regions.id", "%q must be one of regions.all %v", p.c.Regions.ID, p.c.Regions.All)
	}
	return nil
}
