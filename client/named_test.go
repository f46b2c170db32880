package client_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/httpapi"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/tenancy"
)

const adminKey = "admin-key-for-client-tests"

// site is a server of the example configuration (examples/sluice.yaml:
// acme premium with chat overridden to 500, demo free), with an admin
// key, on a clock the test steps.
type site struct {
	url   string
	store *memstore.Store
	clock *clock
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func newSite(t *testing.T) *site {
	t.Helper()
	cfg, err := config.Load("../examples/sluice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := memstore.New(memstore.Options{})
	c := &clock{t: time.Date(2026, 11, 21, 10, 0, 15, 0, time.UTC)}
	srv := httptest.NewServer(httpapi.New(httpapi.Options{
		Limiter: engine.New(s, engine.Options{Now: c.now}),
		Tenancy: tenancy.New(tenancy.Options{Store: &memstore.Tenants{}, Sessions: &memstore.Sessions{}, Audit: &memstore.Audit{},
			Config: func() *config.Config { return cfg }, AdminKey: adminKey, Now: c.now}),
		Now: c.now,
	}))
	t.Cleanup(func() { srv.Close(); s.Close() })
	return &site{url: srv.URL, store: s, clock: c}
}

// admin makes an admin call the client does not offer (tenants, keys),
// and returns the answer's body.
func (s *site) admin(t *testing.T, method, path, body string, want int) map[string]any {
	t.Helper()
	req, err := http.NewRequest(method, s.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+adminKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if resp.StatusCode != want || json.Unmarshal(b, &out) != nil {
		t.Fatalf("%s %s: %d %s, want %d", method, path, resp.StatusCode, b, want)
	}
	return out
}

// tenant creates a tenant in the tenant store, as the dashboard would,
// and returns an API key of its own.
func (s *site) tenant(t *testing.T, body string) string {
	t.Helper()
	var id struct{ ID string }
	json.Unmarshal([]byte(body), &id)
	s.admin(t, "POST", "/v1/tenants", body, 201)
	return s.admin(t, "POST", "/v1/tenants/"+id.ID+"/keys", `{"name":"test"}`, 201)["token"].(string)
}

// TestNamedEndpoints: a named check gets the tenant's tier and overrides,
// those of the file (acme: premium, chat overridden) and those written
// through the API (beta), with the server's rate-limit headers; a tenant's
// key names its own tenant.
func TestNamedEndpoints(t *testing.T) {
	s := newSite(t)
	admin := client.New(s.url, client.Options{APIKey: adminKey})
	betaKey := s.tenant(t, `{"id":"beta","tier":"premium","overrides":{"models":{"limit":2}}}`)
	beta := client.New(s.url, client.Options{APIKey: betaKey})
	ctx := context.Background()
	for _, tc := range []struct {
		c                     *client.Client
		tenant, endpoint, why string
		limit                 int64
	}{
		{admin, "demo", "chat", "free tier", 20},
		{admin, "acme", "models", "premium tier", 50},
		{admin, "acme", "chat", "the file's override", 500},
		{beta, "", "chat", "premium tier set through the API", 100},
		{beta, "", "models", "override set through the API", 2},
	} {
		res, err := tc.c.CheckNamed(ctx, client.Named{Tenant: tc.tenant, Endpoint: tc.endpoint, Key: map[string]string{"user": "u1"}, Hits: 1})
		if err != nil || !res.Allowed || res.Decision.Limit != tc.limit || res.Decision.Remaining != tc.limit-1 || res.Decision.Policy != tc.endpoint {
			t.Errorf("%s %s (%s): %+v %v, want limit %d", tc.tenant, tc.endpoint, tc.why, res.Result, err, tc.limit)
		}
	}
	res, err := beta.CheckNamed(ctx, client.Named{Endpoint: "models", Key: map[string]string{"user": "u1"}, Hits: 1})
	if err != nil || !res.Allowed || res.Header.Get("RateLimit-Policy") != `"models";q=2;w=60` {
		t.Fatalf("second models: %+v %v %v", res.Result, res.Header, err)
	}
	res, err = beta.CheckNamed(ctx, client.Named{Endpoint: "models", Key: map[string]string{"user": "u1"}, Hits: 1})
	if err != nil || res.Allowed || res.Decision.RetryAfter != 45*time.Second || res.Header.Get("Retry-After") != "45" {
		t.Fatalf("third models of 2: %+v %v %v, want denied for 45s", res.Result, res.Header, err)
	}
	if res.Header.Get("Content-Type") != "" {
		t.Errorf("headers beyond the rate limit's: %v", res.Header)
	}
	// Zero hits reads the state.
	res, err = admin.CheckNamed(ctx, client.Named{Tenant: "demo", Endpoint: "chat", Key: map[string]string{"user": "u1"}})
	if err != nil || !res.Allowed || res.Decision.Remaining != 19 {
		t.Fatalf("read: %+v %v", res.Result, err)
	}
}

// TestNamedKeyParts: each set of key parts is its own counter; policies
// are named one by one as well as by endpoint; a missing part, an unknown
// endpoint or policy, and text JSON cannot carry are errors naming their
// field.
func TestNamedKeyParts(t *testing.T) {
	s := newSite(t)
	c := client.New(s.url, client.Options{APIKey: adminKey})
	ctx := context.Background()
	login := func(ip string) sluice.Result {
		t.Helper()
		res, err := c.CheckNamed(ctx, client.Named{Tenant: "demo", Endpoint: "login", Key: map[string]string{"ip": ip}, Hits: 1})
		if err != nil {
			t.Fatal(err)
		}
		return res.Result
	}
	for i := range 5 {
		if res := login("198.51.100.7"); !res.Allowed {
			t.Fatalf("login %d: %+v", i, res)
		}
	}
	if res := login("198.51.100.7"); res.Allowed {
		t.Fatalf("sixth login of 5 from one address: %+v", res)
	}
	if res := login("198.51.100.8"); !res.Allowed {
		t.Fatalf("another address: %+v", res)
	}
	res, err := c.CheckNamed(ctx, client.Named{Tenant: "demo", Policies: []string{"chat", "models"}, Key: map[string]string{"user": "u1"}, Hits: 1})
	if err != nil || len(res.Decisions) != 2 || res.Decisions[0].Policy != "chat" || res.Decisions[1].Policy != "models" || res.Decision.Policy != "models" {
		t.Fatalf("two policies: %+v %v", res.Result, err)
	}
	for _, tc := range []struct {
		req   client.Named
		field string
	}{
		{client.Named{Tenant: "demo", Endpoint: "chat", Hits: 1}, "key.user"},
		{client.Named{Tenant: "demo", Endpoint: "chat", Key: map[string]string{"ip": "198.51.100.7"}, Hits: 1}, "key.user"},
		{client.Named{Tenant: "demo", Endpoint: "nope", Key: map[string]string{"user": "u1"}, Hits: 1}, "endpoint"},
		{client.Named{Tenant: "demo", Policies: []string{"chat", "nope"}, Key: map[string]string{"user": "u1"}, Hits: 1}, "policies[1]"},
		{client.Named{Tenant: "demo", Key: map[string]string{"user": "u1"}, Hits: 1}, "endpoint"},
		{client.Named{Tenant: "demo", Endpoint: "chat", Key: map[string]string{"user": "\xff"}, Hits: 1}, "key.user"},
		{client.Named{Tenant: "demo", Endpoint: "chat", Key: map[string]string{"user": "u1"}, Hits: -1}, "hits"},
	} {
		_, err := c.CheckNamed(ctx, tc.req)
		if sluice.KindOf(err) != sluice.KindInvalid || sluice.FieldOf(err) != tc.field {
			t.Errorf("%+v: %v, want invalid %s", tc.req, err, tc.field)
		}
	}
}
