package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/fairshare"
	"github.com/sluicehq/sluice/forward"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/tenancy"
)

// upstreamsYAML: "fast" paces one unit every 100ms; "held" one every 10s,
// so that a request behind its first grant waits far longer than any test;
// "metered" allows each customer 2 units a minute of its 100.
const upstreamsYAML = `
tiers: {free: {}, premium: {}}
upstreams:
  fast: {rate: 10, window: 1s, burst: 1, maxWait: 5s}
  metered: {rate: 100, window: 1m, burst: 10, cap: 2, maxWait: 5s}
  held:
    rate: 1
    window: 10s
    maxQueue: 1
    maxWait: 1m
    weights: {tiers: {premium: 3}}
`

// newUpstreamService is a server with the upstreams above, an admin key,
// and tenants acme (premium) and beta, each with an API key.
func newUpstreamService(t *testing.T) *service {
	t.Helper()
	return newUpstreamServiceOf(t, upstreamsYAML)
}

// newUpstreamServiceOf is newUpstreamService with the upstreams of yaml,
// and their proxies, as internal/server builds them.
func newUpstreamServiceOf(t *testing.T, yaml string) *service {
	t.Helper()
	return newUpstreamServiceWith(t, yaml, tenancy.Options{})
}

// newUpstreamServiceWith is newUpstreamServiceOf over a tenant layer of
// options o (its Config and AdminKey set here).
func newUpstreamServiceWith(t *testing.T, yaml string, o tenancy.Options) *service {
	t.Helper()
	return newUpstreamServiceOn(t, yaml, o, nil)
}

// newUpstreamServiceOn is newUpstreamServiceWith whose upstreams, if lim
// is not nil, are shared through a ledger on lim, as internal/server
// shares them on a store of many nodes.
func newUpstreamServiceOn(t *testing.T, yaml string, o tenancy.Options, lim fairshare.Limiter) *service {
	t.Helper()
	cfg, err := config.Parse("upstreams.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	ups := map[string]Upstream{}
	for name, uc := range cfg.Upstreams {
		var opts fairshare.Options
		if lim != nil {
			if opts.Ledger, err = fairshare.NewLimiterLedger(lim, name, uc.Scheduler(), sluice.NamedLease|1, fairshare.DefaultTTL(uc.Scheduler().Window)); err != nil {
				t.Fatal(err)
			}
		}
		q, err := fairshare.NewUpstream(uc.Scheduler(), opts)
		if err != nil {
			t.Fatal(err)
		}
		up := Upstream{Quota: q, MaxWait: uc.MaxWait, Weights: tenancy.Weights{Tiers: uc.TierWeights, Tenants: uc.TenantWeights}, Margin: uc.Margin}
		if tg, ok := uc.Target(); ok {
			if up.Proxy, err = forward.New(tg); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(up.Proxy.Close) // after the server's, which the cleanup below closes
		}
		ups[name] = up
	}
	s := memstore.New(memstore.Options{})
	h := New(Options{
		Limiter:   engine.New(s, engine.Options{}),
		Tenancy:   newTenancy(withConfig(o, cfg)),
		Upstreams: ups,
	})
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		for _, u := range ups {
			u.Quota.Close() // first: requests still held end, so the server can close
		}
		srv.Close()
		s.Close()
	})
	sv := &service{srv: srv}
	for _, id := range []string{"acme", "beta"} {
		body := `{"id":"` + id + `"}`
		if id == "acme" {
			body = `{"id":"acme","tier":"premium"}`
		}
		if code, out := sv.do(t, adminKey, "POST", "/v1/tenants", body); code != 201 {
			t.Fatalf("create %s: %d %v", id, code, out)
		}
		code, out := sv.do(t, adminKey, "POST", "/v1/tenants/"+id+"/keys", `{"name":"test"}`)
		if code != 201 {
			t.Fatalf("key for %s: %d %v", id, code, out)
		}
		if id == "acme" {
			sv.acme = out["token"].(string)
		} else {
			sv.beta = out["token"].(string)
		}
	}
	return sv
}

// state returns an upstream's live state, as the admin reads it.
func (s *service) state(t *testing.T, name string) map[string]any {
	t.Helper()
	code, out := s.do(t, adminKey, "GET", "/v1/upstreams/"+name, "")
	if code != 200 {
		t.Fatalf("GET /v1/upstreams/%s: %d %v", name, code, out)
	}
	return out
}

