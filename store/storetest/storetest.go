// Package storetest is the conformance suite every sluice.Store must pass,
// unchanged: the in-memory store, the embedded durable store and DynamoDB.
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) sluice.Store { return memstore.New(memstore.Options{}) })
//	}
//
// Time is always an argument: the suite passes explicit instants to the store
// and never sleeps. Every store's answers must equal the pure algorithms' of
// package algo, which are themselves held to naive reference models.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
)

// NewStore returns a new, empty store for one test. Run closes it.
type NewStore func(t *testing.T) sluice.Store

// Run runs the whole suite against stores made by newStore.
func Run(t *testing.T, newStore NewStore) {
	tests := []struct {
		name string
		fn   func(*testing.T, sluice.Store)
	}{
		{"MatchesAlgorithms", testMatchesAlgorithms},
		{"AllOrNothing", testAllOrNothing},
		{"SameKeyTwice", testSameKeyTwice},
		{"TenantsAreWalls", testTenantsAreWalls},
		{"PeekWritesNothing", testPeekWritesNothing},
		{"LiftPenalty", testLiftPenalty},
		{"Expiry", testExpiry},
		{"Leases", testLeases},
		{"LeaseReplaced", testLeaseReplaced},
		{"ExactUnderConcurrency", testExactUnderConcurrency},
		{"AllOrNothingUnderConcurrency", testAllOrNothingUnderConcurrency},
		{"ManyOps", testManyOps},
		{"EraseKey", testEraseKey},
		{"BurnPastLimit", testBurnPastLimit},
		{"BurnAtLimit", testBurnAtLimit},
		{"BurnBesideOthers", testBurnBesideOthers},
		{"BurnSaturates", testBurnSaturates},
		{"BurnRefused", testBurnRefused},
		{"BurnExactUnderConcurrency", testBurnExactUnderConcurrency},
		{"Closed", testClosed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t)
			t.Cleanup(func() { s.Close() })
			tt.fn(t, s)
		})
	}
}

// t0 is an arbitrary instant, aligned to nothing in particular.
var t0 = time.Date(2026, 11, 21, 13, 37, 11, 123_456_789, time.UTC)

// Policies returns one policy of each algorithm with the given limit, named
// after its algorithm.
func Policies(limit int64) []sluice.Policy {
	ps := make([]sluice.Policy, 0, len(sluice.Algorithms))
	for _, alg := range sluice.Algorithms {
		p := sluice.Policy{Name: alg.String(), Algorithm: alg, Limit: limit, Window: time.Minute}
		switch alg {
		case sluice.Concurrency:
			p.Window, p.LeaseTTL = 0, 30*time.Second
		case sluice.Quota:
			p.Window = time.Hour
		}
		ps = append(ps, p)
	}
	return ps
}

func apply(t *testing.T, s sluice.Store, now time.Time, ops ...sluice.Op) []sluice.Decision {
	t.Helper()
	dst := make([]sluice.Decision, len(ops))
	if err := s.Apply(context.Background(), now, ops, dst); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	return dst
}

func key(tenant, policy, value string) sluice.Key {
	return sluice.Key{Tenant: tenant, Policy: policy, Value: value}
}

// keyIn is key in a space and for an algorithm.
func keyIn(space sluice.Space, alg sluice.Algorithm, tenant, policy, value string) sluice.Key {
	return sluice.Key{Tenant: tenant, Space: space, Algorithm: alg, Policy: policy, Value: value}
}

// peek reads a key's decision without consuming.
func peek(t *testing.T, s sluice.Store, now time.Time, k sluice.Key, p *sluice.Policy) sluice.Decision {
	t.Helper()
	return apply(t, s, now, sluice.Op{Key: k, Policy: p})[0]
}

// testMatchesAlgorithms drives every algorithm through a random sequence of
// requests and clock steps and checks that the store answers exactly as the
// pure algorithm does on a state kept by the test.
func testMatchesAlgorithms(t *testing.T, s sluice.Store) {
	for _, p := range Policies(7) {
		t.Run(p.Name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(7, uint64(p.Algorithm)))
			k := key("acme", p.Name, "user-1")
			var ref algo.State
			now := t0
			for i := range 300 {
				now = now.Add(time.Duration(r.Int64N(int64(p.Window/4) + int64(p.LeaseTTL/4) + 1)))
				hits := r.Int64N(4)
				want, wd := algo.Decide(&p, ref, now.UnixNano(), hits)
				got := apply(t, s, now, sluice.Op{Key: k, Policy: &p, Hits: hits})[0]
				if !sameDecision(got, wd) {
					t.Fatalf("request %d (hits %d at +%v):\n got %+v\nwant %+v", i, hits, now.Sub(t0), got, wd)
				}
				if wd.Allowed {
					ref = want
				}
			}
		})
	}
}

