package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/tenancy"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

type fixture struct {
	srv   *httptest.Server
	eng   *engine.Engine
	clock *clock
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	s := memstore.New(memstore.Options{})
	c := &clock{t: time.Date(2026, 11, 21, 10, 0, 15, 250_000_000, time.UTC)}
	eng := engine.New(s, engine.Options{Now: c.now})
	srv := httptest.NewServer(New(Options{Limiter: eng, Tenancy: newTenancy(tenancy.Options{Now: c.now}), Now: c.now}))
	t.Cleanup(func() { srv.Close(); s.Close() })
	return &fixture{srv: srv, eng: eng, clock: c}
}

func (f *fixture) post(t *testing.T, path, body string) (*http.Response, map[string]any) {
	t.Helper()
	resp, err := http.Post(f.srv.URL+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("response is not JSON: %v: %s", err, b)
	}
	return resp, out
}

const chat = `{"tenant":"acme","checks":[{"key":"user-1","policy":{"name":"chat","algorithm":"fixed_window","limit":3,"window":"60s"}}]}`

func TestCheckAllowsThenLimits(t *testing.T) {
	f := newFixture(t)
	for i := range 3 {
		resp, body := f.post(t, "/v1/check", chat)
		if resp.StatusCode != 200 || body["allowed"] != true {
			t.Fatalf("request %d: %d %v", i, resp.StatusCode, body)
		}
		if got := resp.Header.Get("X-RateLimit-Remaining"); got != strconv.Itoa(2-i) {
			t.Fatalf("request %d: X-RateLimit-Remaining %q", i, got)
		}
		if resp.Header.Get("Retry-After") != "" {
			t.Fatalf("request %d: Retry-After on an allowed request", i)
		}
	}
	resp, body := f.post(t, "/v1/check", chat)
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("fourth request: %d %v", resp.StatusCode, body)
	}
	// The window ends at 10:01:00; now is 10:00:15.25, so the real wait is
	// 44.75s and Retry-After rounds it up to 45, never down.
	if got := resp.Header.Get("Retry-After"); got != "45" {
		t.Fatalf("Retry-After %q, want 45", got)
	}
	reset := time.Date(2026, 11, 21, 10, 1, 0, 0, time.UTC).Unix()
	if got := resp.Header.Get("X-RateLimit-Reset"); got != strconv.FormatInt(reset, 10) {
		t.Fatalf("X-RateLimit-Reset %q, want %d", got, reset)
	}
	if body["message"] != "Too many requests. Please try again in 45 seconds." || body["error"] != "Rate limit exceeded" {
		t.Fatalf("429 body %v", body)
	}
	if v, _ := body["violated-policies"].([]any); len(v) != 1 || v[0] != "chat" {
		t.Fatalf("violated-policies %v", body["violated-policies"])
	}
}

func TestRetryAfterNeverEarly(t *testing.T) {
	f := newFixture(t)
	tb := `{"tenant":"acme","checks":[{"policy":{"name":"tb","algorithm":"token_bucket","limit":3,"window":"10s","burst":1}}]}`
	denied := 0
	for _, step := range []time.Duration{0, time.Millisecond, 999 * time.Millisecond, 2 * time.Second, 1} {
		f.clock.t = f.clock.t.Add(step)
		resp, body := f.post(t, "/v1/check", tb)
		if resp.StatusCode != 429 {
			continue
		}
		denied++
		secs, err := strconv.Atoi(resp.Header.Get("Retry-After"))
		if err != nil {
			t.Fatal(err)
		}
		real := time.Duration(body["retryAfterMs"].(float64)) * time.Millisecond
		if time.Duration(secs)*time.Second < real || time.Duration(secs-1)*time.Second >= real {
			t.Fatalf("Retry-After %ds for a real wait of %v", secs, real)
		}
		// Waiting exactly Retry-After is enough.
		f.clock.t = f.clock.t.Add(time.Duration(secs) * time.Second)
		if resp, _ := f.post(t, "/v1/check", tb); resp.StatusCode != 200 {
			t.Fatalf("denied again after waiting Retry-After %ds", secs)
		}
	}
	if denied < 3 {
		t.Fatalf("only %d of 5 requests denied: the test checked too little", denied)
	}
}