// held sends an acquire that is held open until ctx ends, in the
// background; done is closed when it returns.
func (s *service) hold(t *testing.T, ctx context.Context, key, path, body string) (done chan struct{}) {
	t.Helper()
	done = make(chan struct{})
	req, err := http.NewRequestWithContext(ctx, "POST", s.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	go func() {
		defer close(done)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	return done
}

// waitState polls an upstream's state until cond holds.
func (s *service) waitState(t *testing.T, name, what string, cond func(st map[string]any) bool) map[string]any {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st := s.state(t, name)
		if cond(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: %v", what, st)
		}
		time.Sleep(5 * time.Millisecond) // a poll's period
	}
}

func waiting(st map[string]any) float64 { return st["state"].(map[string]any)["waiting"].(float64) }
func granted(st map[string]any) float64 { return st["state"].(map[string]any)["granted"].(float64) }

// TestUpstreamGranted: the first request is granted at once; one right
// behind it waits for the pacer (100ms a unit) and is granted after a
// wait longer than the first's.
func TestUpstreamGranted(t *testing.T) {
	s := newUpstreamService(t)
	code, first := s.do(t, s.acme, "POST", "/v1/upstreams/fast/acquire", `{"key":"u1"}`)
	if code != 200 || first["granted"] != true {
		t.Fatalf("first: %d %v", code, first)
	}
	// A loaded machine may stall a request past the pacer's interval, and
	// then it waits for nothing: a few tries, each right behind a grant.
	for try := range 5 {
		code, out := s.do(t, s.acme, "POST", "/v1/upstreams/fast/acquire", `{"key":"u1","maxWait":"2s"}`)
		if code != 200 || out["granted"] != true {
			t.Fatalf("try %d: %d %v", try, code, out)
		}
		if out["waitedMs"].(float64) > first["waitedMs"].(float64) {
			if d, err := time.ParseDuration(out["waited"].(string)); err != nil || d <= 0 {
				t.Fatalf("waited %v: %v", out["waited"], err)
			}
			return
		}
	}
	t.Fatal("no request right behind a grant waited")
}

// TestUpstreamShortage: behind a grant, "held" has no unit for 10s; a
// request that will wait 100ms is refused at once with 429, Retry-After
// and the reason, and takes no place.
func TestUpstreamShortage(t *testing.T) {
	s := newUpstreamService(t)
	if code, out := s.do(t, s.acme, "POST", "/v1/upstreams/held/acquire", `{"key":"u1"}`); code != 200 {
		t.Fatalf("first: %d %v", code, out)
	}
	resp := s.request(t, s.beta, "POST", "/v1/upstreams/held/acquire", `{"key":"u2","maxWait":"100ms"}`)
	out := decodeBody(t, resp)
	if resp.StatusCode != 429 || out["reason"] != "shortage" || out["upstream"] != "held" || out["error"] != "upstream_quota_short" {
		t.Fatalf("shortage: %d %v", resp.StatusCode, out)
	}
	if ra := resp.Header.Get("Retry-After"); ra == "" || ra == "0" || out["retryAfterMs"].(float64) <= 100 {
		t.Fatalf("Retry-After %q, retryAfterMs %v", ra, out["retryAfterMs"])
	}
	if st := s.state(t, "held"); waiting(st) != 0 || granted(st) != 1 {
		t.Fatalf("after the refusal: %v", st)
	}
}

// TestUpstreamStoreDown: upstreams shared through the store, which
// stalls: once the node holds no share, an acquire and a proxied call are
// answered 503 unavailable, the error body and Retry-After as for any
// store failure, never 429 "shortage" (with an hour's Retry-After, as
// they were).
func TestUpstreamStoreDown(t *testing.T) {
	_, standIn := newArrivals(t)
	st := &stall{}
	st.on.Store(true)
	counters := stallingCounters{memstore.New(memstore.Options{}), st}
	defer counters.Close()
	lim := engine.New(counters, engine.Options{Timeout: 50 * time.Millisecond})
	s := newUpstreamServiceOn(t, `
tiers: {free: {}, premium: {}}
upstreams:
  shared: {rate: 10, window: 1s, maxWait: 5s, proxy: {url: "`+standIn.URL+`/"}}
`, tenancy.Options{}, lim)
	// The node's first step fails within the engine's deadline, and a
	// request before it is refused for want of a share: ask until the
	// answer is not that, for at most a minute.
	var resp *http.Response
	var out map[string]any
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) { // a poll's period
		resp = s.request(t, s.acme, "POST", "/v1/upstreams/shared/acquire", `{"key":"u1","maxWait":"1s"}`)
		out = decodeBody(t, resp)
		if resp.StatusCode != http.StatusTooManyRequests || time.Now().After(deadline) {
			break
		}
	}
	if resp.StatusCode != http.StatusServiceUnavailable || out["error"] != "unavailable" || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("acquire with the store down: %d Retry-After %q %v, want 503 unavailable, Retry-After 1", resp.StatusCode, resp.Header.Get("Retry-After"), out)
	}
	presp, body := s.proxyCall(t, s.acme, "POST", "/v1/upstreams/shared/proxy/x", "{}", map[string]string{"Sluice-Key": "u1"})
	if presp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, `"error":"unavailable"`) || presp.Header.Get("Retry-After") != "1" {
		t.Fatalf("proxied call with the store down: %d Retry-After %q %s, want 503 unavailable, Retry-After 1", presp.StatusCode, presp.Header.Get("Retry-After"), body)
	}
}

