package client_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/fairshare"
	"github.com/sluicehq/sluice/httpapi"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/tenancy"
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
