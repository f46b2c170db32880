package insight

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/engine"
)

// TestForgetKeys: an erased key leaves a policy's top lists and its
// sample; another key, and the same key of another tenant, stay.
func TestForgetKeys(t *testing.T) {
	now := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	r := NewRecorder(RecorderOptions{Now: func() time.Time { return now }})
	p := sluice.Policy{Name: "api", Algorithm: sluice.FixedWindow, Limit: 1, Window: time.Minute}
	for _, tk := range [][2]string{{"acme", "alice"}, {"acme", "bob"}, {"globex", "alice"}} {
		c := sluice.Check{Policy: p, Key: tk[1]}
		for range 3 {
			r.DecidedKey(tk[0], &c, 1, engine.Denied)
		}
	}
	r.ForgetKeys("acme", []string{"alice"})
	left := map[string]bool{}
	for _, kc := range r.TopKeys("api", "", time.Time{}, 10).Hits {
		left[kc.Tenant+"/"+kc.Key] = true
	}
	if left["acme/alice"] || !left["acme/bob"] || !left["globex/alice"] {
		t.Errorf("top list after the erase: %v, want acme/bob and globex/alice alone", left)
	}
	tried, ok := r.Try(&p, "acme", time.Time{}, 3600, 10)
	if !ok {
		t.Fatal("no sample of api")
	}
	for _, w := range tried.Who {
		if w.Key == "alice" {
			t.Errorf("the sample still holds acme's alice: %+v", tried.Who)
		}
	}
	if tried.Keys != 1 {
		t.Errorf("acme's sample holds %d keys after the erase, want bob's alone", tried.Keys)
	}
}