// TestUpstreamCap: a customer that has had its cap of "metered" is
// refused (429, shortage) while the upstream has room, and another
// customer is not; a request costing more than the cap is 400 naming the
// cost. The admin sees the cap.
func TestUpstreamCap(t *testing.T) {
	s := newUpstreamService(t)
	for range 2 {
		if code, out := s.do(t, s.acme, "POST", "/v1/upstreams/metered/acquire", `{"key":"u1"}`); code != 200 {
			t.Fatalf("within the cap: %d %v", code, out)
		}
	}
	resp := s.request(t, s.acme, "POST", "/v1/upstreams/metered/acquire", `{"key":"u1","maxWait":"1s"}`)
	if out := decodeBody(t, resp); resp.StatusCode != 429 || out["reason"] != "shortage" || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("over the cap: %d %v", resp.StatusCode, out)
	}
	if code, out := s.do(t, s.acme, "POST", "/v1/upstreams/metered/acquire", `{"key":"u2"}`); code != 200 {
		t.Fatalf("another key of the tenant: %d %v", code, out)
	}
	if code, out := s.do(t, s.acme, "POST", "/v1/upstreams/metered/acquire", `{"key":"u3","cost":3}`); code != 400 || out["field"] != "cost" {
		t.Fatalf("a cost over the cap: %d %v", code, out)
	}
	st := s.state(t, "metered")
	if code, out := s.do(t, adminKey, "GET", "/v1/upstreams/metered", ""); code != 200 || out["cap"] != 2.0 || granted(st) != 3 || waiting(st) != 0 {
		t.Fatalf("admin: %d %v, state %v", code, out, st)
	}
}

// TestUpstreamQueueFullAndCancel: a customer's request waits in "held"
// (maxQueue 1); its next is refused, queue full; its client disconnects,
// which withdraws its place, and the customer may queue again.
func TestUpstreamQueueFullAndCancel(t *testing.T) {
	s := newUpstreamService(t)
	if code, out := s.do(t, s.acme, "POST", "/v1/upstreams/held/acquire", `{"key":"u1"}`); code != 200 {
		t.Fatalf("first: %d %v", code, out)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := s.hold(t, ctx, s.acme, "/v1/upstreams/held/acquire", `{"key":"u3"}`)
	st := s.waitState(t, "held", "acme/u3 to wait", func(st map[string]any) bool { return waiting(st) == 1 })
	q := st["queues"].([]any)[0].(map[string]any)
	if q["tenant"] != "acme" || q["key"] != "u3" || q["waiting"] != 1.0 || q["weight"] != 3.0 {
		t.Fatalf("queue: %v (acme is premium: weight 3)", q)
	}

	resp := s.request(t, s.acme, "POST", "/v1/upstreams/held/acquire", `{"key":"u3"}`)
	out := decodeBody(t, resp)
	if resp.StatusCode != 429 || out["reason"] != "queue full" || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("queue full: %d %v", resp.StatusCode, out)
	}

	cancel() // the client disconnects
	<-done
	s.waitState(t, "held", "acme/u3's place to be withdrawn", func(st map[string]any) bool { return waiting(st) == 0 })
	ctx2, cancel2 := context.WithCancel(context.Background())
	done2 := s.hold(t, ctx2, s.acme, "/v1/upstreams/held/acquire", `{"key":"u3","maxWait":"30s"}`)
	s.waitState(t, "held", "acme/u3 to wait again", func(st map[string]any) bool { return waiting(st) == 1 })
	cancel2()
	<-done2
}

