package metrics

import (
	"context"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/store/memstore"
)

// TestDecidedCounts: decisions are counted by policy label and outcome,
// from many goroutines, inline policies under "inline", and no series
// exists for an outcome never seen.
func TestDecidedCounts(t *testing.T) {
	d := NewDecisions(func(policy string) bool { return policy == "api" })
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 100 {
				d.Decided("api", engine.Allowed)
				d.Decided("mine", engine.Denied)
				d.Decided("yours", engine.Denied)
			}
			d.Decided("api", engine.FailedClosed)
		})
	}
	wg.Wait()
	reg := prometheus.NewRegistry()
	reg.MustRegister(d)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "sluice_decisions_total" {
			continue
		}
		for _, s := range f.GetMetric() {
			var policy, outcome string
			for _, l := range s.GetLabel() {
				switch l.GetName() {
				case "policy":
					policy = l.GetValue()
				case "outcome":
					outcome = l.GetValue()
				}
			}
			got[policy+" "+outcome] = s.GetCounter().GetValue()
		}
	}
	want := map[string]float64{"api allowed": 400, "inline denied": 800, "api failed_closed": 4}
	if len(got) != len(want) {
		t.Fatalf("series %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
}

// TestDecisionTenantLabels: with tenant labels on, a real engine's
// decisions carry their tenant's label for the first n tenants decided on,
// and "other" past them, never more; a deleted tenant's series go and its
// place is free, and its id decided on again starts from nothing. Off,
// no decision has a tenant label.
func TestDecisionTenantLabels(t *testing.T) {
	ctx := context.Background()
	policy := sluice.Policy{Name: "api", Algorithm: sluice.FixedWindow, Limit: 1000, Window: time.Minute}
	decide := func(e *engine.Engine, tenant string, n int) {
		t.Helper()
		for range n {
			if _, err := e.Check(ctx, sluice.Request{Tenant: tenant, Hits: 1, Checks: []sluice.Check{{Policy: policy, Key: "k"}}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	d := NewDecisions(func(p string) bool { return p == "api" })
	e := engine.New(memstore.New(memstore.Options{}), engine.Options{Observer: d})
	decide(e, "acme", 1)
	if got := gather(t, d); got["sluice_decisions_total{outcome=allowed,policy=api}"] != 1 {
		t.Fatalf("labels off: %v", got)
	}

	d = NewDecisionsByTenant(func(p string) bool { return p == "api" }, 2)
	e = engine.New(memstore.New(memstore.Options{}), engine.Options{Observer: engine.Observers(d)})
	decide(e, "acme", 3)
	decide(e, "globex", 2)
	decide(e, "initech", 4)
	decide(e, "umbrella", 1)
	want := map[string]float64{
		"sluice_decisions_total{outcome=allowed,policy=api,tenant=acme}":    3,
		"sluice_decisions_total{outcome=allowed,policy=api,tenant=globex}":  2,
		"sluice_decisions_total{outcome=allowed,policy=api,tenant=(other)}": 5,
	}
	decisionSeries := func() map[string]float64 {
		out := map[string]float64{}
		for k, v := range gather(t, d) {
			if strings.HasPrefix(k, "sluice_decisions_total") {
				out[k] = v
			}
		}
		return out
	}
	if got := decisionSeries(); !maps.Equal(got, want) {
		t.Errorf("labels for 2: %v, want %v", got, want)
	}
	// acme deleted: its series go, its place is initech's, the first
	// decided on after; acme created again is "other", a new tenant with
	// no place.
	d.ForgetTenant("acme")
	decide(e, "initech", 1)
	decide(e, "acme", 1)
	want = map[string]float64{
		"sluice_decisions_total{outcome=allowed,policy=api,tenant=globex}":  2,
		"sluice_decisions_total{outcome=allowed,policy=api,tenant=initech}": 1,
		"sluice_decisions_total{outcome=allowed,policy=api,tenant=(other)}": 6,
	}
	if got := decisionSeries(); !maps.Equal(got, want) {
		t.Errorf("after acme's deletion: %v, want %v", got, want)
	}
	// initech deleted and created again, with a place free: it starts at 0.
	d.ForgetTenant("initech")
	decide(e, "initech", 1)
	if got := decisionSeries()["sluice_decisions_total{outcome=allowed,policy=api,tenant=initech}"]; got != 1 {
		t.Errorf("initech created again: %v decisions, want 1", got)
	}
}

// TestGatewayForgetTenant: a deleted tenant's gateway series go, and its
// label's place is free for the next tenant admitted.
func TestGatewayForgetTenant(t *testing.T) {
	g := NewGateway()
	g.LabelTenants(1)
	g.Connect("acme", "admitted")
	g.Message("acme", "accepted")
	g.Connect("globex", "admitted")
	got := gather(t, g)
	if got["sluice_gateway_connects_total{outcome=admitted,tenant=acme}"] != 1 || got["sluice_gateway_connects_total{outcome=admitted,tenant=(other)}"] != 1 {
		t.Fatalf("before: %v", got)
	}
	g.ForgetTenant("acme")
	g.Connect("globex", "admitted")
	got = gather(t, g)
	for k := range got {
		if strings.Contains(k, "tenant=acme") {
			t.Errorf("acme's series %s stays after its deletion", k)
		}
	}
	if got["sluice_gateway_connects_total{outcome=admitted,tenant=globex}"] != 1 {
		t.Errorf("globex did not take acme's place: %v", got)
	}
}
