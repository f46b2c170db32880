package httplimit_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/httpapi"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/tenancy"
)

// limiters returns the two ways a service can limit: in process, and
// through a real sluice server with the client.
func limiters(t *testing.T) map[string]sluice.Limiter {
	t.Helper()
	local := memstore.New(memstore.Options{})
	remote := memstore.New(memstore.Options{})
	srv := httptest.NewServer(httpapi.New(httpapi.Options{Limiter: engine.New(remote, engine.Options{}),
		Tenancy: tenancy.New(tenancy.Options{Store: &memstore.Tenants{}, Sessions: &memstore.Sessions{}, Audit: &memstore.Audit{}})}))
	t.Cleanup(func() { srv.Close(); local.Close(); remote.Close() })
	return map[string]sluice.Limiter{
		"engine": engine.New(local, engine.Options{}),
		"client": client.New(srv.URL, client.Options{}),
	}
}

// TestMiddleware: the same middleware, over either limiter, admits up to
// the limit per key, then answers 429 with headers and never calls the
// handler.
func TestMiddleware(t *testing.T) {
	for name, l := range limiters(t) {
		t.Run(name, func(t *testing.T) {
			calls := 0
			h := mustNew(t, httplimit.Options{
				Limiter:  l,
				Policies: []sluice.Policy{{Name: "api", Algorithm: sluice.FixedWindow, Limit: 3, Window: time.Hour}},
				Key:      httplimit.KeyFromHeader("X-User"),
			})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls++ }))
			srv := httptest.NewServer(h)
			defer srv.Close()
			get := func(user string) *http.Response {
				req, _ := http.NewRequest("GET", srv.URL, nil)
				if user != "" {
					req.Header.Set("X-User", user)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				return resp
			}
			for i := range 3 {
				resp := get("alice")
				if resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Remaining") != strconv.Itoa(2-i) || resp.Header.Get("RateLimit") == "" {
					t.Fatalf("request %d: %d %v", i, resp.StatusCode, resp.Header)
				}
			}
			resp := get("alice")
			if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
				t.Fatalf("fourth: %d %v", resp.StatusCode, resp.Header)
			}
			if calls != 3 {
				t.Fatalf("handler called %d times, want 3", calls)
			}
			if resp := get("bob"); resp.StatusCode != 200 {
				t.Fatalf("bob: %d", resp.StatusCode)
			}
			if resp := get(""); resp.StatusCode != 400 {
				t.Fatalf("no key: %d", resp.StatusCode)
			}
		})
	}
}

// TestClientErrorsKeepKindAndField: a bad request through the client comes
// back as the server's invalid-input error naming the field.
func TestClientErrorsKeepKindAndField(t *testing.T) {
	c := limiters(t)["client"]
	_, err := c.Check(t.Context(), sluice.Request{Tenant: "a", Hits: 1, Checks: []sluice.Check{{Policy: sluice.Policy{Name: "p", Algorithm: sluice.FixedWindow, Limit: 1, Window: time.Hour}, Key: string(make([]byte, 2000))}}})
	if sluice.KindOf(err) != sluice.KindInvalid || sluice.FieldOf(err) != "checks[0].key" {
		t.Fatalf("%v (kind %v field %q)", err, sluice.KindOf(err), sluice.FieldOf(err))
	}
}

// TestFailClosedIsUnavailable: with the store gone, a fail-closed policy
// answers 503 through the middleware, in process and over the network:
// a fault, never a 429 for a limit nobody reached.
func TestFailClosedIsUnavailable(t *testing.T) {
	local := memstore.New(memstore.Options{})
	remote := memstore.New(memstore.Options{})
	local.Close()
	remote.Close()
	srv := httptest.NewServer(httpapi.New(httpapi.Options{Limiter: engine.New(remote, engine.Options{}),
		Tenancy: tenancy.New(tenancy.Options{Store: &memstore.Tenants{}, Sessions: &memstore.Sessions{}, Audit: &memstore.Audit{}})}))
	defer srv.Close()
	for name, l := range map[string]sluice.Limiter{"engine": engine.New(local, engine.Options{}), "client": client.New(srv.URL, client.Options{})} {
		t.Run(name, func(t *testing.T) {
			calls := 0
			h := mustNew(t, httplimit.Options{
				Limiter:  l,
				Policies: []sluice.Policy{{Name: "api", Algorithm: sluice.FixedWindow, Limit: 3, Window: time.Hour, FailMode: sluice.FailClosed}},
				Key:      httplimit.KeyFromHeader("X-User"),
			})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls++ }))
			rec := httptest.NewRecorder()
			req := httptest.NewRequest("GET", "/", nil)
			req.Header.Set("X-User", "u")
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusServiceUnavailable || calls != 0 || rec.Header().Get("Retry-After") != "1" {
				t.Fatalf("answered %d (Retry-After %q), handler called %d times: want 503, not called", rec.Code, rec.Header().Get("Retry-After"), calls)
			}
		})
	}
}