func TestMultiPolicyDenialChangesNothing(t *testing.T) {
	f := newFixture(t)
	both := `{"tenant":"acme","hits":2,"checks":[
		{"key":"t","policy":{"name":"tenant-minute","algorithm":"sliding_window","limit":10,"window":60}},
		{"key":"s","policy":{"name":"session-minute","algorithm":"fixed_window","limit":3,"window":"1m"}}]}`
	if resp, _ := f.post(t, "/v1/check", both); resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	resp, body := f.post(t, "/v1/check", both)
	if resp.StatusCode != 429 || body["policy"] != "session-minute" {
		t.Fatalf("%d %v", resp.StatusCode, body)
	}
	ds := body["decisions"].([]any)
	if r := ds[0].(map[string]any)["remaining"]; r != 8.0 {
		t.Fatalf("tenant-minute remaining %v after the denial, want 8", r)
	}
}

func TestBadInput(t *testing.T) {
	f := newFixture(t)
	policy := `{"name":"chat","algorithm":"fixed_window","limit":3,"window":"60s"}`
	cases := []struct {
		name, body, field string
	}{
		{"malformed", `{"tenant":"acme",`, "body"},
		{"not an object", `[1,2]`, "body"},
		{"empty", ``, "body"},
		{"trailing data", `{"tenant":"acme","checks":[{"policy":` + policy + `}]} {}`, "body"},
		{"unknown field", `{"tenant":"acme","checks":[{"policy":` + policy + `}],"hitz":1}`, "hitz"},
		{"missing tenant", `{"checks":[{"policy":` + policy + `}]}`, "tenant"},
		{"tenant not a string", `{"tenant":5,"checks":[{"policy":` + policy + `}]}`, "tenant"},
		{"no checks", `{"tenant":"acme","checks":[]}`, "checks"},
		{"missing policy", `{"tenant":"acme","checks":[{"key":"k"}]}`, "checks[0].policy"},
		{"unknown algorithm", `{"tenant":"acme","checks":[{"policy":{"name":"x","algorithm":"leaky","limit":3,"window":"60s"}}]}`, "checks[0].policy.algorithm"},
		{"missing algorithm", `{"tenant":"acme","checks":[{"policy":{"name":"x","limit":3,"window":"60s"}}]}`, "checks[0].policy.algorithm"},
		{"zero limit", `{"tenant":"acme","checks":[{"policy":{"name":"x","algorithm":"fixed_window","limit":0,"window":"60s"}}]}`, "checks[0].policy.limit"},
		{"negative limit", `{"tenant":"acme","checks":[{"policy":{"name":"x","algorithm":"fixed_window","limit":-1,"window":"60s"}}]}`, "checks[0].policy.limit"},
		{"limit not a number", `{"tenant":"acme","checks":[{"policy":{"name":"x","algorithm":"fixed_window","limit":"3","window":"60s"}}]}`, "checks[0].policy.limit"},
		{"zero window", `{"tenant":"acme","checks":[{"policy":{"name":"x","algorithm":"fixed_window","limit":3,"window":0}}]}`, "checks[0].policy.window"},
		{"negative window", `{"tenant":"acme","checks":[{"policy":{"name":"x","algorithm":"fixed_window","limit":3,"window":"-1s"}}]}`, "checks[0].policy.window"},
		{"bad window", `{"tenant":"acme","checks":[{"policy":{"name":"x","algorithm":"fixed_window","limit":3,"window":"a minute"}}]}`, "checks[0].policy.window"},
		{"negative hits", `{"tenant":"acme","hits":-1,"checks":[{"policy":` + policy + `}]}`, "hits"},
		{"hits over capacity", `{"tenant":"acme","hits":4,"checks":[{"policy":` + policy + `}]}`, "checks[0].hits"},
		{"key over 1 KiB", `{"tenant":"acme","checks":[{"key":"` + strings.Repeat("k", 1025) + `","policy":` + policy + `}]}`, "checks[0].key"},
		{"second check bad", `{"tenant":"acme","checks":[{"policy":` + policy + `},{"policy":{"name":"y","algorithm":"token_bucket","limit":3,"window":"1s","burst":-2}}]}`, "checks[1].policy.burst"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := f.post(t, "/v1/check", tc.body)
			if resp.StatusCode != 400 || body["error"] != "invalid_request" || body["field"] != tc.field {
				t.Fatalf("got %d %v, want 400 naming %q", resp.StatusCode, body, tc.field)
			}
			if msg, _ := body["message"].(string); !strings.HasPrefix(msg, tc.field) {
				t.Fatalf("message %q does not start with the field %q", msg, tc.field)
			}
		})
	}
	// Nothing was counted: the chat policy of acme still has all 3.
	p := sluice.Policy{Name: "chat", Algorithm: sluice.FixedWindow, Limit: 3, Window: time.Minute}
	for _, key := range []string{"", "k"} {
		d, err := f.eng.Allow(context.Background(), "acme", &p, key, 0)
		if err != nil || d.Remaining != 3 {
			t.Fatalf("key %q after bad requests: %+v %v", key, d, err)
		}
	}
}

