package insight

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/store/memstore"
)

// Decisions through a real engine are counted per second by tenant and
// policy, and the key that is denied most comes out first, with its
// tenant; a tenant's view lists its own keys only.
func TestRecorderThroughTheEngine(t *testing.T) {
	now := time.Unix(2_000_000, 0)
	clock := func() time.Time { return now }
	rec := NewRecorder(RecorderOptions{Now: clock, TopK: 10})
	e := engine.New(memstore.New(memstore.Options{Now: clock}), engine.Options{Now: clock, Observer: rec})
	p := sluice.Policy{Name: "api", Algorithm: sluice.FixedWindow, Limit: 3, Window: time.Minute}
	decide := func(tenant, key string) {
		t.Helper()
		if _, err := e.Check(context.Background(), sluice.Request{Tenant: tenant, Hits: 1, Checks: []sluice.Check{{Policy: p, Key: key}}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 20 {
		decide("acme", "abuser") // 3 allowed, 17 denied
		decide("acme", fmt.Sprint("u", i))
	}
	now = now.Add(time.Second)
	for range 5 {
		decide("beta", "b1") // 3 allowed, 2 denied
	}
	pts := rec.Tenant("acme", now.Unix()-1, now.Unix())
	if len(pts) != 2 || pts[0].Counts[engine.Allowed] != 23 || pts[0].Counts[engine.Denied] != 17 || pts[1].Counts[engine.Allowed] != 0 {
		t.Errorf("acme's seconds: %+v, want 23 allowed and 17 denied in the first", pts)
	}
	if pts := rec.Policy("api", now.Unix(), now.Unix()); pts[0].Counts[engine.Allowed] != 3 || pts[0].Counts[engine.Denied] != 2 {
		t.Errorf("api's second second: %+v", pts)
	}
	top := rec.TopKeys("api", "", 3)
	if len(top.Denials) == 0 || top.Denials[0].Tenant != "acme" || top.Denials[0].Key != "abuser" || top.Denials[0].Count != 17 {
		t.Errorf("denials: %+v, want acme's abuser first with 17", top.Denials)
	}
	if len(top.Hits) != 3 || top.Hits[0].Key != "abuser" {
		t.Errorf("hits: %+v", top.Hits)
	}
	mine := rec.TopKeys("api", "beta", 10)
	for _, k := range append(mine.Hits, mine.Denials...) {
		if k.Tenant != "beta" {
			t.Errorf("beta's view lists %+v", k)
		}
	}
	if len(mine.Denials) != 1 || mine.Denials[0].Key != "b1" || mine.Denials[0].Count != 2 {
		t.Errorf("beta's denials: %+v", mine.Denials)
	}
}

// BenchmarkRecorderDecidedKey is the recorder's cost per decision under
// `sluice bench`'s traffic: one tenant, one policy, 1,000 keys in turn,
// from the clock (a second every 20,000 decisions).
func BenchmarkRecorderDecidedKey(b *testing.B) {
	var ns atomic.Int64
	start := time.Unix(2_000_000, 0)
	rec := NewRecorder(RecorderOptions{Now: func() time.Time { return start.Add(time.Duration(ns.Add(50_000))) }})
	checks := make([]sluice.Check, 1000)
	for i := range checks {
		checks[i] = sluice.Check{Policy: sluice.Policy{Name: "bench"}, Key: fmt.Sprint("user-", i)}
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for i := 0; pb.Next(); i++ {
			rec.DecidedKey("bench", &checks[i%len(checks)], 1, engine.Allowed)
		}
	})
}