// sameDecision compares decisions, times by instant.
func sameDecision(a, b sluice.Decision) bool {
	return a.Policy == b.Policy && a.Allowed == b.Allowed && a.Limit == b.Limit && a.Remaining == b.Remaining &&
		a.ResetAt.Equal(b.ResetAt) && a.RetryAfter == b.RetryAfter &&
		a.Lease.ID == b.Lease.ID && a.Lease.ExpiresAt.Equal(b.Lease.ExpiresAt)
}

// testAllOrNothing: a request that one policy denies consumes from none,
// for every algorithm on the admitting side.
func testAllOrNothing(t *testing.T, s sluice.Store) {
	full := sluice.Policy{Name: "full", Algorithm: sluice.FixedWindow, Limit: 5, Window: time.Minute}
	fk := key("acme", "full", "u")
	apply(t, s, t0, sluice.Op{Key: fk, Policy: &full, Hits: 3})

	ps := Policies(10)
	ops := []sluice.Op{}
	for i := range ps {
		ops = append(ops, sluice.Op{Key: key("acme", ps[i].Name, "u"), Policy: &ps[i], Hits: 3})
	}
	before := make([]sluice.Decision, len(ops))
	for i, op := range ops {
		before[i] = peek(t, s, t0, op.Key, op.Policy)
	}
	// The denying policy sits in the middle: policies before and after it
	// would have admitted.
	mid := len(ops) / 2
	ops = append(ops[:mid], append([]sluice.Op{{Key: fk, Policy: &full, Hits: 3}}, ops[mid:]...)...)
	ds := apply(t, s, t0, ops...)
	for i, d := range ds {
		if i == mid {
			if d.Allowed || d.RetryAfter <= 0 {
				t.Fatalf("the full policy admitted: %+v", d)
			}
			continue
		}
		if !d.Allowed {
			t.Fatalf("%s denied: %+v", d.Policy, d)
		}
		if d.Remaining != 10 || d.Lease.ID != 0 {
			t.Errorf("%s: denied request reports remaining %d lease %d, want the unchanged 10 and no lease", d.Policy, d.Remaining, d.Lease.ID)
		}
	}
	for i, op := range append(ops[:mid], ops[mid+1:]...) {
		if after := peek(t, s, t0, op.Key, op.Policy); !sameDecision(after, before[i]) {
			t.Errorf("%s changed by a denied request:\nbefore %+v\nafter  %+v", op.Policy.Name, before[i], after)
		}
	}
	if d := peek(t, s, t0, fk, &full); d.Remaining != 2 {
		t.Errorf("full policy: remaining %d, want 2", d.Remaining)
	}

	// An admitted multi-policy request consumes from every policy.
	ops = ops[:0]
	for i := range ps {
		ops = append(ops, sluice.Op{Key: key("acme", ps[i].Name, "u"), Policy: &ps[i], Hits: 4})
	}
	for _, d := range apply(t, s, t0, ops...) {
		if !d.Allowed || d.Remaining != 6 {
			t.Errorf("%s: %+v, want allowed with 6 remaining", d.Policy, d)
		}
	}
}

// testSameKeyTwice: two ops on one key in one request see each other.
func testSameKeyTwice(t *testing.T, s sluice.Store) {
	for _, p := range Policies(5) {
		k := key("acme", p.Name, "twice")
		ds := apply(t, s, t0, sluice.Op{Key: k, Policy: &p, Hits: 2}, sluice.Op{Key: k, Policy: &p, Hits: 2})
		if !ds[0].Allowed || !ds[1].Allowed || ds[1].Remaining != 1 {
			t.Errorf("%s: %+v", p.Name, ds)
		}
		// 3 + 3 exceeds 5 with 1 left: the whole request is denied and
		// nothing is consumed.
		ds = apply(t, s, t0, sluice.Op{Key: k, Policy: &p, Hits: 1}, sluice.Op{Key: k, Policy: &p, Hits: 1})
		if !ds[0].Allowed || ds[1].Allowed {
			t.Errorf("%s: second pair %+v, want the second op denied", p.Name, ds)
		}
		if d := peek(t, s, t0, k, &p); d.Remaining != 1 {
			t.Errorf("%s: remaining %d after a denied pair, want 1", p.Name, d.Remaining)
		}
	}
}

