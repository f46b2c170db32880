package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/fairshare"
	"github.com/sluicehq/sluice/forward"
	"github.com/sluicehq/sluice/httpapi"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/tenancy"
	"github.com/sluicehq/sluice/wire"
)

// TestAcquire: an upstream of one unit a minute grants the first request
// through the client, refuses the next with an *UpstreamError that is
// fairshare.ErrShortage, as an embedded Upstream's refusal is; an unknown
// upstream is not found.
func TestAcquire(t *testing.T) {
	cfg, err := config.Parse("c.yaml", []byte("upstreams:\n  api: {rate: 1, window: 1m}\n"))
	if err != nil {
		t.Fatal(err)
	}
	q, err := fairshare.NewUpstream(cfg.Upstreams["api"].Scheduler(), fairshare.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	s := memstore.New(memstore.Options{})
	defer s.Close()
	srv := httptest.NewServer(httpapi.New(httpapi.Options{
		Limiter:   engine.New(s, engine.Options{}),
		Tenancy:   tenancy.New(tenancy.Options{Store: &memstore.Tenants{}, Sessions: &memstore.Sessions{}, Audit: &memstore.Audit{}, Config: func() *config.Config { return cfg }}),
		Upstreams: map[string]httpapi.Upstream{"api": {Quota: q, MaxWait: cfg.Upstreams["api"].MaxWait}},
	}))
	defer srv.Close()
	c := client.New(srv.URL, client.Options{})
	ctx := context.Background()

	if _, err := c.Acquire(ctx, "api", "acme", "u1", 1, 0); err != nil {
		t.Fatalf("first: %v", err)
	}
	_, err = c.Acquire(ctx, "api", "acme", "u1", 1, 50*time.Millisecond)
	var short *client.UpstreamError
	if !errors.As(err, &short) || !errors.Is(err, fairshare.ErrShortage) || short.Reason != "shortage" || short.Upstream != "api" || short.RetryAfter <= 50*time.Millisecond {
		t.Fatalf("second: %v (%+v)", err, short)
	}
	if _, err := c.Acquire(ctx, "nope", "acme", "u1", 1, 0); sluice.KindOf(err) != sluice.KindNotFound {
		t.Fatalf("unknown upstream: %v", err)
	}
	if _, err := c.Acquire(ctx, "api", "acme", "\xff", 1, 0); sluice.FieldOf(err) != "key" {
		t.Fatalf("invalid UTF-8 key: %v", err)
	}
	if _, err := c.Acquire(ctx, "api", "acme", "u1", 5, 0); sluice.KindOf(err) != sluice.KindInvalid || sluice.FieldOf(err) != "cost" {
		t.Fatalf("cost past the burst: %v", err)
	}
}

// TestProxy: a call through the server's proxy returns the upstream's
// answer as it is, its own 502 included; a refusal before it is sent is an
// *UpstreamError; the server's own failure (the upstream slow past its
// timeout) a *sluice.Error, not the upstream's answer; an absolute URL is
// refused before anything is sent.
func TestProxy(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/base/broken":
			w.WriteHeader(http.StatusBadGateway)
		case "/base/slow":
			<-r.Context().Done()
		default:
			b, _ := io.ReadAll(r.Body)
			fmt.Fprintf(w, "%s %s %s %s", r.Method, r.URL.Path, r.URL.RawQuery, b)
		}
	}))
	defer up.Close()
	cfg, err := config.Parse("c.yaml", []byte(fmt.Sprintf("upstreams:\n  api: {rate: 3, window: 1m, burst: 3, proxy: {url: %q, timeout: 200ms}}\n", up.URL+"/base")))
	if err != nil {
		t.Fatal(err)
	}
	uc := cfg.Upstreams["api"]
	q, err := fairshare.NewUpstream(uc.Scheduler(), fairshare.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	tg, _ := uc.Target()
	fw, err := forward.New(tg)
	if err != nil {
		t.Fatal(err)
	}
	defer fw.Close()
	s := memstore.New(memstore.Options{})
	defer s.Close()
	srv := httptest.NewServer(httpapi.New(httpapi.Options{
		Limiter:   engine.New(s, engine.Options{}),
		Tenancy:   tenancy.New(tenancy.Options{Store: &memstore.Tenants{}, Sessions: &memstore.Sessions{}, Audit: &memstore.Audit{}, Config: func() *config.Config { return cfg }}),
		Upstreams: map[string]httpapi.Upstream{"api": {Quota: q, MaxWait: uc.MaxWait, Margin: uc.Margin, Proxy: fw}},
	}))
	defer srv.Close()
	c := client.New(srv.URL, client.Options{})
	ctx := context.Background()
	call := client.ProxyCall{Tenant: "acme", Key: "u1", MaxWait: 50 * time.Millisecond}
	send := func(method, target, body string) (*http.Response, error) {
		r, err := http.NewRequest(method, target, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		return c.Proxy(ctx, "api", call, r)
	}

	resp, err := send("POST", "items/a%20b?x=1", "hi")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "POST /base/items/a b x=1 hi" {
		t.Fatalf("call: %d %q", resp.StatusCode, b)
	}
	resp, err = send("GET", "broken", "")
	if err != nil || resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("the upstream's own 502: %v %v", resp, err)
	}
	resp.Body.Close()
	if _, err := send("GET", "slow", ""); sluice.KindOf(err) != sluice.KindUnavailable || !strings.Contains(err.Error(), wire.ProxyTimeout) {
		t.Fatalf("a slow upstream: %v", err)
	}
	_, err = send("GET", "x", "") // the minute's three units are spent
	var short *client.UpstreamError
	if !errors.As(err, &short) || !errors.Is(err, fairshare.ErrShortage) || short.Upstream != "api" {
		t.Fatalf("a refusal: %v", err)
	}
	if _, err := send("GET", "http://evil.example/x", ""); sluice.FieldOf(err) != "path" {
		t.Fatalf("an absolute URL: %v", err)
	}
}
