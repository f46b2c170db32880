package httpapi

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/tenancy"
)

const adminKey = "admin-secret-for-tests"

// service is a server with the example configuration, an admin key, and two
// tenants, acme and beta, each with an API key.
type service struct {
	srv        *httptest.Server
	clock      *clock
	acme, beta string // API keys
}

func newService(t *testing.T) *service {
	t.Helper()
	cfg, err := config.Load("../examples/sluice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := memstore.New(memstore.Options{})
	c := &clock{t: time.Date(2026, 11, 21, 10, 0, 15, 0, time.UTC)}
	h := New(Options{
		Limiter: engine.New(s, engine.Options{Now: c.now}),
		Tenancy: newTenancy(tenancy.Options{Config: func() *config.Config { return cfg }, AdminKey: adminKey, Now: c.now}),
		Now:     c.now,
	})
	srv := httptest.NewServer(h)
	t.Cleanup(func() { srv.Close(); s.Close() })
	sv := &service{srv: srv, clock: c}
	for _, id := range []string{"acme", "beta"} {
		if code, body := sv.do(t, adminKey, "POST", "/v1/tenants", `{"id":"`+id+`"}`); code != 201 {
			t.Fatalf("create %s: %d %v", id, code, body)
		}
		code, body := sv.do(t, adminKey, "POST", "/v1/tenants/"+id+"/keys", `{"name":"test"}`)
		if code != 201 {
			t.Fatalf("key for %s: %d %v", id, code, body)
		}
		if id == "acme" {
			sv.acme = body["token"].(string)
		} else {
			sv.beta = body["token"].(string)
		}
	}
	return sv
}

func (s *service) request(t *testing.T, key, method, path, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, s.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func (s *service) do(t *testing.T, key, method, path, body string) (int, map[string]any) {
	t.Helper()
	resp := s.request(t, key, method, path, body)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%s %s: not JSON: %s", method, path, b)
	}
	return resp.StatusCode, out
}

func TestNamedCheck(t *testing.T) {
	s := newService(t)
	body := `{"endpoint":"models","key":{"user":"u1"}}`
	for i := range 10 {
		if code, out := s.do(t, s.beta, "POST", "/v1/check", body); code != 200 {
			t.Fatalf("request %d: %d %v", i, code, out)
		}
	}
	code, out := s.do(t, s.beta, "POST", "/v1/check", body)
	if code != 429 || out["limit"] != 10.0 || out["message"] != "Too many requests. Please try again in 45 seconds." {
		t.Fatalf("eleventh: %d %v", code, out)
	}
	// Another user has their own counter; a missing key part is named.
	if code, _ := s.do(t, s.beta, "POST", "/v1/check", `{"endpoint":"models","key":{"user":"u2"}}`); code != 200 {
		t.Fatalf("user u2: %d", code)
	}
	if code, out := s.do(t, s.beta, "POST", "/v1/check", `{"endpoint":"models"}`); code != 400 || out["field"] != "key.user" {
		t.Fatalf("no user: %d %v", code, out)
	}
	if code, out := s.do(t, s.beta, "POST", "/v1/check", `{"endpoint":"nope","key":{"user":"u"}}`); code != 400 || out["field"] != "endpoint" {
		t.Fatalf("unknown endpoint: %d %v", code, out)
	}
	if code, out := s.do(t, s.beta, "POST", "/v1/check", `{"policies":["chat","nope"],"key":{"user":"u"}}`); code != 400 || out["field"] != "policies[1]" {
		t.Fatalf("unknown policy: %d %v", code, out)
	}
}

// TestTierAndOverrides: a tenant's tier and store overrides change its
// limits; the admin API sets them.
func TestTierAndOverrides(t *testing.T) {
	s := newService(t)
	if code, out := s.do(t, adminKey, "PUT", "/v1/tenants/beta", `{"tier":"premium","overrides":{"models":{"limit":2}}}`); code != 200 {
		t.Fatalf("put: %d %v", code, out)
	}
	limit := func(endpoint string) float64 {
		_, out := s.do(t, s.beta, "POST", "/v1/check", `{"endpoint":"`+endpoint+`","key":{"user":"u"},"hits":0}`)
		return out["limit"].(float64)
	}
	if got := limit("chat"); got != 100 {
		t.Errorf("premium chat limit %v, want 100", got)
	}
	if got := limit("models"); got != 2 {
		t.Errorf("overridden models limit %v, want 2", got)
	}
	if code, out := s.do(t, adminKey, "PUT", "/v1/tenants/beta", `{"tier":"platinum"}`); code != 400 || out["field"] != "tier" {
		t.Fatalf("unknown tier: %d %v", code, out)
	}
}

// TestHeaderSyntax parses the IETF headers with a Structured Fields parser.
func TestHeaderSyntax(t *testing.T) {
	s := newService(t)
	resp := s.request(t, s.acme, "POST", "/v1/check", `{"endpoint":"search","key":{"user":"u1"},"hits":4}`)
	resp.Body.Close()
	pol, err := httpsfv.UnmarshalList(resp.Header.Values("RateLimit-Policy"))
	if err != nil {
		t.Fatalf("RateLimit-Policy %q: %v", resp.Header.Get("RateLimit-Policy"), err)
	}
	rl, err := httpsfv.UnmarshalList(resp.Header.Values("RateLimit"))
	if err != nil {
		t.Fatalf("RateLimit %q: %v", resp.Header.Get("RateLimit"), err)
	}
	if len(pol) != 2 || len(rl) != 2 {
		t.Fatalf("%d policy items, %d ratelimit items, want 2 each", len(pol), len(rl))
	}
	want := []struct {
		name    string
		q, w, r int64
	}{{"search-per-second", 10, 1, 6}, {"search-per-hour", 1000, 3600, 996}}
	for i, wnt := range want {
		p := pol[i].(httpsfv.Item)
		r := rl[i].(httpsfv.Item)
		if p.Value != wnt.name || r.Value != wnt.name {
			t.Errorf("item %d named %v / %v, want %q", i, p.Value, r.Value, wnt.name)
		}
		if q, _ := p.Params.Get("q"); q != wnt.q {
			t.Errorf("%s q=%v, want %d", wnt.name, q, wnt.q)
		}
		if w, _ := p.Params.Get("w"); w != wnt.w {
			t.Errorf("%s w=%v, want %d", wnt.name, w, wnt.w)
		}
		if got, _ := r.Params.Get("r"); got != wnt.r {
			t.Errorf("%s r=%v, want %d", wnt.name, got, wnt.r)
		}
		if tt, ok := r.Params.Get("t"); !ok || tt.(int64) < 0 {
			t.Errorf("%s t=%v", wnt.name, tt)
		}
	}
	// The legacy headers report the policy with the fewest remaining.
	if resp.Header.Get("X-RateLimit-Remaining") != "6" || resp.Header.Get("X-RateLimit-Limit") != "10" {
		t.Errorf("legacy headers %v", resp.Header)
	}
}

func TestAuth(t *testing.T) {
	s := newService(t)
	for _, key := range []string{"", "wrong", "sk_nope.nope.nope", "sk_acme.x.y", s.acme + "x", strings.Replace(s.acme, "sk_acme.", "sk_beta.", 1)} {
		resp := s.request(t, key, "POST", "/v1/check", `{"endpoint":"chat","key":{"user":"u"}}`)
		resp.Body.Close()
		if resp.StatusCode != 401 || resp.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("key %q: %d", key, resp.StatusCode)
		}
	}
	// A deleted key stops working.
	code, out := s.do(t, s.acme, "GET", "/v1/tenants/acme/keys", "")
	if code != 200 {
		t.Fatal(code, out)
	}
	id := out["keys"].([]any)[0].(map[string]any)["id"].(string)
	if code, _ := s.do(t, adminKey, "DELETE", "/v1/tenants/acme/keys/"+id, ""); code != 200 {
		t.Fatal(code)
	}
	if code, _ := s.do(t, s.acme, "GET", "/v1/tenants/acme", ""); code != 401 {
		t.Fatalf("deleted key: %d", code)
	}
}