// TestUpstreamWalls: a tenant's key naming another tenant is refused as
// /v1/check refuses it, and queues nothing; the admin may name any tenant;
// only the admin reads the upstreams' state.
func TestUpstreamWalls(t *testing.T) {
	s := newUpstreamService(t)
	code, want := s.do(t, s.acme, "POST", "/v1/check", `{"tenant":"beta","checks":[{"key":"k","policy":{"name":"x","algorithm":"fixed_window","limit":1,"window":"1m"}}]}`)
	if code != 403 {
		t.Fatalf("check for beta: %d %v", code, want)
	}
	code, got := s.do(t, s.acme, "POST", "/v1/upstreams/fast/acquire", `{"tenant":"beta","key":"u1"}`)
	if code != 403 || got["error"] != want["error"] || got["message"] != want["message"] {
		t.Fatalf("acme acquiring for beta: %d %v, want 403 %v", code, got, want)
	}
	if st := s.state(t, "fast"); granted(st) != 0 || waiting(st) != 0 {
		t.Fatalf("after the refusal: %v", st)
	}
	if code, out := s.do(t, adminKey, "POST", "/v1/upstreams/fast/acquire", `{"tenant":"beta","key":"u1"}`); code != 200 {
		t.Fatalf("admin for beta: %d %v", code, out)
	}
	if code, out := s.do(t, s.acme, "POST", "/v1/upstreams/fast/acquire", `{"tenant":"acme","key":"u1"}`); code != 200 {
		t.Fatalf("acme for itself: %d %v", code, out)
	}
	for _, path := range []string{"/v1/upstreams", "/v1/upstreams/fast"} {
		if code, out := s.do(t, s.acme, "GET", path, ""); code != 403 {
			t.Errorf("acme: GET %s: %d %v", path, code, out)
		}
	}
	code, out := s.do(t, adminKey, "GET", "/v1/upstreams", "")
	if ups, _ := out["upstreams"].([]any); code != 200 || len(ups) != 3 || ups[0].(map[string]any)["name"] != "fast" || ups[0].(map[string]any)["rate"] != 10.0 {
		t.Fatalf("admin lists: %d %v", code, out)
	}
}

// TestUpstreamBadInput: an unknown upstream is 404 naming it; a bad body
// is 400 naming the field, and changes nothing.
func TestUpstreamBadInput(t *testing.T) {
	s := newUpstreamService(t)
	code, out := s.do(t, s.acme, "POST", "/v1/upstreams/nope/acquire", `{"key":"u1"}`)
	if code != 404 || !strings.Contains(out["message"].(string), `"nope"`) {
		t.Fatalf("unknown upstream: %d %v", code, out)
	}
	if code, out := s.do(t, adminKey, "GET", "/v1/upstreams/nope", ""); code != 404 {
		t.Fatalf("GET unknown upstream: %d %v", code, out)
	}
	for _, tc := range []struct{ key, body, field string }{
		{s.acme, `{}`, "key"},
		{s.acme, `{"key":""}`, "key"},
		{s.acme, `{"key":"u","cost":0}`, "cost"},
		{s.acme, `{"key":"u","cost":2}`, "cost"}, // fast's burst is 1
		{s.acme, `{"key":"u","cost":"1"}`, "cost"},
		{s.acme, `{"key":"u","maxWait":"soon"}`, "maxWait"},
		{s.acme, `{"key":"u","maxWait":"1h"}`, "maxWait"},
		{s.acme, `{"key":"u","maxWait":0}`, "maxWait"},
		{s.acme, `{"key":"u","colour":"red"}`, "colour"},
		{s.acme, `[]`, "body"},
		{adminKey, `{"key":"u"}`, "tenant"},
	} {
		code, out := s.do(t, tc.key, "POST", "/v1/upstreams/fast/acquire", tc.body)
		if code != 400 || out["field"] != tc.field {
			t.Errorf("%s: %d %v, want 400 naming %s", tc.body, code, out, tc.field)
		}
	}
	if st := s.state(t, "fast"); granted(st) != 0 || waiting(st) != 0 {
		t.Fatalf("after bad input: %v", st)
	}
}

// TestCustomersApart: no two (tenant, key) pairs share a queue.
func TestCustomersApart(t *testing.T) {
	seen := map[string][2]string{}
	for _, p := range [][2]string{{"a", "bc"}, {"ab", "c"}, {"a.b", "c"}, {"a", ".bc"}, {"", "abc"}} {
		c := string(customerOf(p[0], p[1]))
		if q, dup := seen[c]; dup {
			t.Fatalf("%v and %v share customer %q", p, q, c)
		}
		seen[c] = p
		if tenant, key := splitCustomer(fairshare.Customer(c)); tenant != p[0] || key != p[1] {
			t.Errorf("%v split into %q, %q", p, tenant, key)
		}
	}
}

func decodeBody(t *testing.T, resp *http.Response) map[string]any {
	t.Helper()
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("response is not JSON: %v", err)
	}
	return out
}

func withConfig(o tenancy.Options, cfg *config.Config) tenancy.Options {
	o.Config, o.AdminKey = func() *config.Config { return cfg }, adminKey
	return o
}
