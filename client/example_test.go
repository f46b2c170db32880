package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
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

// exampleServer serves examples/sluice.yaml, as `sluice serve --config
// examples/sluice.yaml` would.
func exampleServer() (url string, stop func()) {
	cfg, err := config.Load("../examples/sluice.yaml")
	if err != nil {
		panic(err)
	}
	s := memstore.New(memstore.Options{})
	srv := httptest.NewServer(httpapi.New(httpapi.Options{Limiter: engine.New(s, engine.Options{}),
		Tenancy: tenancy.New(tenancy.Options{Store: &memstore.Tenants{}, Sessions: &memstore.Sessions{}, Audit: &memstore.Audit{}, Config: func() *config.Config { return cfg }})}))
	return srv.URL, func() { srv.Close(); s.Close() }
}

func ExampleClient_CheckNamed() {
	url, stop := exampleServer()
	defer stop()
	c := client.New(url, client.Options{})
	// acme is of the premium tier, whose models limit is 50 a minute.
	res, err := c.CheckNamed(context.Background(), client.Named{
		Tenant: "acme", Endpoint: "models", Key: map[string]string{"user": "u-42"}, Hits: 1,
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Allowed, res.Decision.Limit, res.Decision.Remaining, res.Header.Get("RateLimit-Policy"))
	// Output: true 50 49 "models";q=50;w=60
}

func ExampleClient_AcquireLease() {
	url, stop := exampleServer()
	defer stop()
	c := client.New(url, client.Options{})
	ctx := context.Background()
	req := client.LeaseRequest{Tenant: "acme", Policy: "reports-running"}
	lease, err := c.AcquireLease(ctx, req)
	if err != nil || !lease.Allowed {
		panic(fmt.Sprint(lease, err))
	}
	// ... run the report, renewing the lease before its TTL passes ...
	d, err := c.ReleaseLease(ctx, req, lease.Token)
	if err != nil {
		panic(err)
	}
	fmt.Println(d.Remaining, "of", d.Limit, "free")
	// Output: 5 of 5 free
}

// Wait for a fair share of a third-party API's quota before calling it:
// examples/sluice.yaml's partner-api allows 100 calls a second, shared
// among the customers that acquire it.
func ExampleClient_Acquire() {
	cfg, err := config.Load("../examples/sluice.yaml")
	if err != nil {
		panic(err)
	}
	up := cfg.Upstreams["partner-api"]
	q, err := fairshare.NewUpstream(up.Scheduler(), fairshare.Options{})
	if err != nil {
		panic(err)
	}
	defer q.Close()
	s := memstore.New(memstore.Options{})
	defer s.Close()
	srv := httptest.NewServer(httpapi.New(httpapi.Options{
		Limiter:   engine.New(s, engine.Options{}),
		Tenancy:   tenancy.New(tenancy.Options{Store: &memstore.Tenants{}, Sessions: &memstore.Sessions{}, Audit: &memstore.Audit{}, Config: func() *config.Config { return cfg }}),
		Upstreams: map[string]httpapi.Upstream{"partner-api": {Quota: q, MaxWait: up.MaxWait}},
	}))
	defer srv.Close()

	c := client.New(srv.URL, client.Options{})
	// Wait up to a second for customer u-42 of tenant acme's turn.
	if _, err := c.Acquire(context.Background(), "partner-api", "acme", "u-42", 1, time.Second); err != nil {
		var short *client.UpstreamError
		if errors.As(err, &short) {
			fmt.Println("no share in time; retry after", short.RetryAfter)
			return
		}
		panic(err)
	}
	fmt.Println("granted: call partner-api now")
	// Output: granted: call partner-api now
}

// A client is a sluice.Limiter: policies given inline count on the
// server, as the in-process engine counts them, and a cancelled context
// is the caller's error, never a decision.
func ExampleClient_Check() {
	url, stop := exampleServer()
	defer stop()
	c := client.New(url, client.Options{})
	req := sluice.Request{Tenant: "acme", Hits: 1, Checks: []sluice.Check{{
		Policy: sluice.Policy{Name: "my-chat", Algorithm: sluice.FixedWindow, Limit: 2, Window: time.Minute},
		Key:    "user-42",
	}}}
	for range 3 {
		res, err := c.Check(context.Background(), req)
		if err != nil {
			panic(err)
		}
		fmt.Println(res.Allowed, res.Decision.Remaining)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := c.Check(ctx, req)
	fmt.Println(errors.Is(err, context.Canceled))
	// Output:
	// true 1
	// true 0
	// false 0
	// true
}