// TestCrossTenantRefused: acme's key reaches none of beta's data, on any
// route, and no admin route; and nothing is counted for beta.
func TestCrossTenantRefused(t *testing.T) {
	s := newService(t)
	// beta takes a lease, so that there is one to reach for.
	code, out := s.do(t, s.beta, "POST", "/v1/leases", `{"policy":"reports-running"}`)
	if code != 200 {
		t.Fatalf("beta's lease: %d %v", code, out)
	}
	token := out["lease"].(map[string]any)["token"].(string)
	code, out = s.do(t, s.beta, "GET", "/v1/tenants/beta/keys", "")
	if code != 200 {
		t.Fatal(code, out)
	}
	betaKey := out["keys"].([]any)[0].(map[string]any)["id"].(string)

	routes := []struct{ method, path, body string }{
		{"POST", "/v1/check", `{"tenant":"beta","endpoint":"chat","key":{"user":"u"}}`},
		{"POST", "/v1/check", `{"tenant":"beta","checks":[{"policy":{"name":"x","algorithm":"fixed_window","limit":1,"window":"1m"}}]}`},
		{"POST", "/v1/leases", `{"tenant":"beta","policy":"reports-running"}`},
		{"POST", "/v1/leases/" + token + "/renew", `{"tenant":"beta","policy":"reports-running"}`},
		{"DELETE", "/v1/leases/" + token, `{"tenant":"beta","policy":"reports-running"}`},
		{"GET", "/v1/tenants/beta", ""},
		{"PUT", "/v1/tenants/beta", `{"tier":"premium"}`},
		{"DELETE", "/v1/tenants/beta", ""},
		{"POST", "/v1/tenants", `{"id":"gamma"}`},
		{"POST", "/v1/tenants/beta/keys", `{}`},
		{"GET", "/v1/tenants/beta/keys", ""},
		{"DELETE", "/v1/tenants/beta/keys/" + betaKey, ""},
		{"PUT", "/v1/tenants/acme", `{"tier":"premium"}`}, // its own, but admin only
		{"PUT", "/v1/tenants/beta/sessions", ""},
	}
	for _, rt := range routes {
		if code, out := s.do(t, s.acme, rt.method, rt.path, rt.body); code != 403 {
			t.Errorf("acme: %s %s: %d %v, want 403", rt.method, rt.path, code, out)
		}
	}
	// Listing shows acme only its own tenant.
	_, out = s.do(t, s.acme, "GET", "/v1/tenants", "")
	if ts := out["tenants"].([]any); len(ts) != 1 || ts[0].(map[string]any)["id"] != "acme" {
		t.Errorf("acme lists %v", ts)
	}
	// beta's lease, key and tenant are untouched.
	if code, out := s.do(t, s.beta, "POST", "/v1/leases/"+token+"/renew", `{"policy":"reports-running"}`); code != 200 {
		t.Errorf("beta's lease after acme's attempts: %d %v", code, out)
	}
	if code, _ := s.do(t, s.beta, "GET", "/v1/tenants/beta", ""); code != 200 {
		t.Errorf("beta after acme's attempts: %d", code)
	}
	if code, out := s.do(t, s.beta, "POST", "/v1/check", `{"endpoint":"chat","key":{"user":"u"},"hits":0}`); code != 200 || out["remaining"] != 20.0 {
		t.Errorf("beta's chat counter after acme's attempts: %d %v", code, out)
	}
}

