package config

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

func TestExample(t *testing.T) {
	c, err := Load("../examples/sluice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// Seed 003's table.
	for name, limit := range map[string]int64{"chat": 20, "conversations": 60, "models": 10, "instance": 10, "costs": 20, "admin": 30} {
		p := c.Policies[name]
		if p.Algorithm != sluice.FixedWindow || p.Limit != limit || p.Window != time.Minute || len(p.Key) != 1 || p.Key[0] != "user" {
			t.Errorf("policy %s: %+v", name, p)
		}
		if got := c.Endpoints[name]; len(got) != 1 || got[0] != name {
			t.Errorf("endpoint %s: %v", name, got)
		}
	}
	if got := c.Endpoints["search"]; len(got) != 2 {
		t.Errorf("search endpoint: %v", got)
	}
	if c.Defaults.Timeout != 50*time.Millisecond || c.Defaults.FailMode != sluice.FailOpen || c.Defaults.Tier != "free" {
		t.Errorf("defaults: %+v", c.Defaults)
	}
	if p := c.Policies["login-per-ip"]; p.Penalty != (sluice.Penalty{After: 3, Base: time.Minute, Max: time.Hour}) {
		t.Errorf("penalty: %+v", p.Penalty)
	}
	if !c.Policies["export-daily"].Shadow || c.Policies["reports-running"].FailMode != sluice.FailClosed {
		t.Error("shadow or fail mode lost")
	}
}

// TestResolveOverrides: tier, then the file's tenant entry, then the tenant
// store's overrides.
func TestResolveOverrides(t *testing.T) {
	c, err := Load("../examples/sluice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	limit := func(t *sluice.Tenant, id string) int64 {
		rs, err := c.Resolve(t, id, "chat", nil)
		if err != nil {
			panic(err)
		}
		return rs[0].Policy.Limit
	}
	if got := limit(nil, "nobody"); got != 20 {
		t.Errorf("default tier: %d", got)
	}
	if got := limit(&sluice.Tenant{ID: "x", Tier: "premium"}, "x"); got != 100 {
		t.Errorf("premium tier: %d", got)
	}
	if got := limit(nil, "acme"); got != 500 {
		t.Errorf("acme in the file: %d", got)
	}
	l := int64(7)
	if got := limit(&sluice.Tenant{ID: "acme", Overrides: map[string]sluice.PolicyOverride{"chat": {Limit: &l}}}, "acme"); got != 7 {
		t.Errorf("store override: %d", got)
	}
	rs, err := c.Resolve(nil, "x", "", []string{"reports-running", "chat"})
	if err != nil || len(rs) != 2 || rs[0].Policy.FailMode != sluice.FailClosed || rs[1].Policy.FailMode != sluice.FailOpen {
		t.Fatalf("by names: %+v %v", rs, err)
	}
	if _, err := c.Resolve(nil, "x", "nope", nil); sluice.FieldOf(err) != "endpoint" {
		t.Errorf("unknown endpoint: %v", err)
	}
	if _, err := c.Resolve(nil, "x", "", []string{"chat", "nope"}); sluice.FieldOf(err) != "policies[1]" {
		t.Errorf("unknown policy: %v", err)
	}
	if s := c.Settings(nil, "acme"); s.TenantConnections != 500 || s.ConnectionsPerSession != 3 {
		t.Errorf("acme settings: %+v", s)
	}
}

// TestErrorsNameFileLineField holds every error to its file, line and field.
func TestErrorsNameFileLineField(t *testing.T) {
	cases := []struct{ yaml, want string }{
		{"version: 2\n", "c.yaml:1: version: must be 1"},
		{"polices: {}\n", "c.yaml:1: polices: is not a known field"},
		{"policies:\n  chat:\n    algorithm: fixed_window\n    limit: 0\n    window: 60s\n", "c.yaml:4: policies.chat.limit: must be between 1 and"},
		{"policies:\n  chat:\n    algorithm: leaky\n", "c.yaml:3: policies.chat.algorithm: \"leaky\" is not an algorithm"},
		{"policies:\n  chat:\n    algorithm: fixed_window\n    limit: 5\n    window: soon\n", "c.yaml:5: policies.chat.window: is not a duration"},
		{"policies:\n  chat:\n    algorithm: fixed_window\n    limit: 5\n", "c.yaml:3: policies.chat.window: must be between"},
		{"policies:\n  chat: {algorithm: fixed_window, limit: 5, window: 1m, colour: red}\n", "c.yaml:2: policies.chat.colour: is not a known field"},
		{"policies:\n  chat: {algorithm: fixed_window, limit: 5, window: 1m}\nendpoints:\n  chat: [chat, chatt]\n", "c.yaml:4: endpoints.chat[1]: \"chatt\" is not a policy"},
		{"policies:\n  chat: {algorithm: fixed_window, limit: 5, window: 1m}\ntiers:\n  gold:\n    chat: {limit: -3}\n", "c.yaml:5: tiers.gold.chat.limit: must be between 1 and"},
		{"policies:\n  chat: {algorithm: fixed_window, limit: 5, window: 1m}\ntiers:\n  gold: {}\ntenants:\n  acme: {tier: silver}\n", "c.yaml:6: tenants.acme.tier: \"silver\" is not a configured tier"},
		{"defaults:\n  timeout: 2h\n", "c.yaml:2: defaults.timeout: must be between 1ms and 1m"},
		{"policies:\n  chat: {algorithm: fixed_window, limit: 5, window: 1m, penalty: {after: 2, base: 1h, max: 1m}}\n", "c.yaml:2: policies.chat.penalty.max: must be between"},
		{"policies: [\n", "c.yaml:1: file: yaml: line 1:"},
		{"version: 1\n---\nversion: 1\n", "c.yaml:2: file: holds more than one YAML document"},
		{"defaults:\n  tier: gold\ntiers:\n  free: {}\n", "c.yaml:2: defaults.tier: \"gold\" is not a configured tier"},
		{"policies:\n  bad name: {algorithm: fixed_window, limit: 5, window: 1m}\n", "c.yaml:2: policies.bad name: is not a valid policy name"},
		{"upstreams:\n  api:\n    window: 1s\n", "c.yaml:3: upstreams.api.rate: is required"},
		{"upstreams:\n  api: {rate: 0}\n", "c.yaml:2: upstreams.api.rate: must be between 1 and"},
		{"upstreams:\n  api:\n    rate: 10\n    colour: red\n", "c.yaml:4: upstreams.api.colour: is not a known field"},
		{"upstreams:\n  api:\n    rate: 10\n    window: soon\n", "c.yaml:4: upstreams.api.window: is not a duration"},
		{"upstreams:\n  api:\n    rate: 10\n    burst: 11\n", "c.yaml:4: upstreams.api.burst: must be at most rate (10)"},
		{"upstreams:\n  api:\n    rate: 10\n    maxQueue: 0\n", "c.yaml:4: upstreams.api.maxQueue: must be between 1 and"},
		{"upstreams:\n  api:\n    rate: 10\n    cap: 11\n", "c.yaml:4: upstreams.api.cap: must be at most rate (10)"},
		{"upstreams:\n  api:\n    rate: 10\n    cap: 0\n", "c.yaml:4: upstreams.api.cap: must be between 1 and"},
		{"upstreams:\n  api:\n    rate: 10\n    cap: 3\n", ""},
		{"upstreams:\n  api:\n    rate: 10\n    maxWait: 2m\n", "c.yaml:4: upstreams.api.maxWait: must be between 1ms and 1m0s"},
		{"upstreams:\n  api:\n    rate: 10\n    window: 5ns\n", "c.yaml:4: upstreams.api.window: must be at least rate (10) nanoseconds"},
		{"upstreams:\n  api:\n    rate: 10\n    weights: {tiers: {gold: 2}}\n", ""},
		{"tiers:\n  free: {}\nupstreams:\n  api:\n    rate: 10\n    weights:\n      tiers: {gold: 2}\n", "c.yaml:7: upstreams.api.weights.tiers.gold: \"gold\" is not a configured tier"},
		{"upstreams:\n  api:\n    rate: 10\n    weights:\n      tenants: {acme: 0}\n", "c.yaml:5: upstreams.api.weights.tenants.acme: must be between 1 and 1000000"},
		{"upstreams:\n  api:\n    rate: 10\n    weights: {users: {}}\n", "c.yaml:4: upstreams.api.weights.users: is not a known field"},
		{"upstreams:\n  bad name: {rate: 10}\n", "c.yaml:2: upstreams.bad name: is not a valid upstream name"},
		{"upstreams:\n  api:\n    rate: 10\n    margin: 2s\n", "c.yaml:4: upstreams.api.margin: must be at most the window (1s)"},
		{"upstreams:\n  api:\n    rate: 10\n    margin: 0s\n", "c.yaml:4: upstreams.api.margin: must be positive"},
		{"upstreams:\n  api:\n    rate: 10\n    proxy: {timeout: 1s}\n", "c.yaml:4: upstreams.api.proxy.url: is required"},
		{"upstreams:\n  api:\n    rate: 10\n    proxy: {url: /relative}\n", "c.yaml:4: upstreams.api.proxy.url: must be an absolute http or https URL"},
		{"upstreams:\n  api:\n    rate: 10\n    proxy: {url: 'file:///etc/passwd'}\n", "c.yaml:4: upstreams.api.proxy: URL \"file:///etc/passwd\" must be http or https"},
		{"upstreams:\n  api:\n    rate: 10\n    proxy: {url: 'https://u:secret@x/'}\n", "c.yaml:4: upstreams.api.proxy: URL \"https://u:xxxxx@x/\" must hold no user"},
		{"upstreams:\n  api:\n    rate: 10\n    proxy: {url: 'https://x/?k=1'}\n", "c.yaml:4: upstreams.api.proxy: URL \"https://x/?k=1\" must hold no query"},
		{"upstreams:\n  api:\n    rate: 10\n    proxy: {url: 'https://x/', forwardHeaders: [Authorization]}\n", "c.yaml:4: upstreams.api.proxy: header \"Authorization\" is never forwarded"},
		{"upstreams:\n  api:\n    rate: 10\n    proxy: {url: 'https://x/', headers: {Host: evil}}\n", "c.yaml:4: upstreams.api.proxy: header \"Host\" may not be set"},
		{"upstreams:\n  api:\n    rate: 10\n    proxy:\n      url: 'https://x/'\n      headers: {'a b': c}\n", "c.yaml:6: upstreams.api.proxy.headers.a b: must be a header name"},
		{"upstreams:\n  api:\n    rate: 10\n    proxy:\n      url: 'https://x/'\n      headers: {X-Key: '${SLUICE_TEST_UNSET_VARIABLE}'}\n", "c.yaml:6: upstreams.api.proxy.headers.X-Key: reads the environment variable SLUICE_TEST_UNSET_VARIABLE, which is not set"},
		{"upstreams:\n  api:\n    rate: 10\n    proxy: {url: 'https://x/', maxConcurrent: 0}\n", "c.yaml:4: upstreams.api.proxy.maxConcurrent: must be between 1 and"},
		{"upstreams:\n  api:\n    rate: 10\n    proxy: {url: 'https://x/', colour: red}\n", "c.yaml:4: upstreams.api.proxy.colour: is not a known field"},
	}
	for _, tc := range cases {
		_, err := Parse("c.yaml", []byte(tc.yaml))
		if tc.want == "" {
			if err != nil {
				t.Errorf("%q: %v, want no error", tc.yaml, err)
			}
			continue
		}
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%q:\n got %v\nwant %s...", tc.yaml, err, tc.want)
		}
	}
}