func TestRoutes(t *testing.T) {
	f := newFixture(t)
	resp, err := http.Get(f.srv.URL + "/v1/check")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 || resp.Header.Get("Allow") != "POST" {
		t.Fatalf("GET /v1/check: %d Allow=%q", resp.StatusCode, resp.Header.Get("Allow"))
	}
	resp, body := f.post(t, "/v1/nope", `{}`)
	if resp.StatusCode != 404 || body["error"] != "not_found" {
		t.Fatalf("unknown route: %d %v", resp.StatusCode, body)
	}
	resp, err = http.Get(f.srv.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("healthz: %d", resp.StatusCode)
	}
}

func TestLeaseInResponse(t *testing.T) {
	f := newFixture(t)
	resp, body := f.post(t, "/v1/check", `{"tenant":"acme","checks":[{"policy":{"name":"jobs","algorithm":"concurrency","limit":2,"leaseTTL":"30s"}}]}`)
	if resp.StatusCode != 200 {
		t.Fatal(resp.Status, body)
	}
	lease := body["decisions"].([]any)[0].(map[string]any)["lease"].(map[string]any)
	if _, err := strconv.ParseUint(lease["id"].(string), 10, 64); err != nil {
		t.Fatalf("lease id %v: %v", lease["id"], err)
	}
	if got, want := int64(lease["expiresAtMs"].(float64)), f.clock.t.Add(30*time.Second).UnixMilli(); got != want {
		t.Fatalf("lease expires %d, want %d", got, want)
	}
}

// TestStoreFailureFollowsFailMode: with the store gone, a fail-open policy
// answers 200 (marked failedOpen) and a fail-closed one 503 with
// Retry-After: a fault, never a limit (429) that nobody reached.
func TestStoreFailureFollowsFailMode(t *testing.T) {
	s := memstore.New(memstore.Options{})
	srv := httptest.NewServer(New(Options{Limiter: engine.New(s, engine.Options{}), Tenancy: newTenancy(tenancy.Options{})}))
	defer srv.Close()
	s.Close()
	for _, tc := range []struct {
		mode   string
		status int
	}{{"open", 200}, {"closed", 503}} {
		body := `{"tenant":"acme","checks":[{"policy":{"name":"p","algorithm":"fixed_window","limit":3,"window":"60s","failMode":"` + tc.mode + `"}}]}`
		resp, err := http.Post(srv.URL+"/v1/check", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var out map[string]any
		json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Fatalf("fail %s: %d %v", tc.mode, resp.StatusCode, out)
		}
		if tc.mode == "open" && out["failedOpen"] != true {
			t.Fatalf("fail open not marked: %v", out)
		}
		if tc.mode == "closed" && (out["error"] != "unavailable" || resp.Header.Get("Retry-After") != "1") {
			t.Fatalf("fail closed: %v, Retry-After %q", out, resp.Header.Get("Retry-After"))
		}
	}
}