func TestLeases(t *testing.T) {
	s := newService(t)
	var tokens []string
	for i := range 5 {
		code, out := s.do(t, s.acme, "POST", "/v1/leases", `{"policy":"reports-running"}`)
		if code != 200 {
			t.Fatalf("lease %d: %d %v", i, code, out)
		}
		tokens = append(tokens, out["lease"].(map[string]any)["token"].(string))
	}
	code, out := s.do(t, s.acme, "POST", "/v1/leases", `{"policy":"reports-running"}`)
	if code != 429 {
		t.Fatalf("sixth lease of 5: %d %v", code, out)
	}
	if code, out := s.do(t, s.acme, "DELETE", "/v1/leases/"+tokens[0], `{"policy":"reports-running"}`); code != 200 || out["remaining"] != 1.0 {
		t.Fatalf("release: %d %v", code, out)
	}
	if code, _ := s.do(t, s.acme, "DELETE", "/v1/leases/"+tokens[0], `{"policy":"reports-running"}`); code != 404 {
		t.Fatalf("second release: %d", code)
	}
	// Unrenewed leases return their units at expiry (5 minutes).
	s.clock.t = s.clock.t.Add(4 * time.Minute)
	if code, out := s.do(t, s.acme, "POST", "/v1/leases/"+tokens[1]+"/renew", `{"policy":"reports-running"}`); code != 200 {
		t.Fatalf("renew: %d %v", code, out)
	}
	s.clock.t = s.clock.t.Add(2 * time.Minute)
	code, out = s.do(t, s.acme, "POST", "/v1/leases", `{"policy":"reports-running","units":4}`)
	if code != 200 {
		t.Fatalf("after expiry, 4 of the 5 units should be free: %d %v", code, out)
	}
	if code, out := s.do(t, s.acme, "POST", "/v1/leases", `{"policy":"chat","key":{"user":"u"}}`); code != 400 || out["field"] != "policy" {
		t.Fatalf("lease of a window policy: %d %v", code, out)
	}
	if code, out := s.do(t, s.acme, "DELETE", "/v1/leases/garbage!", `{"policy":"reports-running"}`); code != 400 || out["field"] != "token" {
		t.Fatalf("bad token: %d %v", code, out)
	}
}

