package httplimit_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/httpapi"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/tenancy"
)

var _ httplimit.EndpointLimiter = (*client.Client)(nil)

// TestEndpointMiddleware: the middleware names an endpoint of a server's
// configuration (examples/sluice.yaml) through the client: the tenant's
// tier applies, the server's headers are passed on, key parts come from
// the request, and a policy keyed by ip counts the request's peer, not
// this service.
func TestEndpointMiddleware(t *testing.T) {
	cfg, err := config.Load("../examples/sluice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := memstore.New(memstore.Options{})
	srv := httptest.NewServer(httpapi.New(httpapi.Options{Limiter: engine.New(s, engine.Options{}),
		Tenancy: tenancy.New(tenancy.Options{Store: &memstore.Tenants{}, Sessions: &memstore.Sessions{}, Audit: &memstore.Audit{}, Config: func() *config.Config { return cfg }})}))
	t.Cleanup(func() { srv.Close(); s.Close() })
	c := client.New(srv.URL, client.Options{})
	calls := 0
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls++ })
	serve := func(h http.Handler, peer, user string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("GET", "/", nil)
		req.RemoteAddr = peer + ":1234"
		if user != "" {
			req.Header.Set("X-User", user)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}

	models := mustNew(t, httplimit.Options{
		Limiter:  c,
		Endpoint: "models",
		Parts:    map[string]httplimit.KeyFunc{"user": httplimit.KeyFromHeader("X-User")},
		Tenant:   func(*http.Request) string { return "acme" },
	})(handler)
	rec := serve(models, "198.51.100.7", "u1")
	if h := rec.Header(); rec.Code != 200 || h.Get("RateLimit-Policy") != `"models";q=50;w=60` || h.Get("X-RateLimit-Remaining") != "49" || calls != 1 {
		t.Fatalf("acme's models (premium, 50): %d %v, handler called %d times", rec.Code, h, calls)
	}
	rec = serve(models, "198.51.100.7", "")
	var body struct{ Field string }
	json.Unmarshal(rec.Body.Bytes(), &body)
	if rec.Code != 400 || body.Field != "key.user" || calls != 1 {
		t.Fatalf("no user: %d %s", rec.Code, rec.Body)
	}

	login := mustNew(t, httplimit.Options{Limiter: c, Endpoint: "login", Tenant: func(*http.Request) string { return "demo" }})(handler)
	for i := range 5 {
		if rec := serve(login, "198.51.100.7", ""); rec.Code != 200 {
			t.Fatalf("login %d: %d %s", i, rec.Code, rec.Body)
		}
	}
	rec = serve(login, "198.51.100.7", "")
	if rec.Code != 429 || rec.Header().Get("Retry-After") == "" || rec.Header().Get("RateLimit") == "" || calls != 6 {
		t.Fatalf("sixth login of 5 from one peer: %d %v, handler called %d times", rec.Code, rec.Header(), calls)
	}
	if rec := serve(login, "198.51.100.8", ""); rec.Code != 200 {
		t.Fatalf("another peer: %d %s", rec.Code, rec.Body)
	}
	// The server counted the peers, not the service's own address.
	res, err := c.CheckNamed(t.Context(), client.Named{Tenant: "demo", Endpoint: "login", Key: map[string]string{"ip": "198.51.100.8"}})
	if err != nil || res.Decision.Remaining != 4 {
		t.Fatalf("198.51.100.8's counter: %+v %v", res.Result, err)
	}

	// Skip, OnRefused and Headers apply through an endpoint too.
	var refused string
	xLogin := mustNew(t, httplimit.Options{Limiter: c, Endpoint: "login", Tenant: func(*http.Request) string { return "demo" },
		Headers: httplimit.HeadersX,
		Skip:    func(r *http.Request) bool { return r.Header.Get("X-User") == "probe" },
		OnRefused: func(w http.ResponseWriter, r *http.Request, d sluice.Decision) {
			refused = d.Policy
			w.WriteHeader(http.StatusTeapot)
		},
	})(handler)
	for range 3 {
		if rec := serve(xLogin, "198.51.100.9", "probe"); rec.Code != 200 || rec.Header().Get("X-RateLimit-Remaining") != "" {
			t.Fatalf("skipped: %d %v", rec.Code, rec.Header())
		}
	}
	for i := range 5 {
		rec := serve(xLogin, "198.51.100.9", "")
		if rec.Code != 200 || rec.Header().Get("RateLimit") != "" || rec.Header().Get("X-RateLimit-Remaining") != strconv.Itoa(4-i) {
			t.Fatalf("login %d through X headers: %d %v", i, rec.Code, rec.Header())
		}
	}
	rec = serve(xLogin, "198.51.100.9", "")
	if rec.Code != http.StatusTeapot || refused != "login-per-ip" || rec.Header().Get("Retry-After") == "" || rec.Header().Get("RateLimit-Policy") != "" {
		t.Fatalf("refused through OnRefused: %d %v, policy %q", rec.Code, rec.Header(), refused)
	}
}