// testTenantsAreWalls: the same policy name and key under two tenants, or
// two epochs of one tenant, are two counters, and keys that would collide
// if joined naively do not.
func testTenantsAreWalls(t *testing.T, s sluice.Store) {
	p := sluice.Policy{Name: "p", Algorithm: sluice.FixedWindow, Limit: 1, Window: time.Minute}
	keys := []sluice.Key{
		key("a", "p", "k"), key("b", "p", "k"),
		key("a:p", "", "k"), key("a", "p:k", ""), key("", "a:p", "k"), key("a", "p", ":k"),
		key("a\x00p", "k", ""), key("a", "p\x00k", ""),
		// The same names in Sluice's own space, and under other
		// algorithms, are other counters.
		keyIn(sluice.SpaceInternal, 0, "a", "p", "k"),
		keyIn(sluice.SpaceInline, 0, "a", "p", "k"),
		keyIn(sluice.SpacePolicy, sluice.SlidingWindow, "a", "p", "k"),
		keyIn(sluice.SpaceInternal, sluice.SlidingWindow, "a", "p", "k"),
		keyIn(sluice.SpacePolicy, sluice.PenaltyBox, "a", "p", "k"),
		(&sluice.Check{Policy: sluice.Policy{Name: "p"}, Key: "k"}).BoxKey("a"),
		(&sluice.Check{Policy: sluice.Policy{Name: "p"}, Key: "k", Space: sluice.SpaceInline}).BoxKey("a"),
		// A tenant created again under the id of a deleted one (another
		// epoch) has counters of its own, in every space.
		{Tenant: "a", Epoch: 1, Policy: "p", Value: "k"},
		{Tenant: "a", Epoch: 36, Policy: "p", Value: "k"},
		{Tenant: "a", Epoch: 1 << 62, Policy: "p", Value: "k"},
		{Tenant: "a", Epoch: 1, Space: sluice.SpaceInternal, Policy: "p", Value: "k"},
		(&sluice.Check{Policy: sluice.Policy{Name: "p"}, Key: "k", Epoch: 1}).BoxKey("a"),
		{Tenant: "b", Epoch: 1, Policy: "p", Value: "k"},
	}
	for i, k := range keys {
		if d := apply(t, s, t0, sluice.Op{Key: k, Policy: &p, Hits: 1})[0]; !d.Allowed {
			t.Fatalf("key %d %+v shares state with an earlier key", i, k)
		}
	}
	if d := apply(t, s, t0, sluice.Op{Key: keys[0], Policy: &p, Hits: 1})[0]; d.Allowed {
		t.Fatal("tenant a's key admitted twice with a limit of 1")
	}
}

// testLiftPenalty: an op of algo.Lift hits on a penalty box clears it
// and reports what was left of the block.
func testLiftPenalty(t *testing.T, s sluice.Store) {
	box := sluice.Policy{Name: "p", Algorithm: sluice.PenaltyBox, Window: time.Minute,
		Penalty: sluice.Penalty{After: 2, Base: time.Hour, Max: 4 * time.Hour}}
	k := (&sluice.Check{Policy: sluice.Policy{Name: "p"}, Key: "k"}).BoxKey("a")
	apply(t, s, t0, sluice.Op{Key: k, Policy: &box, Hits: 2})
	if d := apply(t, s, t0.Add(time.Second), sluice.Op{Key: k, Policy: &box})[0]; d.Allowed {
		t.Fatal("two offences with After 2 left the key unblocked")
	}
	if d := apply(t, s, t0.Add(2*time.Second), sluice.Op{Key: k, Policy: &box, Hits: algo.Lift})[0]; !d.Allowed || d.RetryAfter != time.Hour-2*time.Second {
		t.Fatalf("lift: %+v; want admitted, with the 59m58s left of the block lifted", d)
	}
	if d := apply(t, s, t0.Add(3*time.Second), sluice.Op{Key: k, Policy: &box})[0]; !d.Allowed {
		t.Fatalf("after a lift the key is still blocked: %+v", d)
	}
	// The lift forgot the history: one offence does not block again.
	apply(t, s, t0.Add(4*time.Second), sluice.Op{Key: k, Policy: &box, Hits: 1})
	if d := apply(t, s, t0.Add(5*time.Second), sluice.Op{Key: k, Policy: &box})[0]; !d.Allowed {
		t.Fatalf("one offence after a lift blocked the key: %+v", d)
	}
}