// TestLeaseTokensUnforgeable: a lease token names its lease only for the
// tenant and the policy it was made for; another tenant's key, another
// policy, a changed byte or a token made up from a guessed lease id release
// nothing.
func TestLeaseTokensUnforgeable(t *testing.T) {
	s := newService(t)
	inline := `{"policy":{"name":"jobs","algorithm":"concurrency","limit":1,"leaseTTL":"1h"},"keyValue":"k"}`
	code, out := s.do(t, s.acme, "POST", "/v1/leases", inline)
	if code != 200 {
		t.Fatalf("lease: %d %v", code, out)
	}
	lease := out["lease"].(map[string]any)
	tok := lease["token"].(string)
	id, _ := strconv.ParseUint(lease["id"].(string), 10, 64)
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		t.Fatal(err)
	}
	flipped := append([]byte{}, raw...)
	flipped[len(flipped)/2] ^= 1
	// What the unsigned tokens were: policy, key and id, length-prefixed.
	guessed := binary.AppendUvarint(nil, 4)
	guessed = append(guessed, "jobs"...)
	guessed = binary.AppendUvarint(guessed, 1)
	guessed = append(guessed, 'k')
	guessed = binary.AppendUvarint(guessed, id)
	for _, tc := range []struct {
		name, key, token, body string
	}{
		{"another tenant's key", s.beta, tok, inline},
		{"another tenant named by the admin", adminKey, tok, `{"tenant":"beta","policy":{"name":"jobs","algorithm":"concurrency","limit":1,"leaseTTL":"1h"}}`},
		{"another policy", s.acme, tok, `{"policy":{"name":"jobs2","algorithm":"concurrency","limit":1,"leaseTTL":"1h"}}`},
		{"a changed byte", s.acme, base64.RawURLEncoding.EncodeToString(flipped), inline},
		{"a guessed id", s.acme, base64.RawURLEncoding.EncodeToString(guessed), inline},
	} {
		if code, out := s.do(t, tc.key, "DELETE", "/v1/leases/"+tc.token, tc.body); code != 400 || out["field"] != "token" {
			t.Errorf("%s: release answered %d %v, want 400 naming the token", tc.name, code, out)
		}
	}
	// The lease is still held: a second one is refused; its own token
	// releases it.
	if code, _ := s.do(t, s.acme, "POST", "/v1/leases", inline); code != 429 {
		t.Fatalf("second lease of 1 after the forgeries: %d, want 429", code)
	}
	if code, out := s.do(t, s.acme, "DELETE", "/v1/leases/"+tok, inline); code != 200 {
		t.Fatalf("release with the real token: %d %v", code, out)
	}
}