// TestCheckRouteAsTheMux: POST /v1/check, served without the mux, is
// answered as through it, with the pattern it sets; any other spelling of
// the path goes through the mux.
func TestCheckRouteAsTheMux(t *testing.T) {
	s := memstore.New(memstore.Options{})
	defer s.Close()
	c := &clock{t: time.Date(2026, 11, 21, 10, 0, 15, 0, time.UTC)}
	// httptest's requests name example.com.
	h := New(Options{Limiter: engine.New(s, engine.Options{Now: c.now}), Tenancy: newTenancy(tenancy.Options{Now: c.now}), Now: c.now, AllowedHosts: []string{"example.com"}})
	for i, target := range []string{"/v1/check", "http://example.com/v1/check", "/v1/%63heck", "/v1//check", "/v1/check/", "/v1/check?x=1"} {
		serve := func(key string, fn http.HandlerFunc) (*httptest.ResponseRecorder, string) {
			body := `{"checks":[{"key":"` + key + `","policy":{"name":"p","algorithm":"fixed_window","limit":9,"window":"1m"}}]}`
			r := httptest.NewRequest(http.MethodPost, target, strings.NewReader(body))
			w := httptest.NewRecorder()
			fn(w, r)
			return w, r.Pattern
		}
		got, pattern := serve(fmt.Sprint("a", i), h.ServeHTTP)
		want, wantPattern := serve(fmt.Sprint("b", i), func(w http.ResponseWriter, r *http.Request) {
			if _, p := h.mux.Handler(r); p == "" {
				h.ServeHTTP(w, r) // our 404 or 405
				return
			}
			h.mux.ServeHTTP(w, r)
		})
		if got.Code != want.Code || pattern != wantPattern || got.Body.String() != want.Body.String() || !reflect.DeepEqual(got.Header(), want.Header()) {
			t.Errorf("POST %s: %d %q %v %s, through the mux: %d %q %v %s", target, got.Code, pattern, got.Header(), got.Body, want.Code, wantPattern, want.Header(), want.Body)
		}
	}
}

// TestCheckCannotBurn: a client cannot make a check burn its hits
// (sluice.Check.Burn): a body naming it is refused and counts nothing,
// and a denied check adds nothing.
func TestCheckCannotBurn(t *testing.T) {
	f := newFixture(t)
	pol := `{"name":"chat","algorithm":"fixed_window","limit":3,"window":"60s"}`
	for _, body := range []string{
		`{"tenant":"acme","hits":3,"checks":[{"key":"u","policy":` + pol + `,"burn":true}]}`,
		`{"tenant":"acme","hits":3,"burn":true,"checks":[{"key":"u","policy":` + pol + `}]}`,
		`{"tenant":"acme","hits":3,"checks":[{"key":"u","policy":{"name":"chat","algorithm":"fixed_window","limit":3,"window":"60s","burn":true}}]}`,
	} {
		if resp, out := f.post(t, "/v1/check", body); resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("%s: %d %v, want 400", body, resp.StatusCode, out)
		}
	}
	plain := `{"tenant":"acme","hits":%d,"checks":[{"key":"u","policy":` + pol + `}]}`
	for i, hits := range []int{2, 2, 0} {
		resp, out := f.post(t, "/v1/check", fmt.Sprintf(plain, hits))
		// 2 of 3 admitted, 2 more denied and not added: 1 left.
		if want := []int{200, 429, 200}[i]; resp.StatusCode != want || resp.Header.Get("X-RateLimit-Remaining") != "1" {
			t.Fatalf("request %d: %d %v, want %d with 1 left", i, resp.StatusCode, out, want)
		}
	}
}
