package insight

import (
	"context"
	"fmt"
	"strings"
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
	top := rec.TopKeys("api", "", time.Time{}, 3)
	if len(top.Denials) == 0 || top.Denials[0].Tenant != "acme" || top.Denials[0].Key != "abuser" || top.Denials[0].Count != 17 {
		t.Errorf("denials: %+v, want acme's abuser first with 17", top.Denials)
	}
	if len(top.Hits) != 3 || top.Hits[0].Key != "abuser" {
		t.Errorf("hits: %+v", top.Hits)
	}
	mine := rec.TopKeys("api", "beta", time.Time{}, 10)
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

// A tenant inventing policy names (inline checks) takes its own budget of
// slots and no more: a configured policy used later has its series, its
// heaviest keys and a sample to try a limit on, and another tenant's
// invented policy still has its slots.
func TestRecorderInventedPoliciesBounded(t *testing.T) {
	now := time.Unix(2_000_000, 0)
	rec := NewRecorder(RecorderOptions{Now: func() time.Time { return now }, Policies: 8, TenantPolicies: 4, Sampled: 4,
		Configured: func(p string) bool { return p == "login" }})
	decide := func(tenant string, c sluice.Check, o engine.Outcome) {
		rec.DecidedKey(tenant, &c, 1, o)
	}
	for i := range 1000 {
		decide("mallory", sluice.Check{Policy: sluice.Policy{Name: fmt.Sprint("junk-", i)}, Key: "k", Space: sluice.SpaceInline}, engine.Allowed)
	}
	decide("acme", sluice.Check{Policy: sluice.Policy{Name: "mine"}, Key: "u1", Space: sluice.SpaceInline}, engine.Denied)
	for range 3 {
		decide("acme", sluice.Check{Policy: sluice.Policy{Name: "login"}, Key: "alice"}, engine.Denied)
	}
	if pts := rec.Policy("login", now.Unix(), now.Unix()); pts[0].Counts[engine.Denied] != 3 {
		t.Errorf("login's second: %+v, want 3 denied", pts)
	}
	if pts := rec.Policy("mine", now.Unix(), now.Unix()); pts[0].Counts[engine.Denied] != 1 {
		t.Errorf("acme's invented policy's second: %+v, want 1 denied", pts)
	}
	if top := rec.TopKeys("login", "", time.Time{}, 5); len(top.Denials) != 1 || top.Denials[0].Key != "alice" || top.Denials[0].Count != 3 {
		t.Errorf("login's denials: %+v", top.Denials)
	}
	if top := rec.TopKeys("mine", "acme", time.Time{}, 5); len(top.Denials) != 1 || top.Denials[0].Key != "u1" {
		t.Errorf("acme's invented policy's denials: %+v", top.Denials)
	}
	if _, ok := rec.Try(&sluice.Policy{Name: "login", Algorithm: sluice.FixedWindow, Limit: 1, Window: time.Minute}, "", time.Time{}, 60, 5); !ok {
		t.Error("login has no sample to try a limit on")
	}
	kept := 0
	for _, p := range rec.Policies() {
		if strings.HasPrefix(p, "junk-") {
			kept++
		}
	}
	if kept != 4 {
		t.Errorf("mallory's invented policies with a series: %d, want its budget of 4", kept)
	}
	if pts := rec.Policy(Other, now.Unix(), now.Unix()); pts[0].Counts[engine.Allowed] != 996 {
		t.Errorf("(other): %+v, want mallory's 996 past its budget", pts)
	}
	// An hour on, mallory's idle slots are given up to newcomers.
	now = now.Add(time.Hour + time.Second)
	for i := range 8 {
		decide(fmt.Sprint("t", i), sluice.Check{Policy: sluice.Policy{Name: "fresh"}, Key: "k", Space: sluice.SpaceInline}, engine.Allowed)
	}
	if pts := rec.Policy("fresh", now.Unix(), now.Unix()); pts[0].Counts[engine.Allowed] != 8 {
		t.Errorf("fresh after an hour: %+v, want 8 of 8 tenants counted", pts)
	}
}

// A tenant deleted and created again under the same id is a new tenant:
// the keys of the one before are not its, whether this node was told of
// the deletion (Forget) or only reads with the new creation time.
func TestRecorderTenantCreatedAgain(t *testing.T) {
	now := time.Unix(2_000_000, 0)
	for _, told := range []bool{false, true} {
		t.Run(fmt.Sprint("told=", told), func(t *testing.T) {
			rec := NewRecorder(RecorderOptions{Now: func() time.Time { return now }})
			login := sluice.Check{Policy: sluice.Policy{Name: "login"}, Key: "old-owner@example.com"}
			inline := sluice.Check{Policy: sluice.Policy{Name: "mine"}, Key: "old-secret", Space: sluice.SpaceInline}
			other := sluice.Check{Policy: sluice.Policy{Name: "login"}, Key: "beta-user"}
			for range 5 {
				rec.DecidedKey("acme", &login, 1, engine.Denied)
				rec.DecidedKey("acme", &inline, 1, engine.Allowed)
				rec.DecidedKey("beta", &other, 1, engine.Allowed)
			}
			now = now.Add(10 * time.Second)
			created := now
			if told {
				rec.Forget("acme")
			}
			now = now.Add(time.Second)
			fresh := sluice.Check{Policy: sluice.Policy{Name: "login"}, Key: "new-owner"}
			rec.DecidedKey("acme", &fresh, 1, engine.Allowed)
			top := rec.TopKeys("login", "acme", created, 10)
			if len(top.Hits) != 1 || top.Hits[0].Key != "new-owner" || len(top.Denials) != 0 {
				t.Errorf("the new acme's login keys: %+v %+v, want new-owner alone", top.Hits, top.Denials)
			}
			if top := rec.TopKeys("mine", "acme", created, 10); len(top.Hits) != 0 {
				t.Errorf("the new acme reads the old one's invented policy: %+v", top.Hits)
			}
			p := sluice.Policy{Name: "login", Algorithm: sluice.FixedWindow, Limit: 1, Window: time.Hour}
			if tried, _ := rec.Try(&p, "acme", created, 3600, 10); tried.Events != 1 || len(tried.Who) != 0 {
				t.Errorf("try for the new acme: %+v, want its one event", tried)
			}
			if top := rec.TopKeys("login", "beta", time.Time{}, 10); len(top.Hits) != 1 || top.Hits[0].Count != 5 {
				t.Errorf("beta's keys after acme's deletion: %+v", top.Hits)
			}
		})
	}
}

// BenchmarkRecorderTenants is the recorder's cost per decision when each
// goroutine is a tenant of its own on a policy of its own: what they share
// is the recorder alone, and counting takes no lock they all take.
func BenchmarkRecorderTenants(b *testing.B) {
	var ns atomic.Int64
	start := time.Unix(2_000_000, 0)
	rec := NewRecorder(RecorderOptions{Now: func() time.Time { return start.Add(time.Duration(ns.Add(50_000))) }})
	var next atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		g := next.Add(1)
		tenant := fmt.Sprint("tenant-", g)
		checks := make([]sluice.Check, 100)
		for i := range checks {
			checks[i] = sluice.Check{Policy: sluice.Policy{Name: fmt.Sprint("policy-", g)}, Key: fmt.Sprint("user-", i)}
		}
		for i := 0; pb.Next(); i++ {
			rec.DecidedKey(tenant, &checks[i%len(checks)], 1, engine.Allowed)
		}
	})
}