// testPeekWritesNothing: zero hits read and never consume, never lease.
func testPeekWritesNothing(t *testing.T, s sluice.Store) {
	for _, p := range Policies(3) {
		k := key("acme", p.Name, "peek")
		for range 5 {
			d := peek(t, s, t0, k, &p)
			if !d.Allowed || d.Remaining != 3 || d.Lease.ID != 0 {
				t.Fatalf("%s: peek %+v", p.Name, d)
			}
		}
		if d := apply(t, s, t0, sluice.Op{Key: k, Policy: &p, Hits: 3})[0]; !d.Allowed {
			t.Fatalf("%s: peeks consumed: %+v", p.Name, d)
		}
	}
}

// testExpiry: once a key's state has expired it counts nothing, whether or
// not the store has removed it yet.
func testExpiry(t *testing.T, s sluice.Store) {
	for _, p := range Policies(4) {
		k := key("acme", p.Name, "exp")
		d := apply(t, s, t0, sluice.Op{Key: k, Policy: &p, Hits: 4})[0]
		if !d.Allowed {
			t.Fatalf("%s: %+v", p.Name, d)
		}
		if d := peek(t, s, t0, k, &p); d.Remaining != 0 {
			t.Fatalf("%s: remaining %d right after spending all", p.Name, d.Remaining)
		}
		if d := peek(t, s, d.ResetAt, k, &p); d.Remaining != 4 {
			t.Errorf("%s: at ResetAt remaining %d, want 4", p.Name, d.Remaining)
		}
		later := t0.Add(400 * 24 * time.Hour)
		if d := apply(t, s, later, sluice.Op{Key: k, Policy: &p, Hits: 4})[0]; !d.Allowed {
			t.Errorf("%s: long after, %+v", p.Name, d)
		}
	}
}

func testLeases(t *testing.T, s sluice.Store) {
	ctx := context.Background()
	p := sluice.Policy{Name: "conc", Algorithm: sluice.Concurrency, Limit: 2, LeaseTTL: 10 * time.Second}
	k := key("acme", "conc", "worker")
	a := apply(t, s, t0, sluice.Op{Key: k, Policy: &p, Hits: 1})[0]
	b := apply(t, s, t0, sluice.Op{Key: k, Policy: &p, Hits: 1})[0]
	if !a.Allowed || !b.Allowed || a.Lease.ID == 0 || a.Lease.ID == b.Lease.ID {
		t.Fatalf("leases %+v %+v", a, b)
	}
	if d := apply(t, s, t0, sluice.Op{Key: k, Policy: &p, Hits: 1})[0]; d.Allowed {
		t.Fatalf("third lease of 2 admitted: %+v", d)
	}

	d, err := s.Release(ctx, t0.Add(time.Second), k, &p, a.Lease.ID)
	if err != nil || d.Remaining != 1 {
		t.Fatalf("release: %+v, %v", d, err)
	}
	if _, err := s.Release(ctx, t0.Add(time.Second), k, &p, a.Lease.ID); !errors.Is(err, sluice.ErrLeaseNotFound) {
		t.Fatalf("second release: %v, want ErrLeaseNotFound", err)
	}
	if _, err := s.Renew(ctx, t0, key("acme", "conc", "nobody"), &p, 42); !errors.Is(err, sluice.ErrLeaseNotFound) {
		t.Fatalf("renew of unknown key: %v, want ErrLeaseNotFound", err)
	}

	// b renewed at 9s lives until 19s; without renewal it would be gone at 10s.
	d, err = s.Renew(ctx, t0.Add(9*time.Second), k, &p, b.Lease.ID)
	if err != nil || !d.Lease.ExpiresAt.Equal(t0.Add(19*time.Second)) {
		t.Fatalf("renew: %+v, %v", d, err)
	}
	if d := peek(t, s, t0.Add(15*time.Second), k, &p); d.Remaining != 1 {
		t.Fatalf("renewed lease not held at 15s: remaining %d", d.Remaining)
	}
	// An expired lease returns its capacity by itself and cannot come back.
	if d := peek(t, s, t0.Add(19*time.Second), k, &p); d.Remaining != 2 {
		t.Fatalf("expired lease still held: remaining %d", d.Remaining)
	}
	if _, err := s.Renew(ctx, t0.Add(20*time.Second), k, &p, b.Lease.ID); !errors.Is(err, sluice.ErrLeaseNotFound) {
		t.Fatalf("renewed an expired lease: %v", err)
	}
}

