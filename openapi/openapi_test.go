package openapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/openapi"
)

const adminKey = "openapi-test-admin-key-0123456789abcdef"

// The pages (GET /, /dashboard) are documented as text/html, whose bodies
// the validator reads as strings.
// The insight streams' (text/event-stream) are not read (step.stream).
func init() {
	openapi3filter.RegisterBodyDecoder("text/html", openapi3filter.PlainBodyDecoder)
	openapi3filter.RegisterBodyDecoder("text/event-stream", openapi3filter.PlainBodyDecoder)
}

// short is a body for a failure's message.
func short(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "..."
	}
	return string(b)
}

// load parses and validates the document.
func load(t *testing.T) *openapi3.T {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(openapi.JSON)
	if err != nil {
		t.Fatalf("the document does not load: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("the document is not valid OpenAPI: %v", err)
	}
	if !doc.IsOpenAPI31OrLater() {
		t.Fatalf("the document is OpenAPI %s, want 3.1", doc.OpenAPI)
	}
	return doc
}

// serve runs a real `sluice serve` in process (internal/server, as
// cmd/sluice runs it), changed by with: the memory store, an admin key,
// one allowed host (so that the host wall stands), tenant labels on
// /metrics (so that it asks the admin key), and a configuration with a
// named endpoint, a concurrency policy and upstreams: one to acquire, one
// proxied to a stand-in, one proxied to a stand-in that never answers
// within its timeout and one to an address nothing listens on.
func serve(t *testing.T, with ...func(*server.Config)) (*server.Server, string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "sluice.yaml")
	conf := `policies:
  search:
    algorithm: fixed_window
    limit: 2
    window: 1h
    key: [user]
  reports:
    algorithm: concurrency
    limit: 1
    leaseTTL: 5m
    key: [user]
endpoints:
  search: [search]
upstreams:
  partner: {rate: 1, window: 1h}
  relay:
    rate: 1
    window: 1h
    proxy: {url: %[1]q}
  slow:
    rate: 1000
    window: 1s
    proxy: {url: %[1]q, timeout: 100ms}
  dead:
    rate: 1000
    window: 1s
    proxy: {url: "http://127.0.0.1:1/"}
`
	// The relay's and the slow one's upstream, a stand-in answering every
	// call 200 but those under /never/, which it never answers.
	standIn := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/never/") {
			<-r.Context().Done()
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"ok":true}`)
	}))
	t.Cleanup(standIn.Close)
	conf = fmt.Sprintf(conf, standIn.URL+"/")
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	c := server.Config{
		Addr: "127.0.0.1:0", Store: "memory", MaxKeys: 1000, ConfigPoll: time.Hour, ConfigFile: file,
		AdminKey: adminKey, AllowedHosts: []string{"127.0.0.1"}, TenantLabels: 10, ShutdownTimeout: 5 * time.Second, WSRenew: 10 * time.Second,
		WSMaxMessage: 128 << 10, WSIdle: time.Minute, WSLifetime: time.Hour, Version: "test",
	}
	for _, f := range with {
		f(&c)
	}
	s, err := server.New(context.Background(), c, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		s.Close()
	})
	base := "http://" + s.Addr().String()
	for deadline := time.Now().Add(10 * time.Second); ; {
		resp, err := http.Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server never answered: %v", err)
		}
		time.Sleep(10 * time.Millisecond) // a poll's period
	}
	return s, base
}

// wildcard finds a mux pattern's {name...}, which the document names
// {name}.
var wildcard = regexp.MustCompile(`\{([a-z]+)\.\.\.\}`)

// TestRoutesMatchDocument: every route the real server routes is a path
// and method of the document, and every path and method of the document
// is a route of the server.
func TestRoutesMatchDocument(t *testing.T) {
	doc := load(t)
	s, _ := serve(t)
	var server []string
	for _, r := range s.Routes() {
		server = append(server, wildcard.ReplaceAllString(r, "{$1}"))
	}
	var documented []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			documented = append(documented, method+" "+path)
		}
	}
	slices.Sort(documented)
	if len(server) < 40 {
		t.Fatalf("the server lists %d routes: its list is not the mux's", len(server))
	}
	for _, r := range server {
		if !slices.Contains(documented, r) {
			t.Errorf("the server routes %s; the document lacks it", r)
		}
	}
	for _, r := range documented {
		if !slices.Contains(server, r) {
			t.Errorf("the document has %s; the server has no such route", r)
		}
	}
}

// TestServedDocument: GET /v1/openapi.json, without a key, answers the
// repository's file, byte for byte.
func TestServedDocument(t *testing.T) {
	_, base := serve(t)
	resp, err := http.Get(base + "/v1/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /v1/openapi.json: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	file, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, file) {
		t.Fatalf("the served document (%d bytes) is not openapi.json (%d bytes)", len(got), len(file))
	}
}

// step is one real request: the route it is (the document's method and
// path), its URL path, key ("admin", "tenant", "none" or "other": a key of
// another tenant), body, and the status it must get.
type step struct {
	method, path string // the document's
	url          string // the request's; {tenant}, {session}, {lease} filled in
	key          string
	body         string
	headers      map[string]string // besides Authorization and Content-Type
	host         string            // the request's Host, if not the server's
	status       int
	// stream: the answer is a stream held open; its status and headers
	// are validated, and the request ends there (its body unread).
	stream bool
	// hold: the stream stays open to the test's end.
	hold bool
	// ws: the request is a WebSocket connect, kept open to the test's end;
	// its Sluice-Connection header is kept as {conn}.
	ws bool
	// save, when set, keeps a field of the response body under a name
	// that later URLs and bodies use as {name}.
	save map[string]string
	// await: the server reaches the state the step wants in its own time
	// (a share lapsing, a closed stream let go): the request is sent
	// again, its other answers unchecked, until it gets its status, for
	// at most a minute.
	await bool
	// before, if not nil, runs before the step is sent.
	before func()
}

// steps are the requests the test sends, in order, each validated against
// the document, then proxySteps', sweeps', teardown's and streamCap's.
// TestResponsesMatchDocument checks that with unavailable's they cover
// every status the document names.
var steps = []step{
	{method: "GET", path: "/healthz", url: "/healthz", key: "none", status: 200},
	{method: "GET", path: "/readyz", url: "/readyz", key: "none", status: 200},
	{method: "GET", path: "/v1/openapi.json", url: "/v1/openapi.json", key: "none", status: 200},
	{method: "GET", path: "/metrics", url: "/metrics", key: "admin", status: 200},
	{method: "GET", path: "/metrics", url: "/metrics", key: "none", status: 401},
	{method: "GET", path: "/", url: "/", key: "none", status: 200},
	{method: "GET", path: "/dashboard", url: "/dashboard", key: "none", status: 200},

	// Tenants and keys.
	{method: "POST", path: "/v1/tenants", url: "/v1/tenants", key: "admin", body: `{"id":"acme"}`, status: 201},
	{method: "POST", path: "/v1/tenants", url: "/v1/tenants", key: "admin", body: `{"id":"acme"}`, status: 409},
	{method: "POST", path: "/v1/tenants", url: "/v1/tenants", key: "admin", body: `{"id":`, status: 400},
	{method: "POST", path: "/v1/tenants", url: "/v1/tenants", key: "admin", body: `{"id":"big","pad":"` + strings.Repeat("x", 2<<20) + `"}`, status: 413},
	{method: "POST", path: "/v1/tenants", url: "/v1/tenants", key: "admin", body: `{"id":"other"}`, status: 201},
	{method: "POST", path: "/v1/tenants/{id}/keys", url: "/v1/tenants/acme/keys", key: "admin", body: `{"name":"ci"}`, status: 201, save: map[string]string{"token": "tenant", "id": "keyid"}},
	{method: "POST", path: "/v1/tenants/{id}/keys", url: "/v1/tenants/other/keys", key: "admin", body: `{}`, status: 201, save: map[string]string{"token": "other"}},
	{method: "POST", path: "/v1/tenants/{id}/keys", url: "/v1/tenants/nobody/keys", key: "admin", body: `{}`, status: 404},
	{method: "POST", path: "/v1/tenants/{id}/keys", url: "/v1/tenants/acme/keys", key: "tenant", body: `{}`, status: 403},
	{method: "POST", path: "/v1/tenants/{id}/keys", url: "/v1/tenants/acme/keys", key: "none", body: `{}`, status: 401},
	{method: "GET", path: "/v1/tenants", url: "/v1/tenants", key: "admin", status: 200},
	{method: "GET", path: "/v1/tenants", url: "/v1/tenants", key: "tenant", status: 200},
	{method: "GET", path: "/v1/tenants", url: "/v1/tenants", key: "none", status: 401},
	{method: "GET", path: "/v1/tenants/{id}", url: "/v1/tenants/acme", key: "tenant", status: 200},
	{method: "GET", path: "/v1/tenants/{id}", url: "/v1/tenants/acme", key: "other", status: 403},
	{method: "GET", path: "/v1/tenants/{id}", url: "/v1/tenants/nobody", key: "admin", status: 404},
	{method: "GET", path: "/v1/tenants/{id}", url: "/v1/tenants/acme", key: "none", status: 401},
	{method: "GET", path: "/v1/tenants/{id}/limits", url: "/v1/tenants/acme/limits", key: "tenant", status: 200},
	{method: "GET", path: "/v1/tenants/{id}/limits", url: "/v1/tenants/acme/limits", key: "other", status: 403},
	{method: "GET", path: "/v1/tenants/{id}/limits", url: "/v1/tenants/acme/limits", key: "none", status: 401},
	{method: "PUT", path: "/v1/tenants/{id}", url: "/v1/tenants/acme", key: "admin", body: `{"id":"acme"}`, status: 200},
	{method: "PUT", path: "/v1/tenants/{id}", url: "/v1/tenants/acme", key: "admin", body: `[`, status: 400},
	{method: "PUT", path: "/v1/tenants/{id}", url: "/v1/tenants/acme", key: "tenant", body: `{"id":"acme"}`, status: 403},
	{method: "PUT", path: "/v1/tenants/{id}", url: "/v1/tenants/acme", key: "none", body: `{"id":"acme"}`, status: 401},
	{method: "GET", path: "/v1/tenants/{id}/keys", url: "/v1/tenants/acme/keys", key: "tenant", status: 200},
	{method: "GET", path: "/v1/tenants/{id}/keys", url: "/v1/tenants/acme/keys", key: "other", status: 403},
	{method: "GET", path: "/v1/tenants/{id}/keys", url: "/v1/tenants/acme/keys", key: "none", status: 401},
	{method: "GET", path: "/v1/policies", url: "/v1/policies", key: "tenant", status: 200},
	{method: "GET", path: "/v1/policies", url: "/v1/policies", key: "none", status: 401},

	// Decisions: the named endpoint admits twice, then denies.
	{method: "POST", path: "/v1/check", url: "/v1/check", key: "tenant", body: `{"endpoint":"search","key":{"user":"u1"}}`, status: 200},
	{method: "POST", path: "/v1/check", url: "/v1/check", key: "tenant", body: `{"policies":["search"],"key":{"user":"u1"}}`, status: 200},
	{method: "POST", path: "/v1/check", url: "/v1/check", key: "tenant", body: `{"endpoint":"search","key":{"user":"u1"}}`, status: 429},
	{method: "POST", path: "/v1/check", url: "/v1/check", key: "tenant", body: `{"checks":[{"key":"k","policy":{"name":"inline","algorithm":"token_bucket","limit":1,"window":"1h"}}]}`, status: 200},
	{method: "POST", path: "/v1/check", url: "/v1/check", key: "tenant", body: `{"checks":[{"key":"k","policy":{"name":"inline","algorithm":"token_bucket","limit":1,"window":"1h"}}]}`, status: 429},
	{method: "POST", path: "/v1/check", url: "/v1/check", key: "tenant", body: `{"checks":[]}`, status: 400},
	{method: "POST", path: "/v1/check", url: "/v1/check", key: "tenant", body: `{"endpoint":"nowhere","key":{"user":"u1"}}`, status: 400},
	{method: "POST", path: "/v1/check", url: "/v1/check", key: "tenant", body: `{"tenant":"other","endpoint":"search","key":{"user":"u1"}}`, status: 403},
	{method: "POST", path: "/v1/check", url: "/v1/check", key: "none", body: `{"endpoint":"search","key":{"user":"u1"}}`, status: 401},
	{method: "POST", path: "/v1/check", url: "/v1/check", key: "tenant", body: `{"endpoint":"search","key":{"user":"` + strings.Repeat("x", 2<<20) + `"}}`, status: 413},

	// Leases: the concurrency policy holds one.
	{method: "POST", path: "/v1/leases", url: "/v1/leases", key: "tenant", body: `{"policy":"reports","key":{"user":"u1"}}`, status: 200, save: map[string]string{"lease.token": "lease"}},
	{method: "POST", path: "/v1/leases", url: "/v1/leases", key: "tenant", body: `{"policy":"reports","key":{"user":"u1"}}`, status: 429},
	{method: "POST", path: "/v1/leases", url: "/v1/leases", key: "tenant", body: `{}`, status: 400},
	{method: "POST", path: "/v1/leases", url: "/v1/leases", key: "tenant", body: `{"policy":"nothing","key":{"user":"u1"}}`, status: 400},
	{method: "POST", path: "/v1/leases", url: "/v1/leases", key: "tenant", body: `{"tenant":"other","policy":"reports","key":{"user":"u1"}}`, status: 403},
	{method: "POST", path: "/v1/leases", url: "/v1/leases", key: "none", body: `{"policy":"reports","key":{"user":"u1"}}`, status: 401},
	{method: "POST", path: "/v1/leases/{token}/renew", url: "/v1/leases/{lease}/renew", key: "tenant", body: `{"policy":"reports"}`, status: 200},
	{method: "POST", path: "/v1/leases/{token}/renew", url: "/v1/leases/{lease}/renew", key: "tenant", body: `{}`, status: 400},
	{method: "POST", path: "/v1/leases/{token}/renew", url: "/v1/leases/{lease}/renew", key: "none", body: `{"policy":"reports"}`, status: 401},
	{method: "DELETE", path: "/v1/leases/{token}", url: "/v1/leases/{lease}", key: "tenant", body: `{"policy":"reports"}`, status: 200},
	{method: "DELETE", path: "/v1/leases/{token}", url: "/v1/leases/{lease}", key: "none", body: `{"policy":"reports"}`, status: 401},
	{method: "DELETE", path: "/v1/leases/{token}", url: "/v1/leases/{lease}", key: "tenant", body: `{"policy":"reports"}`, status: 404},
	{method: "POST", path: "/v1/leases/{token}/renew", url: "/v1/leases/{lease}/renew", key: "tenant", body: `{"policy":"reports"}`, status: 404},
	{method: "POST", path: "/v1/leases/{token}/renew", url: "/v1/leases/bogus/renew", key: "tenant", body: `{"policy":"reports"}`, status: 400},
	{method: "DELETE", path: "/v1/leases/{token}", url: "/v1/leases/bogus", key: "tenant", body: `{"policy":"reports"}`, status: 400},
	{method: "DELETE", path: "/v1/leases/{token}", url: "/v1/leases/{lease}", key: "tenant", body: `{"tenant":"other","policy":"reports"}`, status: 403},

	// Upstream acquire: one a window.
	{method: "POST", path: "/v1/upstreams/{name}/acquire", url: "/v1/upstreams/partner/acquire", key: "tenant", body: `{"key":"k"}`, status: 200},
	{method: "POST", path: "/v1/upstreams/{name}/acquire", url: "/v1/upstreams/partner/acquire", key: "tenant", body: `{"key":"k","maxWait":"1ms"}`, status: 429},
	{method: "POST", path: "/v1/upstreams/{name}/acquire", url: "/v1/upstreams/nowhere/acquire", key: "tenant", body: `{"key":"k"}`, status: 404},
	{method: "POST", path: "/v1/upstreams/{name}/acquire", url: "/v1/upstreams/partner/acquire", key: "tenant", body: `{"key":1}`, status: 400},
	{method: "POST", path: "/v1/upstreams/{name}/acquire", url: "/v1/upstreams/partner/acquire", key: "none", body: `{"key":"k"}`, status: 401},
	{method: "GET", path: "/v1/upstreams", url: "/v1/upstreams", key: "admin", status: 200},
	{method: "GET", path: "/v1/upstreams", url: "/v1/upstreams", key: "tenant", status: 403},
	{method: "GET", path: "/v1/upstreams", url: "/v1/upstreams", key: "none", status: 401},
	{method: "GET", path: "/v1/upstreams/{name}", url: "/v1/upstreams/partner", key: "admin", status: 200},
	{method: "GET", path: "/v1/upstreams/{name}", url: "/v1/upstreams/nowhere", key: "admin", status: 404},

	// The proxy: the relay grants one call an hour, passed to the
	// stand-in; the dead one's upstream refuses connections.
	{method: "GET", path: "/v1/upstreams/{name}/proxy/{path}", url: "/v1/upstreams/relay/proxy/x", key: "tenant", headers: map[string]string{"Sluice-Key": "k"}, status: 200},
	// Blocks and audit, erase.
	{method: "POST", path: "/v1/tenants/{id}/blocks", url: "/v1/tenants/acme/blocks", key: "admin", body: `{"policy":"search","parts":{"user":"u9"},"seconds":60,"reason":"test"}`, status: 201},
	{method: "POST", path: "/v1/tenants/{id}/blocks", url: "/v1/tenants/acme/blocks", key: "admin", body: `{"policy":"search","parts":{"user":"u9"},"seconds":-1}`, status: 400},
	{method: "POST", path: "/v1/tenants/{id}/blocks", url: "/v1/tenants/nobody/blocks", key: "admin", body: `{"policy":"search","parts":{"user":"u9"},"seconds":60}`, status: 404},
	{method: "GET", path: "/v1/tenants/{id}/blocks", url: "/v1/tenants/nobody/blocks", key: "admin", status: 404},
	{method: "DELETE", path: "/v1/tenants/{id}/blocks", url: "/v1/tenants/acme/blocks", key: "admin", body: `{"policy":"search","parts":{"user":"u9"}}`, status: 200},
	{method: "DELETE", path: "/v1/tenants/{id}/blocks", url: "/v1/tenants/acme/blocks", key: "admin", status: 400},
	{method: "DELETE", path: "/v1/tenants/{id}/blocks", url: "/v1/tenants/nobody/blocks?policy=search&key=k", key: "admin", status: 404},
	{method: "GET", path: "/v1/tenants/{id}/audit", url: "/v1/tenants/acme/audit?n=0", key: "admin", status: 400},
	{method: "GET", path: "/v1/tenants/{id}/audit", url: "/v1/tenants/nobody/audit", key: "admin", status: 200},
	{method: "POST", path: "/v1/tenants/{id}/erase", url: "/v1/tenants/acme/erase", key: "admin", body: `{"nothing":1}`, status: 400},
	{method: "POST", path: "/v1/tenants/{id}/erase", url: "/v1/tenants/nobody/erase", key: "admin", body: `{"parts":{"user":"u1"}}`, status: 200},
	{method: "GET", path: "/v1/tenants/{id}/keys", url: "/v1/tenants/nobody/keys", key: "admin", status: 404},
	{method: "GET", path: "/v1/tenants/{id}/limits", url: "/v1/tenants/nobody/limits", key: "admin", status: 404},
	{method: "PUT", path: "/v1/tenants/{id}", url: "/v1/tenants/nobody", key: "admin", body: `{"id":"nobody"}`, status: 404},
	{method: "POST", path: "/v1/tenants/{id}/keys", url: "/v1/tenants/acme/keys", key: "admin", body: `{"name":1}`, status: 400},
	{method: "PUT", path: "/v1/tenants/{id}/sessions", url: "/v1/tenants/nobody/sessions", key: "admin", body: `{}`, status: 404},
	{method: "GET", path: "/v1/policies", url: "/v1/policies", key: "other", status: 200},
	{method: "PUT", path: "/v1/tenants/{id}", url: "/v1/tenants/acme", key: "admin", body: `{"id":"acme","pad":"` + strings.Repeat("x", 2<<20) + `"}`, status: 413},
	{method: "POST", path: "/v1/leases", url: "/v1/leases", key: "tenant", body: `{"policy":"reports","key":{"user":"` + strings.Repeat("x", 2<<20) + `"}}`, status: 413},
	{method: "POST", path: "/v1/upstreams/{name}/acquire", url: "/v1/upstreams/partner/acquire", key: "tenant", body: `{"key":"` + strings.Repeat("x", 2<<20) + `"}`, status: 413},
	{method: "POST", path: "/v1/upstreams/{name}/acquire", url: "/v1/upstreams/partner/acquire", key: "tenant", body: `{"tenant":"other","key":"k"}`, status: 403},
	{method: "POST", path: "/v1/tenants", url: "/v1/tenants", key: "tenant", body: `{"id":"x"}`, status: 403},
	{method: "GET", path: "/v1/upstreams/{name}", url: "/v1/upstreams/partner", key: "tenant", status: 403},
	{method: "GET", path: "/v1/insight/gateway", url: "/v1/insight/gateway", key: "tenant", status: 403},
	{method: "GET", path: "/v1/insight/top", url: "/v1/insight/top?policy=search", key: "tenant", status: 403},
	{method: "GET", path: "/v1/insight/history", url: "/v1/insight/history", key: "tenant", status: 403},
	{method: "GET", path: "/v1/insight/top", url: "/v1/insight/top", key: "admin", status: 400},
	{method: "GET", path: "/v1/insight/history", url: "/v1/insight/history?minutes=0", key: "admin", status: 400},
	{method: "GET", path: "/v1/tenants/{id}/insight/history", url: "/v1/tenants/acme/insight/history?minutes=0", key: "tenant", status: 400},
	{method: "GET", path: "/v1/tenants/{id}/insight/top", url: "/v1/tenants/acme/insight/top", key: "tenant", status: 400},
	{method: "GET", path: "/v1/tenants/{id}/blocks", url: "/v1/tenants/acme/blocks", key: "tenant", status: 200},
	{method: "GET", path: "/v1/tenants/{id}/blocks", url: "/v1/tenants/acme/blocks", key: "other", status: 403},
	{method: "GET", path: "/v1/tenants/{id}/audit", url: "/v1/tenants/acme/audit", key: "tenant", status: 200},
	{method: "GET", path: "/v1/tenants/{id}/audit", url: "/v1/tenants/acme/audit", key: "other", status: 403},
	{method: "POST", path: "/v1/tenants/{id}/erase", url: "/v1/tenants/acme/erase", key: "admin", body: `{"parts":{"user":"u1"}}`, status: 200},
	{method: "POST", path: "/v1/tenants/{id}/erase", url: "/v1/tenants/acme/erase", key: "tenant", body: `{"parts":{"user":"u1"}}`, status: 403},

	// Sessions.
	{method: "PUT", path: "/v1/tenants/{id}/sessions", url: "/v1/tenants/acme/sessions", key: "tenant", body: `{}`, status: 201, save: map[string]string{"id": "session"}},
	{method: "PUT", path: "/v1/tenants/{id}/sessions", url: "/v1/tenants/acme/sessions", key: "other", body: `{}`, status: 403},
	{method: "GET", path: "/v1/tenants/{id}/sessions/{session}", url: "/v1/tenants/acme/sessions/{session}", key: "tenant", status: 200},
	{method: "GET", path: "/v1/tenants/{id}/sessions/{session}", url: "/v1/tenants/acme/sessions/nosuch", key: "tenant", status: 404},
	{method: "GET", path: "/v1/ws/admit", url: "/v1/ws/admit?tenant=acme&session={session}", key: "none", status: 200},
	{method: "GET", path: "/v1/ws", url: "/v1/ws?tenant=acme&session={session}", key: "none", status: 101, ws: true},
	{method: "GET", path: "/v1/tenants/{id}/connections/{conn}", url: "/v1/tenants/acme/connections/{conn}", key: "tenant", status: 200},
	{method: "PUT", path: "/v1/tenants/{id}", url: "/v1/tenants/acme", key: "admin", body: `{"id":"acme","settings":{"tenantConnections":1}}`, status: 200},
	{method: "GET", path: "/v1/ws/admit", url: "/v1/ws/admit?tenant=acme&session={session}", key: "none", status: 429},
	{method: "GET", path: "/v1/ws", url: "/v1/ws?tenant=acme&session={session}", key: "none", status: 429},
	{method: "POST", path: "/v1/tenants/{id}/connections/{conn}", url: "/v1/tenants/acme/connections/{conn}", key: "tenant", body: `{"hello":1}`, status: 200},
	{method: "DELETE", path: "/v1/tenants/{id}/connections/{conn}", url: "/v1/tenants/acme/connections/{conn}?code=4000&reason=bye", key: "tenant", status: 200},
	{method: "GET", path: "/v1/ws/admit", url: "/v1/ws/admit?tenant=acme&session=nosuch", key: "none", status: 403},
	{method: "GET", path: "/v1/ws", url: "/v1/ws", key: "none", status: 400},
	{method: "GET", path: "/v1/ws", url: "/v1/ws?tenant=acme&session=nosuch", key: "none", status: 403},
	{method: "GET", path: "/v1/tenants/{id}/connections/{conn}", url: "/v1/tenants/acme/connections/nosuch", key: "tenant", status: 410},
	{method: "POST", path: "/v1/tenants/{id}/connections/{conn}", url: "/v1/tenants/acme/connections/nosuch", key: "tenant", body: `{"hello":1}`, status: 410},
	{method: "POST", path: "/v1/tenants/{id}/connections/{conn}", url: "/v1/tenants/acme/connections/nosuch", key: "tenant", body: `not json`, status: 400},
	{method: "DELETE", path: "/v1/tenants/{id}/connections/{conn}", url: "/v1/tenants/acme/connections/nosuch", key: "tenant", status: 410},
	{method: "DELETE", path: "/v1/tenants/{id}/connections/{conn}", url: "/v1/tenants/acme/connections/nosuch?code=1", key: "tenant", status: 400},
	{method: "POST", path: "/v1/tenants/{id}/sessions/{session}/changed", url: "/v1/tenants/acme/sessions/{session}/changed", key: "admin", status: 200},
	{method: "POST", path: "/v1/tenants/{id}/sessions/{session}/gone", url: "/v1/tenants/acme/sessions/{session}/gone", key: "admin", status: 200},
	{method: "POST", path: "/v1/tenants/{id}/sessions/{session}/deliver", url: "/v1/tenants/acme/sessions/{session}/deliver", key: "admin", headers: map[string]string{"Sluice-Frames": "2"}, body: `{}`, status: 200},
	{method: "POST", path: "/v1/tenants/{id}/sessions/{session}/deliver", url: "/v1/tenants/acme/sessions/{session}/deliver", key: "admin", body: `hi`, status: 400},
	{method: "DELETE", path: "/v1/tenants/{id}/sessions/{session}", url: "/v1/tenants/acme/sessions/{session}", key: "tenant", status: 200},
	{method: "DELETE", path: "/v1/tenants/{id}/sessions/{session}", url: "/v1/tenants/acme/sessions/{session}", key: "tenant", status: 404},

	// Insight.
	{method: "GET", path: "/v1/insight", url: "/v1/insight", key: "admin", status: 200},
	{method: "GET", path: "/v1/insight/top", url: "/v1/insight/top?policy=search", key: "admin", status: 200},
	{method: "GET", path: "/v1/insight/history", url: "/v1/insight/history", key: "admin", status: 200},
	{method: "GET", path: "/v1/insight/gateway", url: "/v1/insight/gateway", key: "admin", status: 200},
	{method: "GET", path: "/v1/tenants/{id}/insight", url: "/v1/tenants/acme/insight", key: "tenant", status: 200},
	{method: "GET", path: "/v1/tenants/{id}/insight/top", url: "/v1/tenants/acme/insight/top?policy=search", key: "tenant", status: 200},
	{method: "GET", path: "/v1/tenants/{id}/insight/history", url: "/v1/tenants/acme/insight/history", key: "tenant", status: 200},
	{method: "GET", path: "/v1/insight", url: "/v1/insight", key: "tenant", status: 403},
	{method: "POST", path: "/v1/insight/try", url: "/v1/insight/try", key: "admin", body: `{"policy":{"name":"search","algorithm":"fixed_window","limit":1,"window":"1h"}}`, status: 200},
	{method: "POST", path: "/v1/insight/try", url: "/v1/insight/try", key: "admin", body: `{"policy":{"name":"p","algorithm":"fixed_window","limit":5,"window":"1m"}}`, status: 404},
	{method: "POST", path: "/v1/insight/try", url: "/v1/insight/try", key: "admin", body: `{}`, status: 400},
	{method: "POST", path: "/v1/insight/try", url: "/v1/insight/try", key: "admin", body: `{"policy":{"name":"` + strings.Repeat("x", 2<<20) + `"}}`, status: 413},
	{method: "POST", path: "/v1/insight/try", url: "/v1/insight/try", key: "tenant", body: `{"policy":{"name":"p","algorithm":"fixed_window","limit":5,"window":"1m"}}`, status: 403},
	{method: "POST", path: "/v1/tenants/{id}/insight/try", url: "/v1/tenants/acme/insight/try", key: "tenant", body: `{"policy":{"name":"search","algorithm":"fixed_window","limit":1,"window":"1h"}}`, status: 200},
	{method: "POST", path: "/v1/tenants/{id}/insight/try", url: "/v1/tenants/acme/insight/try", key: "tenant", body: `{"policy":{"name":"p","algorithm":"fixed_window","limit":5,"window":"1m"}}`, status: 404},
	{method: "POST", path: "/v1/tenants/{id}/insight/try", url: "/v1/tenants/acme/insight/try", key: "tenant", body: `{}`, status: 400},
	{method: "POST", path: "/v1/tenants/{id}/insight/try", url: "/v1/tenants/acme/insight/try", key: "tenant", body: `{"policy":{"name":"` + strings.Repeat("x", 2<<20) + `"}}`, status: 413},
	{method: "GET", path: "/v1/insight/stream", url: "/v1/insight/stream", key: "admin", status: 200, stream: true},
	{method: "GET", path: "/v1/insight/stream", url: "/v1/insight/stream", key: "tenant", status: 403},
	{method: "GET", path: "/v1/tenants/{id}/insight/stream", url: "/v1/tenants/acme/insight/stream", key: "tenant", status: 200, stream: true},
	// A tenant's keys hold at most 4 streams (insighthttp's default): the
	// fifth is refused, whatever the closed one's count. Until the node has
	// let the closed one go, the fourth is refused, and asked again.
	{method: "GET", path: "/v1/tenants/{id}/insight/stream", url: "/v1/tenants/acme/insight/stream", key: "tenant", status: 200, stream: true, hold: true, await: true},
	{method: "GET", path: "/v1/tenants/{id}/insight/stream", url: "/v1/tenants/acme/insight/stream", key: "tenant", status: 200, stream: true, hold: true, await: true},
	{method: "GET", path: "/v1/tenants/{id}/insight/stream", url: "/v1/tenants/acme/insight/stream", key: "tenant", status: 200, stream: true, hold: true, await: true},
	{method: "GET", path: "/v1/tenants/{id}/insight/stream", url: "/v1/tenants/acme/insight/stream", key: "tenant", status: 200, stream: true, hold: true, await: true},
	{method: "GET", path: "/v1/tenants/{id}/insight/stream", url: "/v1/tenants/acme/insight/stream", key: "tenant", status: 429},
}

// teardown runs after steps and the sweeps.
var teardown = []step{
	// Keys and tenants deleted last.
	{method: "DELETE", path: "/v1/tenants/{id}/keys/{key}", url: "/v1/tenants/acme/keys/nosuch", key: "admin", status: 404},
	{method: "DELETE", path: "/v1/tenants/{id}/keys/{key}", url: "/v1/tenants/acme/keys/{keyid}", key: "other", status: 403},
	{method: "DELETE", path: "/v1/tenants/{id}/keys/{key}", url: "/v1/tenants/acme/keys/{keyid}", key: "tenant", status: 200},
	{method: "DELETE", path: "/v1/tenants/{id}", url: "/v1/tenants/acme", key: "admin", status: 200},
	{method: "DELETE", path: "/v1/tenants/{id}", url: "/v1/tenants/acme", key: "admin", status: 404},
	{method: "DELETE", path: "/v1/tenants/{id}", url: "/v1/tenants/other", key: "none", status: 401},
}

// unavailable are the requests to a server whose store stops answering
// (stop, run before the first that needs it stopped): first, while it
// answers, a tenant, its key, a session and a connection of it on this
// node. Then /gone reads the session of the connection and fails, where a
// node holding no connection of a session reads nothing and answers 200.
// An upstream's acquire and proxied call are refused 503 once the node's
// share in the store has lapsed (await): a fault, never a shortage. The
// upstreams' calls are the admin's, so that no tenant key is read.
func unavailable(stop func()) []step {
	closed := `{"name":"closed-c","algorithm":"concurrency","limit":5,"failMode":"closed"}`
	out := []step{
		{method: "POST", path: "/v1/tenants", url: "/v1/tenants", key: "admin", body: `{"id":"acme"}`, status: 201},
		{method: "POST", path: "/v1/tenants/{id}/keys", url: "/v1/tenants/acme/keys", key: "admin", body: `{}`, status: 201, save: map[string]string{"token": "tenant"}},
		{method: "PUT", path: "/v1/tenants/{id}/sessions", url: "/v1/tenants/acme/sessions", key: "tenant", body: `{}`, status: 201, save: map[string]string{"id": "session"}},
		{method: "GET", path: "/v1/ws", url: "/v1/ws?tenant=acme&session={session}", key: "none", status: 101, ws: true},

		{method: "POST", path: "/v1/tenants/{id}/sessions/{session}/gone", url: "/v1/tenants/acme/sessions/{session}/gone", key: "admin", status: 503, before: stop},
		{method: "POST", path: "/v1/tenants/{id}/sessions/{session}/gone", url: "/v1/tenants/acme/sessions/nosuch/gone", key: "admin", status: 200},
		{method: "GET", path: "/readyz", url: "/readyz", key: "none", status: 503},
		{method: "POST", path: "/v1/check", url: "/v1/check", key: "admin", body: `{"tenant":"acme","checks":[{"key":"k","policy":{"name":"closed","algorithm":"fixed_window","limit":5,"window":"1m","failMode":"closed"}}]}`, status: 503},
		{method: "POST", path: "/v1/leases", url: "/v1/leases", key: "admin", body: `{"tenant":"acme","policy":` + closed + `,"keyValue":"k"}`, status: 503},
		{method: "POST", path: "/v1/leases/{token}/renew", url: "/v1/leases/t1/renew", key: "admin", body: `{"tenant":"acme","policy":` + closed + `}`, status: 503},
		{method: "DELETE", path: "/v1/leases/{token}", url: "/v1/leases/t1", key: "admin", body: `{"tenant":"acme","policy":` + closed + `}`, status: 503},
		{method: "POST", path: "/v1/tenants/{id}/erase", url: "/v1/tenants/acme/erase", key: "admin", body: `{"parts":{"user":"u1"}}`, status: 503},
		{method: "POST", path: "/v1/upstreams/{name}/acquire", url: "/v1/upstreams/partner/acquire", key: "admin", body: `{"tenant":"acme","key":"k","maxWait":"1s"}`, status: 503, await: true},
	}
	for _, m := range proxyMethods {
		out = append(out, step{method: m, path: "/v1/upstreams/{name}/proxy/{path}", url: "/v1/upstreams/relay/proxy/x", key: "admin",
			headers: map[string]string{"Sluice-Tenant": "acme", "Sluice-Key": "k", "Sluice-Max-Wait": "1s"}, status: 503, await: true})
	}
	return out
}

// maxStreams is the insight streams a node holds at most (insighthttp's
// default).
const maxStreams = 256

// streamCap holds maxStreams of the admin's insight streams open, then
// asks one more: 429. It runs after teardown, whose deletion of acme's
// key ends the tenant streams steps hold; until the node has let them go
// the admin's last streams are refused, and asked again (await).
func streamCap() []step {
	out := make([]step, 0, maxStreams+1)
	st := step{method: "GET", path: "/v1/insight/stream", url: "/v1/insight/stream", key: "admin", status: 200, stream: true, hold: true, await: true}
	for range maxStreams {
		out = append(out, st)
	}
	return append(out, step{method: "GET", path: "/v1/insight/stream", url: "/v1/insight/stream", key: "admin", status: 429})
}

// redis is a redis-server of the test's own.
type redis struct {
	addr string
	stop func() // ends it, at once
}

// redisServer starts a redis-server, skipping the test without one (but
// in CI, CI=true, where it fails).
func redisServer(t *testing.T) redis {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("redis-server: %v", err)
		}
		t.Skipf("redis-server: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	host, port, _ := strings.Cut(addr, ":")
	cmd := exec.Command(bin, "--bind", host, "--port", port, "--save", "", "--appendonly", "no", "--dir", t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop := func() { once.Do(func() { cmd.Process.Kill(); cmd.Wait() }) }
	t.Cleanup(stop)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) { // a poll's period
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server never listened on %s", addr)
		}
	}
	return redis{addr: addr, stop: stop}
}

// dummy fills the path parameters of a sweep's request: the requests are
// refused before the values are looked up.
var dummy = strings.NewReplacer("{id}", "other", "{conn}", "c1", "{session}", "s1", "{key}", "k1",
	"{token}", "t1", "{name}", "partner", "{path}", "x")

// proxyMethods are the methods of the upstream proxy.
var proxyMethods = []string{"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"}

// proxySteps are, for every method of the upstream proxy, a call of an
// unknown upstream (404), a bad cost (400), a call the relay cannot grant
// in 1ms (429: steps spent its hour's one), a call of the dead upstream
// (502), and one the slow upstream never answers (504, at its 100ms
// timeout).
func proxySteps() []step {
	var out []step
	for _, m := range proxyMethods {
		p := "/v1/upstreams/{name}/proxy/{path}"
		out = append(out,
			step{method: m, path: p, url: "/v1/upstreams/nowhere/proxy/x", key: "tenant", headers: map[string]string{"Sluice-Key": "k"}, status: 404},
			step{method: m, path: p, url: "/v1/upstreams/relay/proxy/x", key: "tenant", headers: map[string]string{"Sluice-Key": "k", "Sluice-Cost": "abc"}, status: 400},
			step{method: m, path: p, url: "/v1/upstreams/relay/proxy/x", key: "tenant", headers: map[string]string{"Sluice-Key": "k", "Sluice-Max-Wait": "1ms"}, status: 429},
			step{method: m, path: p, url: "/v1/upstreams/dead/proxy/x", key: "tenant", headers: map[string]string{"Sluice-Key": "k"}, status: 502},
			step{method: m, path: p, url: "/v1/upstreams/slow/proxy/never/x", key: "tenant", headers: map[string]string{"Sluice-Key": "k"}, status: 504},
		)
	}
	return out
}

// sweeps are a request without a key of every operation documenting 401
// (but /metrics, which asks one only with tenant labels); a request with
// acme's key of every operation under /v1/tenants/{id}/ documenting 403,
// reaching tenant "other"; for every operation documenting 403, a request
// naming a host the server does not answer; and, for those that change
// state, a page's request of another origin (both refused before any
// route, browser.go).
func sweeps(doc *openapi3.T) []step {
	var out []step
	paths := doc.Paths.InMatchingOrder()
	slices.Sort(paths)
	for _, path := range paths {
		item := doc.Paths.Value(path)
		for _, method := range []string{"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"} {
			op := item.GetOperation(method)
			if op == nil {
				continue
			}
			if op.Responses.Value("401") != nil && path != "/metrics" {
				out = append(out, step{method: method, path: path, url: dummy.Replace(path), key: "none", status: 401})
			}
			if op.Responses.Value("403") != nil && strings.HasPrefix(path, "/v1/tenants/{id}/") {
				out = append(out, step{method: method, path: path, url: dummy.Replace(path), key: "tenant", body: "{}", status: 403})
			}
			if op.Responses.Value("403") != nil {
				out = append(out, step{method: method, path: path, url: dummy.Replace(path), key: "admin",
					host: "elsewhere.example", status: 403})
			}
			if op.Responses.Value("403") != nil && method != "GET" && method != "HEAD" && method != "OPTIONS" {
				out = append(out, step{method: method, path: path, url: dummy.Replace(path), key: "admin", body: "{}",
					headers: map[string]string{"Origin": "https://elsewhere.example"}, status: 403})
			}
		}
	}
	return out
}

// TestResponsesMatchDocument sends each step to a real server and
// validates the status, headers and body of its answer against the
// document's operation (kin-openapi's openapi3filter.ValidateResponse,
// JSON Schema 2020-12 for a 3.1 document).
func TestResponsesMatchDocument(t *testing.T) {
	doc := load(t)
	_, base := serve(t)
	exercised := map[string]bool{}
	run(t, doc, base, slices.Concat(steps, proxySteps(), sweeps(doc), teardown, streamCap()), exercised)
	if !t.Failed() {
		// The store fails: a Redis store whose server is stopped. (Without
		// redis-server, the test is skipped here, but in CI.)
		rdb := redisServer(t)
		_, base := serve(t, func(c *server.Config) {
			c.Store, c.Redis = "redis", server.RedisConfig{URL: "redis://" + rdb.addr + "/0"}
		})
		run(t, doc, base, unavailable(rdb.stop), exercised)
	}
	if t.Failed() {
		return
	}
	covered(t, doc, exercised)
}

// run sends each step to base and validates its answer against doc,
// noting each "METHOD path status" answered as the step wants in
// exercised.
func run(t *testing.T, doc *openapi3.T, base string, all []step, exercised map[string]bool) {
	t.Helper()
	vars := map[string]string{}
	fill := func(s string) string {
		for k, v := range vars {
			s = strings.ReplaceAll(s, "{"+k+"}", v)
		}
		return s
	}
	// send sends st once: its request, its answer, and the answer's body
	// if it is read.
	send := func(name string, st step) (*http.Request, *http.Response, []byte) {
		var body io.Reader
		if st.body != "" {
			body = strings.NewReader(fill(st.body))
		}
		req, err := http.NewRequest(st.method, base+fill(st.url), body)
		if err != nil {
			t.Fatal(err)
		}
		if st.body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if st.host != "" {
			req.Host = st.host
		}
		for k, v := range st.headers {
			req.Header.Set(k, v)
		}
		switch st.key {
		case "admin":
			req.Header.Set("Authorization", "Bearer "+adminKey)
		case "tenant", "other":
			req.Header.Set("Authorization", "Bearer "+vars[st.key])
		}
		if st.ws {
			conn, resp, err := websocket.Dial(context.Background(), "ws"+strings.TrimPrefix(req.URL.String(), "http"), nil)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			t.Cleanup(func() { conn.CloseNow() })
			vars["conn"] = resp.Header.Get("Sluice-Connection")
			return req, resp, nil
		}
		ctx, cancel := context.WithCancel(context.Background())
		resp, err := http.DefaultClient.Do(req.WithContext(ctx))
		if err != nil {
			cancel()
			t.Fatalf("%s: %v", name, err)
		}
		var got []byte
		if !st.stream {
			got, _ = io.ReadAll(resp.Body)
		}
		if st.hold && resp.StatusCode == st.status {
			t.Cleanup(func() { cancel(); resp.Body.Close() })
		} else {
			cancel()
			resp.Body.Close()
		}
		return req, resp, got
	}
	for i, st := range all {
		name := fmt.Sprintf("%d %s %s %d", i, st.method, st.url, st.status)
		item := doc.Paths.Value(st.path)
		if item == nil || item.GetOperation(st.method) == nil {
			t.Fatalf("%s: the document has no %s %s", name, st.method, st.path)
		}
		op := item.GetOperation(st.method)
		if st.before != nil {
			st.before()
		}
		req, resp, got := send(name, st)
		for deadline := time.Now().Add(time.Minute); st.await && resp.StatusCode != st.status && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond) // a poll's period
			req, resp, got = send(name, st)
		}
		if resp.StatusCode != st.status {
			t.Errorf("%s: status %d, want %d: %s", name, resp.StatusCode, st.status, short(got))
			continue
		}
		exercised[fmt.Sprintf("%s %s %d", st.method, st.path, st.status)] = true
		in := &openapi3filter.ResponseValidationInput{
			RequestValidationInput: &openapi3filter.RequestValidationInput{
				Request: req,
				Route:   &routers.Route{Spec: doc, Path: st.path, PathItem: item, Method: st.method, Operation: op},
			},
			Status: resp.StatusCode,
			Header: resp.Header,
			Body:   io.NopCloser(bytes.NewReader(got)),
			Options: &openapi3filter.Options{
				IncludeResponseStatus: true,
			},
		}
		if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
			t.Errorf("%s: the answer is not the document's: %v\n%s", name, err, short(got))
		}
		if extra := undocumented(op, resp, got); len(extra) > 0 {
			t.Errorf("%s: the answer has fields its schema does not name: %v\n%s", name, extra, short(got))
		}
		for field, as := range st.save {
			var m map[string]any
			if err := json.Unmarshal(got, &m); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			var v any = m
			for _, part := range strings.Split(field, ".") {
				v = v.(map[string]any)[part]
			}
			s, ok := v.(string)
			if !ok {
				t.Fatalf("%s: no string %s in %s", name, field, got)
			}
			vars[as] = s
		}
	}
}

// covered fails the test if a status the document names was not
// exercised: answered by the server as a step wanted, and validated.
func covered(t *testing.T, doc *openapi3.T, exercised map[string]bool) {
	t.Helper()
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			for status := range op.Responses.Map() {
				if r := method + " " + path + " " + status; status != "default" && !exercised[r] {
					t.Errorf("%s is documented, and no step exercises it", r)
				}
			}
		}
	}
}

// undocumented returns the top-level fields of a JSON object answer that
// its schema in op does not name, where the schema is one object that
// says nothing of other fields: a field a schema leaves out (as Error
// would a connect refusal's limit and retryAfter) is a drift the
// validator alone lets pass.
func undocumented(op *openapi3.Operation, resp *http.Response, body []byte) []string {
	r := op.Responses.Status(resp.StatusCode)
	if r == nil || r.Value == nil {
		return nil
	}
	mt := r.Value.Content.Get("application/json")
	if mt == nil || mt.Schema == nil || mt.Schema.Value == nil {
		return nil
	}
	s := mt.Schema.Value
	if len(s.Properties) == 0 || s.OneOf != nil || s.AnyOf != nil || s.AllOf != nil ||
		s.AdditionalProperties.Has != nil || s.AdditionalProperties.Schema != nil {
		return nil
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return nil
	}
	var extra []string
	for k := range m {
		if _, ok := s.Properties[k]; !ok {
			extra = append(extra, k)
		}
	}
	slices.Sort(extra)
	return extra
}
