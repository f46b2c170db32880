package metrics

import (
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/engine"
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