func TestTenantsAPI(t *testing.T) {
	s := newService(t)
	body := `{"id":"gamma","tier":"premium","settings":{"connectionsPerSession":2,"tenantConnections":10,"sessionPerMinute":5,"tenantPerMinute":50,"sessionTTL":300,"messagesPerMinute":600},"overrides":{"chat":{"limit":7,"window":"2m"}}}`
	code, out := s.do(t, adminKey, "POST", "/v1/tenants", body)
	if code != 201 || out["id"] != "gamma" {
		t.Fatalf("create: %d %v", code, out)
	}
	if code, _ := s.do(t, adminKey, "POST", "/v1/tenants", body); code != 409 {
		t.Fatalf("create twice: %d", code)
	}
	code, out = s.do(t, adminKey, "GET", "/v1/tenants/gamma", "")
	if code != 200 || out["settings"].(map[string]any)["messagesPerMinute"] != 600.0 || out["overrides"].(map[string]any)["chat"].(map[string]any)["window"] != "2m0s" {
		t.Fatalf("get: %d %v", code, out)
	}
	for _, bad := range []struct{ body, field string }{
		{`{"id":"bad id"}`, "id"},
		{`{"id":"x","settings":{"sessionTTL":-1}}`, "settings.sessionTTL"},
		{`{"id":"x","overrides":{"nope":{"limit":1}}}`, "overrides.nope"},
		{`{"id":"x","overrides":{"chat":{"window":"soon"}}}`, "overrides.chat.window"},
		{`{"id":"x","colour":"red"}`, "colour"},
	} {
		if code, out := s.do(t, adminKey, "POST", "/v1/tenants", bad.body); code != 400 || out["field"] != bad.field {
			t.Errorf("%s: %d %v, want 400 naming %s", bad.body, code, out, bad.field)
		}
	}
	if code, _ := s.do(t, adminKey, "DELETE", "/v1/tenants/gamma", ""); code != 200 {
		t.Fatal(code)
	}
	if code, _ := s.do(t, adminKey, "GET", "/v1/tenants/gamma", ""); code != 404 {
		t.Fatalf("deleted: %d", code)
	}
}

func TestPoliciesRoute(t *testing.T) {
	s := newService(t)
	code, out := s.do(t, s.acme, "GET", "/v1/policies", "")
	if code != 200 {
		t.Fatal(code, out)
	}
	ps := out["policies"].([]any)
	if len(ps) != 11 {
		t.Fatalf("%d policies, want the example's 11", len(ps))
	}
	first := ps[0].(map[string]any)
	if first["name"] != "admin" || first["limit"] != 30.0 || first["window"] != "1m0s" || first["failMode"] != "open" {
		t.Fatalf("first policy %v", first)
	}
	if eps := out["endpoints"].(map[string]any); len(eps["search"].([]any)) != 2 {
		t.Fatalf("endpoints %v", eps)
	}
}