// TestUpstreams: the example's upstream, defaults filled in, and weights
// by tenant, then tier, then 1.
func TestUpstreams(t *testing.T) {
	c, err := Load("../examples/sluice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	u, ok := c.Upstreams["partner-api"]
	if !ok || u.Rate != 100 || u.Window != time.Second || u.Burst != 10 || u.MaxQueue != 100 || u.MaxWait != 2*time.Second {
		t.Fatalf("partner-api: %+v", u)
	}
	if err := u.Scheduler().Validate(); err != nil {
		t.Fatal(err)
	}
	if u.TierWeights["premium"] != 2 || c.Tier(nil, "acme") != "premium" {
		t.Errorf("premium's weight %d, acme's tier %q; want 2, premium", u.TierWeights["premium"], c.Tier(nil, "acme"))
	}
	c, err = Parse("c.yaml", []byte("upstreams:\n  api:\n    rate: 5\n    cap: 2\n    weights: {tenants: {acme: 7}, tiers: {free: 3}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	u = c.Upstreams["api"]
	if u.Window != DefaultUpstreamWindow || u.MaxWait != DefaultUpstreamMaxWait || u.Burst != 0 || u.TenantWeights["acme"] != 7 || u.TierWeights["free"] != 3 {
		t.Errorf("api: %+v", u)
	}
	if u.Cap != 2 || u.Scheduler().Cap != 2 {
		t.Errorf("api: cap %d, scheduler's %d; want 2", u.Cap, u.Scheduler().Cap)
	}
}

// TestUpstreamMarginAndProxy: a margin lengthens the scheduler's window;
// a proxy takes its fields, its credentials from the environment, and a
// margin of DefaultProxyMargin unless it names one.
func TestUpstreamMarginAndProxy(t *testing.T) {
	t.Setenv("SLUICE_TEST_PARTNER_TOKEN", "Bearer s3cret")
	c, err := Parse("c.yaml", []byte(`
upstreams:
  paced: {rate: 100, window: 1s, margin: 50ms}
  proxied:
    rate: 100
    proxy:
      url: https://api.partner.example/v2
      timeout: 5s
      maxBody: 1000
      maxResponse: 2000
      headers: {Authorization: '${SLUICE_TEST_PARTNER_TOKEN}', X-Client: sluice}
      forwardHeaders: [X-Trace]
      maxConcurrent: 50
      maxConcurrentPerTenant: 5
  plain: {rate: 100}
`))
	if err != nil {
		t.Fatal(err)
	}
	if u := c.Upstreams["paced"]; u.Margin != 50*time.Millisecond || u.Scheduler().Window != 1050*time.Millisecond || u.Proxy != nil {
		t.Errorf("paced: margin %v, scheduler's window %v, proxy %v", u.Margin, u.Scheduler().Window, u.Proxy)
	}
	if u := c.Upstreams["plain"]; u.Margin != 0 || u.Scheduler().Window != time.Second {
		t.Errorf("plain: margin %v, window %v", u.Margin, u.Scheduler().Window)
	}
	u := c.Upstreams["proxied"]
	if u.Margin != DefaultProxyMargin || u.Scheduler().Window != time.Second+DefaultProxyMargin {
		t.Errorf("proxied: margin %v, scheduler's window %v", u.Margin, u.Scheduler().Window)
	}
	tg, ok := u.Target()
	if !ok || tg.URL.String() != "https://api.partner.example/v2" || tg.Timeout != 5*time.Second || tg.MaxBody != 1000 || tg.MaxResponse != 2000 ||
		tg.Headers.Get("Authorization") != "Bearer s3cret" || tg.Headers.Get("X-Client") != "sluice" || len(tg.Forward) != 1 ||
		tg.MaxConcurrent != 50 || tg.MaxPerTenant != 5 || tg.Margin != DefaultProxyMargin || tg.Name != "proxied" {
		t.Errorf("target: %+v", tg)
	}
	if err := tg.Check(); err != nil {
		t.Error(err)
	}
	if _, ok := c.Upstreams["paced"].Target(); ok {
		t.Error("paced has a target")
	}
}

func TestEmptyFileIsDefault(t *testing.T) {
	c, err := Parse("empty.yaml", nil)
	if err != nil || c.Defaults.Timeout != DefaultTimeout || len(c.Policies) != 0 {
		t.Fatalf("%+v %v", c, err)
	}
}

// The regions of a global table: this node's and all; a missing or
// foreign id is an error naming the field.
func TestRegionsConfig(t *testing.T) {
	c, err := Parse("c.yaml", []byte("regions:\n  id: eu\n  all: [us, eu, ap]\n"))
	if err != nil || c.Regions.ID != "eu" || len(c.Regions.All) != 3 {
		t.Fatalf("%+v %v", c.Regions, err)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"regions:\n  all: [us, eu]\n", "regions.id: is required"},
		{"regions:\n  id: mars\n  all: [us, eu]\n", "c.yaml:2: regions.id: \"mars\" must be one of"},
		{"regions:\n  id: eu\n  colour: red\n", "regions.colour"},
	} {
		if _, err := Parse("c.yaml", []byte(tc.yaml)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.yaml, err, tc.want)
		}
	}
}
