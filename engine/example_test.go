package engine_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/store/memstore"
)

// A prepared limiter validates its tenant and policy once, then decides
// by key: the fast path of a service limiting in process. A denial says
// how long to wait, by the engine's clock (fixed here).
func ExampleEngine_Prepare_retryAfter() {
	s := memstore.New(memstore.Options{})
	defer s.Close()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	e := engine.New(s, engine.Options{Now: func() time.Time { return now }})
	p, err := e.Prepare("acme", sluice.Policy{Name: "api", Algorithm: sluice.FixedWindow, Limit: 3, Window: time.Minute})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for range 4 {
		d, err := p.Allow(ctx, "user-42", 1)
		if err != nil {
			panic(err)
		}
		fmt.Println(d.Allowed, d.Remaining, d.RetryAfter)
	}
	// Output:
	// true 2 0s
	// true 1 0s
	// true 0 0s
	// false 0 1m0s
}