// testExactUnderConcurrency: 64 goroutines race for a limit of 500 at one
// instant; exactly 500 hits are admitted, for every algorithm.
func testExactUnderConcurrency(t *testing.T, s sluice.Store) {
	const limit, workers = 500, 64
	for _, p := range Policies(limit) {
		t.Run(p.Name, func(t *testing.T) {
			k := key("acme", p.Name, "race")
			admitted := race(t, s, workers, func() []sluice.Op {
				return []sluice.Op{{Key: k, Policy: &p, Hits: 1}}
			})
			if admitted != limit {
				t.Fatalf("admitted %d, want exactly %d", admitted, limit)
			}
		})
	}
}

// testAllOrNothingUnderConcurrency: 64 goroutines race with requests on two
// policies, one tighter than the other; the looser one consumed exactly what
// the tighter admitted.
func testAllOrNothingUnderConcurrency(t *testing.T, s sluice.Store) {
	loose := sluice.Policy{Name: "loose", Algorithm: sluice.SlidingWindow, Limit: 500, Window: time.Minute}
	tight := sluice.Policy{Name: "tight", Algorithm: sluice.TokenBucket, Limit: 300, Window: time.Minute}
	lk, tk := key("acme", "loose", "k"), key("acme", "tight", "k")
	admitted := race(t, s, 64, func() []sluice.Op {
		return []sluice.Op{{Key: lk, Policy: &loose, Hits: 1}, {Key: tk, Policy: &tight, Hits: 1}}
	})
	if admitted != 300 {
		t.Fatalf("admitted %d, want 300", admitted)
	}
	if d := peek(t, s, t0, lk, &loose); d.Remaining != 200 {
		t.Fatalf("loose policy has %d remaining, want 200: denied requests consumed", d.Remaining)
	}
}