// TestPenaltyOverHTTP: an inline policy with a penalty blocks a repeat
// offender past its window, with the block's Retry-After.
func TestPenaltyOverHTTP(t *testing.T) {
	s := newService(t)
	body := `{"tenant":"acme","checks":[{"key":"1.2.3.4","policy":{"name":"login","algorithm":"fixed_window","limit":1,"window":"1s","penalty":{"after":2,"base":"1m","max":"1h"}}}]}`
	for i, want := range []int{200, 429, 429} {
		if code, out := s.do(t, s.acme, "POST", "/v1/check", body); code != want {
			t.Fatalf("request %d: %d %v", i, code, out)
		}
	}
	s.clock.t = s.clock.t.Add(5 * time.Second)
	resp := s.request(t, s.acme, "POST", "/v1/check", body)
	resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "55" {
		t.Fatalf("boxed: %d Retry-After %q, want 429 with 55", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}

// TestBadInputNamesTheRightField covers the routes beyond /v1/check's own
// table.
func TestBadInputNamesTheRightField(t *testing.T) {
	s := newService(t)
	cases := []struct{ method, path, body, field string }{
		// An inline policy may not borrow a configured name: it would share,
		// and could reset, the configured policy's counters.
		{"POST", "/v1/check", `{"checks":[{"key":"k","policy":{"name":"models","algorithm":"sliding_window","limit":99,"window":"1m"}}]}`, "checks[0].policy.name"},
		{"POST", "/v1/check", `{"checks":[{"key":"k","policy":null}]}`, "checks[0].policy"},
		{"POST", "/v1/leases", `{"policy":"reports-running","units":6}`, "units"},
		{"POST", "/v1/leases", `{"policy":"reports-running","units":2000000000}`, "units"},
		{"POST", "/v1/leases", `{"policy":{"name":"x","algorithm":"concurrency","limit":0}}`, "policy.limit"},
		{"POST", "/v1/leases", `{"policy":{"name":"x","algorithm":"concurrency","limit":2},"keyValue":"` + strings.Repeat("k", 1025) + `"}`, "keyValue"},
		{"POST", "/v1/leases", `{"policy":null}`, "policy"},
		{"PUT", "/v1/tenants/acme", `{"overrides":{"search-per-hour":{"window":"7ms"}}}`, "overrides.search-per-hour.buckets"},
		{"PUT", "/v1/tenants/acme", `{"overrides":{"reports-running":{"limit":0}}}`, "overrides.reports-running.limit"},
		// Products are bounded before they are taken: this bucket's depth,
		// 18446744074ns * 1e9, wraps int64 nanoseconds.
		{"POST", "/v1/check", `{"checks":[{"policy":{"name":"tb","algorithm":"token_bucket","limit":1,"window":"18.446744074s","burst":1000000000}}]}`, "checks[0].policy.burst"},
		// Settings that would silently mean something else are refused.
		{"POST", "/v1/check", `{"checks":[{"policy":{"name":"tb","algorithm":"token_bucket","limit":5,"window":"1s","burst":0}}]}`, "checks[0].policy.burst"},
		{"POST", "/v1/check", `{"checks":[{"policy":{"name":"w","algorithm":"fixed_window","limit":5,"window":"1s","penalty":{"after":0,"base":"1m","max":"1h"}}}]}`, "checks[0].policy.penalty.after"},
		{"POST", "/v1/check", `{"checks":[{"policy":{"name":"w","algorithm":"fixed_window","limit":5,"window":"1s","penalty":{"base":"1m"}}}]}`, "checks[0].policy.penalty.after"},
		{"POST", "/v1/check", `{"checks":[{"policy":{"name":"w","algorithm":"fixed_window","limit":5,"window":"soon"}}]}`, "checks[0].policy.window"},
		{"PUT", "/v1/tenants/acme", `{"overrides":{"chat":{"burst":0}}}`, "overrides.chat.burst"},
		// A member given twice would silently keep the last.
		{"PUT", "/v1/tenants/acme", `{"overrides":{"chat":{"limit":5},"chat":{"limit":1000000000}}}`, "overrides.chat"},
		{"POST", "/v1/check", `{"hits":1,"hits":5,"checks":[{"policy":{"name":"w","algorithm":"fixed_window","limit":10,"window":"1m"}}]}`, "hits"},
		// Text that JSON would turn into U+FFFD, making two keys one.
		{"POST", "/v1/check", "{\"checks\":[{\"key\":\"\xff\",\"policy\":{\"name\":\"w\",\"algorithm\":\"fixed_window\",\"limit\":1,\"window\":\"1m\"}}]}", "checks[0].key"},
		{"POST", "/v1/check", `{"checks":[{"key":"a\ud800","policy":{"name":"w","algorithm":"fixed_window","limit":1,"window":"1m"}}]}`, "checks[0].key"},
		{"POST", "/v1/check", `{"checks":[{"key":"\udc00b","policy":{"name":"w","algorithm":"fixed_window","limit":1,"window":"1m"}}]}`, "checks[0].key"},
		{"POST", "/v1/check", "{\"endpoint\":\"models\",\"key\":{\"user\":\"\xfe\"}}", "key.user"},
		{"POST", "/v1/check", "{\"tenant\":\"acme\xff\",\"endpoint\":\"models\",\"key\":{\"user\":\"u\"}}", "tenant"},
		{"POST", "/v1/leases", "{\"policy\":{\"name\":\"x\",\"algorithm\":\"concurrency\",\"limit\":2},\"keyValue\":\"\xc3\"}", "keyValue"},
	}
	for _, tc := range cases {
		key := s.acme
		if tc.method == "PUT" {
			key = adminKey
		}
		if code, out := s.do(t, key, tc.method, tc.path, tc.body); code != 400 || out["field"] != tc.field {
			t.Errorf("%s %s %s: %d %v, want 400 naming %s", tc.method, tc.path, tc.body, code, out, tc.field)
		}
	}
	// Nothing was counted: all 5 of reports-running are free.
	if code, out := s.do(t, s.acme, "POST", "/v1/leases", `{"policy":"reports-running","units":5}`); code != 200 {
		t.Fatalf("after bad requests: %d %v", code, out)
	}
}

func TestSessionsAPI(t *testing.T) {
	s := newService(t)
	code, out := s.do(t, s.acme, "PUT", "/v1/tenants/acme/sessions", "")
	if code != 201 {
		t.Fatalf("create: %d %v", code, out)
	}
	id := out["id"].(string)
	if len(id) < 26 {
		t.Fatalf("session id %q: fewer than 128 bits", id)
	}
	// The tenant's sessionTTL: acme has none of its own, so the example's
	// default of 300 seconds.
	exp, _ := time.Parse(time.RFC3339Nano, out["expiresAt"].(string))
	if want := s.clock.t.Add(300 * time.Second); !exp.Equal(want) {
		t.Fatalf("expires %v, want %v", exp, want)
	}
	if code, _ := s.do(t, s.acme, "GET", "/v1/tenants/acme/sessions/"+id, ""); code != 200 {
		t.Fatalf("get: %d", code)
	}
	if code, _ := s.do(t, s.beta, "GET", "/v1/tenants/acme/sessions/"+id, ""); code != 403 {
		t.Fatalf("beta reading acme's session: %d", code)
	}
	if code, _ := s.do(t, s.beta, "DELETE", "/v1/tenants/acme/sessions/"+id, ""); code != 403 {
		t.Fatalf("beta deleting acme's session: %d", code)
	}
	if code, _ := s.do(t, s.acme, "DELETE", "/v1/tenants/acme/sessions/"+id, ""); code != 200 {
		t.Fatalf("delete: %d", code)
	}
	if code, _ := s.do(t, s.acme, "GET", "/v1/tenants/acme/sessions/"+id, ""); code != 404 {
		t.Fatalf("after delete: %d", code)
	}
	// Expiry: a session is gone at its expiry.
	_, out = s.do(t, s.acme, "PUT", "/v1/tenants/acme/sessions", "")
	s.clock.t = s.clock.t.Add(300 * time.Second)
	if code, _ := s.do(t, s.acme, "GET", "/v1/tenants/acme/sessions/"+out["id"].(string), ""); code != 404 {
		t.Fatalf("expired session: %d", code)
	}
	if code, _ := s.do(t, adminKey, "PUT", "/v1/tenants/ghost/sessions", ""); code != 404 {
		t.Fatalf("session of an unknown tenant: %d", code)
	}
}

// TestTenantDeletionEndsItsSessions: once a tenant is deleted, its sessions
// read 404, and the gateway is told to close its connections.
func TestTenantDeletionEndsItsSessions(t *testing.T) {
	cfg, err := config.Load("../examples/sluice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := memstore.New(memstore.Options{})
	defer s.Close()
	var closed []string
	tenants := newTenancy(tenancy.Options{Config: func() *config.Config { return cfg }})
	tenants.OnTenantDeleted(func(id string) { closed = append(closed, id) })
	h := New(Options{Limiter: engine.New(s, engine.Options{}), Tenancy: tenants})
	srv := httptest.NewServer(h)
	defer srv.Close()
	sv := &service{srv: srv}
	if code, out := sv.do(t, "", "POST", "/v1/tenants", `{"id":"gone"}`); code != 201 {
		t.Fatalf("create: %d %v", code, out)
	}
	code, out := sv.do(t, "", "PUT", "/v1/tenants/gone/sessions", "")
	if code != 201 {
		t.Fatalf("session: %d %v", code, out)
	}
	id := out["id"].(string)
	if code, out := sv.do(t, "", "DELETE", "/v1/tenants/gone", ""); code != 200 {
		t.Fatalf("delete: %d %v", code, out)
	}
	if code, out := sv.do(t, "", "GET", "/v1/tenants/gone/sessions/"+id, ""); code != 404 {
		t.Fatalf("a deleted tenant's session: %d %v, want 404", code, out)
	}
	if len(closed) != 1 || closed[0] != "gone" {
		t.Fatalf("the gateway was told of %v, want [gone]", closed)
	}

	// Made anew under the same id: the earlier tenant's sessions and lease
	// tokens are not the new one's.
	lease := `{"tenant":"gone","policy":{"name":"jobs","algorithm":"concurrency","limit":1,"leaseTTL":"1h"}}`
	if code, out := sv.do(t, "", "POST", "/v1/tenants", `{"id":"gone"}`); code != 201 {
		t.Fatalf("create: %d %v", code, out)
	}
	_, out = sv.do(t, "", "PUT", "/v1/tenants/gone/sessions", "")
	id = out["id"].(string)
	code, out = sv.do(t, "", "POST", "/v1/leases", lease)
	if code != 200 {
		t.Fatalf("lease: %d %v", code, out)
	}
	tok := out["lease"].(map[string]any)["token"].(string)
	sv.do(t, "", "DELETE", "/v1/tenants/gone", "")
	if code, out := sv.do(t, "", "POST", "/v1/tenants", `{"id":"gone"}`); code != 201 {
		t.Fatalf("create again: %d %v", code, out)
	}
	if code, out := sv.do(t, "", "GET", "/v1/tenants/gone/sessions/"+id, ""); code != 404 {
		t.Fatalf("an earlier tenant's session: %d %v, want 404", code, out)
	}
	if code, out := sv.do(t, "", "DELETE", "/v1/tenants/gone/sessions/"+id, ""); code != 404 {
		t.Fatalf("deleting an earlier tenant's session: %d %v, want 404", code, out)
	}
	if code, out := sv.do(t, "", "POST", "/v1/leases/"+tok+"/renew", lease); code != 400 || out["field"] != "token" {
		t.Fatalf("an earlier tenant's lease token: %d %v, want 400 naming the token", code, out)
	}
}
