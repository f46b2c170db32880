package client_test

import (
	"context"
	"fmt"
	"net/http/httptest"

	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/engine"
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