// race runs workers goroutines that each apply ops() at t0 until denied,
// and returns how many requests were admitted.
func race(t *testing.T, s sluice.Store, workers int, ops func() []sluice.Op) int {
	t.Helper()
	var admitted atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range workers {
		wg.Go(func() {
			o := ops()
			dst := make([]sluice.Decision, len(o))
			<-start
			for {
				if err := s.Apply(context.Background(), t0, o, dst); err != nil {
					failed.Store(err)
					return
				}
				if !dst[0].Allowed || !allAllowed(dst) {
					return
				}
				admitted.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	return int(admitted.Load())
}

func allAllowed(ds []sluice.Decision) bool {
	for _, d := range ds {
		if !d.Allowed {
			return false
		}
	}
	return true
}

func testClosed(t *testing.T, s sluice.Store) {
	p := Policies(1)[0]
	k := key("acme", p.Name, "c")
	apply(t, s, t0, sluice.Op{Key: k, Policy: &p, Hits: 1})
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	err := s.Apply(context.Background(), t0, []sluice.Op{{Key: k, Policy: &p, Hits: 1}}, make([]sluice.Decision, 1))
	if !errors.Is(err, sluice.ErrStoreClosed) {
		t.Fatalf("Apply after Close: %v, want ErrStoreClosed", err)
	}
	if _, err := s.Release(context.Background(), t0, k, &p, 1); !errors.Is(err, sluice.ErrStoreClosed) {
		t.Fatalf("Release after Close: %v, want ErrStoreClosed", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// testManyOps: a request of more ops than sluice.MaxChecks (the engine
// sends a check and its penalty box) is decided like any other.
func testManyOps(t *testing.T, s sluice.Store) {
	ps := Policies(100)
	for _, n := range []int{20, 40} {
		var ops []sluice.Op
		for i := range n {
			p := &ps[i%len(ps)]
			ops = append(ops, sluice.Op{Key: key("acme", p.Name, fmt.Sprint(n, "-", i)), Policy: p, Hits: 1})
		}
		for _, d := range apply(t, s, t0, ops...) {
			if !d.Allowed || d.Remaining != 99 {
				t.Fatalf("%d ops: %+v", n, d)
			}
		}
	}
}

// testLeaseReplaced: a named lease set to more units in one op frees its
// old units for them and keeps its id; set again to the same units it is
// unchanged (a write made twice); a resize denied, alone or by another op
// of its request, leaves it live and the count as it was; a named lease
// that is not live is taken anew; a limit past MaxLeases is reached with
// leases of many units.
func testLeaseReplaced(t *testing.T, s sluice.Store) {
	ctx := context.Background()
	p := sluice.Policy{Name: "nodes", Algorithm: sluice.Concurrency, Limit: 5000, LeaseTTL: time.Minute}
	k := key("acme", "nodes", "")
	const mine = sluice.NamedLease | 42
	first := apply(t, s, t0, sluice.Op{Key: k, Policy: &p, Hits: 3000, Lease: mine})[0]
	other := apply(t, s, t0, sluice.Op{Key: k, Policy: &p, Hits: 1500})[0]
	if !first.Allowed || first.Lease.ID != mine || !other.Allowed || other.Lease.ID&sluice.NamedLease != 0 {
		t.Fatalf("setup: %+v %+v", first, other)
	}
	for i := range 2 { // the second is the same write again
		grown := apply(t, s, t0.Add(time.Second), sluice.Op{Key: k, Policy: &p, Hits: 3500, Lease: mine})[0]
		if !grown.Allowed || grown.Remaining != 0 || grown.Lease.ID != mine {
			t.Fatalf("write %d: 3000 -> 3500 beside 1500 at 5000: %+v", i+1, grown)
		}
	}
	if d := apply(t, s, t0.Add(2*time.Second), sluice.Op{Key: k, Policy: &p, Hits: 3501, Lease: mine})[0]; d.Allowed {
		t.Fatalf("3500 -> 3501 past the limit admitted: %+v", d)
	}
	// All or nothing: a resize that fits, denied by another op.
	full := sluice.Policy{Name: "full", Algorithm: sluice.FixedWindow, Limit: 1, Window: time.Hour}
	fk := key("acme", "full", "x")
	apply(t, s, t0, sluice.Op{Key: fk, Policy: &full, Hits: 1})
	ds := apply(t, s, t0.Add(3*time.Second), sluice.Op{Key: k, Policy: &p, Hits: 10, Lease: mine}, sluice.Op{Key: fk, Policy: &full, Hits: 1})
	if ds[0].Allowed && ds[1].Allowed {
		t.Fatalf("a request with a spent window admitted: %+v", ds)
	}
	if _, err := s.Renew(ctx, t0.Add(3*time.Second), k, &p, mine); err != nil {
		t.Fatalf("a resize denied by another op took the lease away: %v", err)
	}
	if d := peek(t, s, t0.Add(3*time.Second), k, &p); d.Remaining != 0 {
		t.Fatalf("after the denied resizes, remaining %d, want 0", d.Remaining)
	}
	// Released, the name is free: set again, the lease is taken anew.
	if _, err := s.Release(ctx, t0.Add(4*time.Second), k, &p, mine); err != nil {
		t.Fatalf("release: %v", err)
	}
	if d := apply(t, s, t0.Add(5*time.Second), sluice.Op{Key: k, Policy: &p, Hits: 3600, Lease: mine})[0]; d.Allowed {
		t.Fatalf("3600 beside 1500 at 5000 admitted: %+v", d)
	}
	if d := apply(t, s, t0.Add(5*time.Second), sluice.Op{Key: k, Policy: &p, Hits: 3500, Lease: mine})[0]; !d.Allowed || d.Remaining != 0 || d.Lease.ID != mine {
		t.Fatalf("3500 taken anew beside 1500: %+v", d)
	}
	// The store's own lease is still there, named by the store.
	if _, err := s.Renew(ctx, t0.Add(5*time.Second), k, &p, other.Lease.ID); err != nil {
		t.Fatalf("the other lease: %v", err)
	}
}
