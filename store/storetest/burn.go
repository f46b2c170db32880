package storetest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/engine"
)

// The burn cases (sluice.Check.Burn): the engine over the store, as the
// Envoy service's reference counting uses it, and the store's own part,
// burn ops (sluice.Op.Burn), which it decides as admissions.

// burnEngine returns an engine on s whose clock reads *now.
func burnEngine(s sluice.Store, now *time.Time) *engine.Engine {
	return engine.New(s, engine.Options{Now: func() time.Time { return *now }})
}

// burnPolicies are the fixed windows a burn applies to: a fixed window,
// and a quota by calendar month, with the end of t0's window of each.
func burnPolicies(limit int64) []struct {
	p   sluice.Policy
	end time.Time
} {
	return []struct {
		p   sluice.Policy
		end time.Time
	}{
		{sluice.Policy{Name: "fixed", Algorithm: sluice.FixedWindow, Limit: limit, Window: time.Minute}, t0.Truncate(time.Minute).Add(time.Minute)},
		{sluice.Policy{Name: "month", Algorithm: sluice.Quota, Limit: limit, Calendar: sluice.Month}, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)},
	}
}

func check(t *testing.T, e *engine.Engine, hits int64, cs ...sluice.Check) sluice.Result {
	t.Helper()
	res, err := e.Check(context.Background(), sluice.Request{Tenant: "acme", Hits: hits, Checks: cs})
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	return res
}

// count reads the count of c's counter as the store holds it: a burn op
// of zero hits answers the limit less the count, past the limit too.
func count(t *testing.T, s sluice.Store, now time.Time, c *sluice.Check) int64 {
	t.Helper()
	d := apply(t, s, now, sluice.Op{Key: c.CounterKey("acme"), Policy: &c.Policy, Burn: true})[0]
	return c.Policy.Limit - d.Remaining
}

// testBurnPastLimit: burnt hits pass the limit and stay; the counter
// denies while it is past, reads included, until its window turns.
func testBurnPastLimit(t *testing.T, s sluice.Store) {
	for _, tc := range burnPolicies(10) {
		t.Run(tc.p.Name, func(t *testing.T) {
			now := t0
			e := burnEngine(s, &now)
			c := sluice.Check{Policy: tc.p, Key: "u", Burn: true}
			plain := sluice.Check{Policy: tc.p, Key: "u"}
			if d := check(t, e, 8, c).Decision; !d.Allowed || d.Remaining != 2 {
				t.Fatalf("8 of 10: %+v, want allowed with 2 left", d)
			}
			res := check(t, e, 5, c)
			if d := res.Decision; res.Allowed || d.Allowed || d.Remaining != 0 || d.RetryAfter != tc.end.Sub(now) || !d.ResetAt.Equal(tc.end) {
				t.Fatalf("then 5: %+v, want denied, 0 left, retry at the window's end %v", d, tc.end)
			}
			if n := count(t, s, now, &c); n != 13 {
				t.Fatalf("count %d after 8 and 5 burnt, want 13", n)
			}
			// Reads deny, a burn's and a plain check's alike, and a plain
			// check's hits are not added.
			for _, cc := range []sluice.Check{c, plain} {
				if d := check(t, e, 0, cc).Decision; d.Allowed || d.Remaining != 0 || d.RetryAfter != tc.end.Sub(now) {
					t.Fatalf("read (burn %v) at 13 of 10: %+v, want denied", cc.Burn, d)
				}
			}
			if d := check(t, e, 1, plain).Decision; d.Allowed || d.Remaining != 0 {
				t.Fatalf("plain hit at 13 of 10: %+v, want denied", d)
			}
			if n := count(t, s, now, &c); n != 13 {
				t.Fatalf("count %d after reads and a plain denial, want 13", n)
			}
			if d := check(t, e, 1, c).Decision; d.Allowed || d.Remaining != 0 {
				t.Fatalf("burn at 13 of 10: %+v, want denied", d)
			}
			if n := count(t, s, now, &c); n != 14 {
				t.Fatalf("count %d after one more burnt, want 14", n)
			}
			// The window's turn resets the count.
			now = tc.end
			if d := check(t, e, 0, c).Decision; !d.Allowed || d.Remaining != 10 {
				t.Fatalf("read in the next window: %+v, want 10 left", d)
			}
			if d := check(t, e, 4, c).Decision; !d.Allowed || d.Remaining != 6 {
				t.Fatalf("4 burnt in the next window: %+v, want 6 left", d)
			}
		})
	}
}

