package insighthttp

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/httpapi"
	"github.com/sluicehq/sluice/insight"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/tenancy"
)

// The API's handler is the router the routes are mounted on.
var _ Router = (*httpapi.Handler)(nil)

const adminKey = "admin-secret-for-tests"

// mount returns the API's handler of api with the insight routes of o
// mounted on it, and those routes' handler: o's tenant layer, key states
// and clock are api's unless o gives its own.
func mount(api httpapi.Options, o Options) (*httpapi.Handler, *Handler) {
	if o.Tenancy == nil {
		o.Tenancy = api.Tenancy
	}
	if sr, ok := api.Limiter.(StateReader); ok && o.States == nil {
		o.States = sr
	}
	if o.Now == nil {
		o.Now = api.Now
	}
	a, h := httpapi.New(api), New(o)
	h.Mount(a)
	return a, h
}

// insightNode is one node's handler of the insight routes, with its own
// store and recorder, served over HTTP.
type insightNode struct {
	*service
	h   http.Handler // the API's
	ins *Handler     // its insight routes'
}

func newInsightNode(t *testing.T, tenants *memstore.Tenants, o Options) *insightNode {
	t.Helper()
	rec := insight.NewRecorder(insight.RecorderOptions{})
	st := memstore.New(memstore.Options{})
	t.Cleanup(func() { st.Close() })
	o.Insight = rec
	h, ins := mount(httpapi.Options{
		Limiter: engine.New(st, engine.Options{Observer: rec}),
		Tenancy: newTenancy(tenancy.Options{Store: tenants, AdminKey: adminKey}),
	}, o)
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		ins.CloseStreams()
		srv.Close()
	})
	return &insightNode{service: &service{srv: srv}, h: h, ins: ins}
}

// newTenancy returns a tenant layer over memory stores: o's tenants', or
// new ones, and new sessions and audit trail.
func newTenancy(o tenancy.Options) *tenancy.Service {
	if o.Store == nil {
		o.Store = &memstore.Tenants{}
	}
	o.Sessions, o.Audit = &memstore.Sessions{}, &memstore.Audit{}
	return tenancy.New(o)
}

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// service is a server with the example configuration, an admin key, and
// two tenants, acme and beta, each with an API key, its decisions
// recorded.
type service struct {
	srv        *httptest.Server
	clock      *clock
	acme, beta string // API keys
}

func newService(t *testing.T) *service {
	t.Helper()
	cfg, err := config.Load("../../examples/sluice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := memstore.New(memstore.Options{})
	c := &clock{t: time.Date(2026, 11, 21, 10, 0, 15, 0, time.UTC)}
	rec := insight.NewRecorder(insight.RecorderOptions{Now: c.now, Configured: func(p string) bool { _, ok := cfg.Policies[p]; return ok }})
	h, _ := mount(httpapi.Options{
		Limiter: engine.New(s, engine.Options{Now: c.now, Observer: rec}),
		Tenancy: newTenancy(tenancy.Options{Config: func() *config.Config { return cfg }, AdminKey: adminKey, Now: c.now}),
		Now:     c.now,
	}, Options{Insight: rec})
	srv := httptest.NewServer(h)
	t.Cleanup(func() { srv.Close(); s.Close() })
	sv := &service{srv: srv, clock: c}
	sv.acme, sv.beta = sv.tenantKey(t, "acme"), sv.tenantKey(t, "beta")
	return sv
}

// tenantKey creates tenant id and returns an API key of it.
func (s *service) tenantKey(t *testing.T, id string) string {
	t.Helper()
	if code, body := s.do(t, adminKey, "POST", "/v1/tenants", `{"id":"`+id+`"}`); code != 201 {
		t.Fatalf("create %s: %d %v", id, code, body)
	}
	code, body := s.do(t, adminKey, "POST", "/v1/tenants/"+id+"/keys", `{"name":"test"}`)
	if code != 201 {
		t.Fatalf("key for %s: %d %v", id, code, body)
	}
	return body["token"].(string)
}

// request sends a request with key, and header's names and values.
func (s *service) request(t *testing.T, key, method, path, body string, header ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, s.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
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