// testBurnAtLimit: a count of exactly the limit admits a read and denies
// one more hit, as the reference's "count after increase > limit".
func testBurnAtLimit(t *testing.T, s sluice.Store) {
	for _, tc := range burnPolicies(10) {
		t.Run(tc.p.Name, func(t *testing.T) {
			now := t0
			e := burnEngine(s, &now)
			c := sluice.Check{Policy: tc.p, Key: "at", Burn: true}
			if d := check(t, e, 10, c).Decision; !d.Allowed || d.Remaining != 0 {
				t.Fatalf("10 of 10: %+v, want allowed with 0 left", d)
			}
			if d := check(t, e, 0, c).Decision; !d.Allowed || d.Remaining != 0 || d.RetryAfter != 0 {
				t.Fatalf("read at 10 of 10: %+v, want allowed with 0 left", d)
			}
			if d := check(t, e, 1, c).Decision; d.Allowed || d.Remaining != 0 {
				t.Fatalf("1 more at 10 of 10: %+v, want denied", d)
			}
			if d := check(t, e, 0, c).Decision; d.Allowed {
				t.Fatalf("read at 11 of 10: %+v, want denied", d)
			}
		})
	}
}

// testBurnBesideOthers: a burn check adds its hits whatever the request's
// other checks decide; those stay all-or-nothing among themselves.
func testBurnBesideOthers(t *testing.T, s sluice.Store) {
	now := t0
	e := burnEngine(s, &now)
	win := func(name string, limit int64) sluice.Policy {
		return sluice.Policy{Name: name, Algorithm: sluice.FixedWindow, Limit: limit, Window: time.Minute}
	}
	burn := sluice.Check{Policy: win("burn", 10), Key: "u", Burn: true}
	full := sluice.Check{Policy: win("full", 2), Key: "u"}
	loose := sluice.Check{Policy: win("loose", 5), Key: "u"}
	gcra := sluice.Check{Policy: sluice.Policy{Name: "gcra", Algorithm: sluice.TokenBucket, Limit: 5, Window: time.Minute}, Key: "u"}
	check(t, e, 2, full)

	// A normal check denies: the burn check still adds, the other normal
	// checks do not.
	res := check(t, e, 2, burn, full, loose, gcra)
	if res.Allowed || res.Decision.Policy != "full" {
		t.Fatalf("beside a full policy: %+v, want denied by it", res)
	}
	if d := res.Decisions[0]; !d.Allowed || d.Remaining != 8 {
		t.Fatalf("burn check: %+v, want allowed with 8 left", d)
	}
	if n := count(t, s, now, &burn); n != 2 {
		t.Fatalf("burn count %d, want 2: the burn check's hits are added whatever the others decide", n)
	}
	for _, c := range []sluice.Check{full, loose, gcra} {
		if d := check(t, e, 0, c).Decision; d.Remaining != c.Policy.Limit-2*b2i(c.Policy.Name == "full") {
			t.Fatalf("%s: %+v, want nothing added by a denied request", c.Policy.Name, d)
		}
	}

	// The burn check denies: the normal ones, all admitting, still count,
	// and the request is denied.
	check(t, e, 8, burn)
	res = check(t, e, 1, burn, loose, gcra)
	if res.Allowed || res.Decision.Policy != "burn" || res.Decisions[0].Allowed {
		t.Fatalf("burn check past its limit: %+v, want the request denied by it", res)
	}
	if !res.Decisions[1].Allowed || res.Decisions[1].Remaining != 4 || !res.Decisions[2].Allowed || res.Decisions[2].Remaining != 4 {
		t.Fatalf("normal checks beside a burn denial: %+v, want both admitted with 4 left", res.Decisions[1:])
	}
	if n := count(t, s, now, &burn); n != 11 {
		t.Fatalf("burn count %d, want 11", n)
	}
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// testBurnSaturates: a burnt count stops at sluice.MaxBurnCount.
func testBurnSaturates(t *testing.T, s sluice.Store) {
	for _, tc := range burnPolicies(sluice.MaxLimit) {
		t.Run(tc.p.Name, func(t *testing.T) {
			now := t0
			e := burnEngine(s, &now)
			c := sluice.Check{Policy: tc.p, Key: "sat", Burn: true}
			for i, want := range []int64{sluice.MaxLimit, sluice.MaxBurnCount, sluice.MaxBurnCount, sluice.MaxBurnCount} {
				d := check(t, e, sluice.MaxHits, c).Decision
				if d.Allowed != (i == 0) || d.Remaining != 0 {
					t.Fatalf("burn %d of %d hits: %+v", i, int64(sluice.MaxHits), d)
				}
				if n := count(t, s, now, &c); n != want {
					t.Fatalf("count %d after burn %d, want %d", n, i, want)
				}
			}
			if d := check(t, e, 0, c).Decision; d.Allowed || d.Remaining != 0 {
				t.Fatalf("read at the bound: %+v, want denied with 0 left", d)
			}
		})
	}
}

// testBurnRefused: a burn of any algorithm but a fixed window is refused,
// naming the check, and the request changes nothing.
func testBurnRefused(t *testing.T, s sluice.Store) {
	now := t0
	e := burnEngine(s, &now)
	fixed := sluice.Check{Policy: sluice.Policy{Name: "fixed", Algorithm: sluice.FixedWindow, Limit: 10, Window: time.Minute}, Key: "r", Burn: true}
	for _, p := range Policies(10) {
		if p.Algorithm == sluice.FixedWindow {
			continue
		}
		t.Run(p.Name, func(t *testing.T) {
			other := sluice.Check{Policy: p, Key: "r"}
			check(t, e, 3, other)
			other.Burn = true
			_, err := e.Check(context.Background(), sluice.Request{Tenant: "acme", Hits: 1, Checks: []sluice.Check{fixed, other}})
			if sluice.KindOf(err) != sluice.KindInvalid || !strings.Contains(err.Error(), "checks[1].burn") || !strings.Contains(err.Error(), p.Name) {
				t.Fatalf("burn on %s: error %v, want invalid, naming checks[1].burn and the policy", p.Name, err)
			}
			other.Burn = false
			if d := check(t, e, 0, other).Decision; d.Remaining != 7 {
				t.Fatalf("%s after the refused request: %+v, want 7 left", p.Name, d)
			}
			if n := count(t, s, now, &fixed); n != 0 {
				t.Fatalf("fixed window beside the refused check: count %d, want 0", n)
			}
		})
	}
}

// testBurnExactUnderConcurrency: workers burning one counter land each
// burn once (BurnRace), and workers burning two counters in one request
// land every burn on both, atomically: each request sees both counters
// at one count.
func testBurnExactUnderConcurrency(t *testing.T, s sluice.Store) {
	const workers, each = 32, 10
	ps := burnPolicies(100)
	for _, tc := range ps {
		c := sluice.Check{Policy: tc.p, Key: "race"}
		BurnRace(t, []sluice.Store{s}, &c.Policy, c.CounterKey("acme"), workers, each)
	}
	a := sluice.Check{Policy: ps[0].p, Key: "pair"}
	b := sluice.Check{Policy: ps[1].p, Key: "pair"}
	ops := []sluice.Op{
		{Key: a.CounterKey("acme"), Policy: &a.Policy, Hits: 1, Burn: true},
		{Key: b.CounterKey("acme"), Policy: &b.Policy, Hits: 1, Burn: true},
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			dst := make([]sluice.Decision, len(ops))
			for range each {
				if err := s.Apply(context.Background(), t0, ops, dst); err != nil {
					errs <- err
					return
				}
				if !dst[0].Allowed || !dst[1].Allowed || dst[0].Remaining != dst[1].Remaining {
					errs <- fmt.Errorf("a pair of burns answered %+v", dst)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, c := range []*sluice.Check{&a, &b} {
		if n := count(t, s, t0, c); n != workers*each {
			t.Fatalf("%s: count %d after %d pairs burnt, want %d", c.Policy.Name, n, workers*each, workers*each)
		}
	}
}

// BurnRace runs workers goroutines that each burn one hit (sluice.Op.Burn)
// on k under p each times, worker w through stores[w%len(stores)]: nodes
// sharing one table or server. It fails t unless every burn landed once:
// the counts the burns saw are each count from 1 to workers*each exactly
// once, so exactly the limit of them were within it. An Apply that fails
// unavailable (out of attempts under contention: nothing written) is
// asked again.
func BurnRace(t *testing.T, stores []sluice.Store, p *sluice.Policy, k sluice.Key, workers, each int) {
	t.Helper()
	var mu sync.Mutex
	seen := make([]int, workers*each+1)
	var wg sync.WaitGroup
	for w := range workers {
		s := stores[w%len(stores)]
		wg.Go(func() {
			dst := make([]sluice.Decision, 1)
			for n := 0; n < each; n++ {
				err := s.Apply(context.Background(), t0, []sluice.Op{{Key: k, Policy: p, Hits: 1, Burn: true}}, dst)
				if sluice.KindOf(err) == sluice.KindUnavailable {
					n--
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if c := p.Limit - dst[0].Remaining; dst[0].Allowed && c >= 1 && c < int64(len(seen)) {
					seen[c]++
				} else {
					seen[0]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for c := range seen {
		if want := min(c, 1); seen[c] != want {
			t.Fatalf("%s: count %d seen %d times, want %d (every burn lands once)", p.Name, c, seen[c], want)
		}
	}
	dst := make([]sluice.Decision, 1)
	if err := stores[0].Apply(context.Background(), t0, []sluice.Op{{Key: k, Policy: p, Burn: true}}, dst); err != nil || p.Limit-dst[0].Remaining != int64(workers*each) {
		t.Fatalf("%s: read %+v %v, want %d counted", p.Name, dst[0], err, workers*each)
	}
}
