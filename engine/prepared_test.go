package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memstore"
)

// hidden hides every optional path of a store (ApplyOne, Scope), so that a
// prepared limiter falls back to Apply.
type hidden struct{ sluice.Store }

// preparedPolicies are small enough to deny, one per algorithm, and the
// policies that take the general path: a penalty and a shadow.
var preparedPolicies = []sluice.Policy{
	{Name: "fixed", Algorithm: sluice.FixedWindow, Limit: 5, Window: time.Second},
	{Name: "sliding", Algorithm: sluice.SlidingWindow, Limit: 5, Window: time.Second},
	{Name: "log", Algorithm: sluice.SlidingLog, Limit: 5, Window: time.Second},
	{Name: "bucket", Algorithm: sluice.TokenBucket, Limit: 5, Window: time.Second, Burst: 3},
	{Name: "leases", Algorithm: sluice.Concurrency, Limit: 3, LeaseTTL: time.Second},
	{Name: "quota", Algorithm: sluice.Quota, Limit: 8, Window: 10 * time.Second},
	{Name: "boxed", Algorithm: sluice.FixedWindow, Limit: 2, Window: time.Second,
		Penalty: sluice.Penalty{After: 2, Base: 2 * time.Second, Max: 8 * time.Second}},
	{Name: "trial", Algorithm: sluice.TokenBucket, Limit: 2, Window: time.Second, Shadow: true},
}

// TestPreparedDecidesAsAllow: for every algorithm, on the memory store and
// on a store with no optional path, with and without an observer and a
// deadline, a prepared limiter makes the same decisions as Engine.Allow,
// step for step on a fake clock, over keys short and long, reads and
// requests up to the capacity.
func TestPreparedDecidesAsAllow(t *testing.T) {
	stores := []struct {
		name string
		new  func() sluice.Store
		fast bool // the prepared path is the store's Scope
	}{
		{"memstore", func() sluice.Store { return memstore.New(memstore.Options{}) }, true},
		{"apply only", func() sluice.Store { return hidden{memstore.New(memstore.Options{})} }, false},
	}
	options := []struct {
		name    string
		opts    func(*clock) Options
		general bool
	}{
		{"plain", func(c *clock) Options { return Options{Now: c.now} }, false},
		{"observer", func(c *clock) Options { return Options{Now: c.now, Observer: &counts{}} }, true},
		{"deadline", func(c *clock) Options { return Options{Now: c.now, Timeout: time.Minute} }, true},
	}
	keys := []string{"", "user-1", "a-key-longer-than-an-entry-holds-inline", strings.Repeat("k", sluice.MaxKeyLen)}
	ctx := context.Background()
	for _, p := range preparedPolicies {
		for _, st := range stores {
			for _, o := range options {
				t.Run(fmt.Sprintf("%s/%s/%s", p.Name, st.name, o.name), func(t *testing.T) {
					c := &clock{t: time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)}
					sa, sb := st.new(), st.new()
					defer sa.Close()
					defer sb.Close()
					oa, ob := o.opts(c), o.opts(c)
					ea, eb := New(sa, oa), New(sb, ob)
					l, err := eb.Prepare("acme", p)
					if err != nil {
						t.Fatal(err)
					}
					fast := st.fast && !o.general && !p.Shadow && !p.Penalty.Enabled()
					if got := l.apply != nil; got != fast {
						t.Fatalf("store's prepared path taken: %v, want %v", got, fast)
					}
					rng := rand.New(rand.NewPCG(uint64(len(p.Name)), 7))
					capacity := p.Capacity()
					allowed, refused := 0, 0
					for i := range 400 {
						key := keys[rng.IntN(len(keys))]
						hits := []int64{0, 1, 1, 1, 2, capacity}[rng.IntN(6)]
						da, erra := ea.Allow(ctx, "acme", &p, key, hits)
						db, errb := l.Allow(ctx, key, hits)
						if da != db || (erra == nil) != (errb == nil) {
							t.Fatalf("step %d, key %.10q, hits %d:\nAllow    %+v, %v\nPrepared %+v, %v", i, key, hits, da, erra, db, errb)
						}
						if hits > 0 && db.Allowed && !db.Shadowed {
							allowed++
						} else if hits > 0 {
							refused++
						}
						c.advance(time.Duration(rng.IntN(300)) * time.Millisecond)
					}
					if allowed < 20 || refused < 20 {
						t.Fatalf("the sequence admitted %d and refused %d: too few of one to compare", allowed, refused)
					}
					if ca, ok := oa.Observer.(*counts); ok {
						if fmt.Sprint(ca.m) != fmt.Sprint(ob.Observer.(*counts).m) {
							t.Fatalf("observed\nAllow    %v\nPrepared %v", ca.m, ob.Observer.(*counts).m)
						}
					}
				})
			}
		}
	}
}

// TestPreparedSharesCounters: a prepared limiter and Engine.Allow count on
// the same counters, and tenants and policies stay apart.
func TestPreparedSharesCounters(t *testing.T) {
	e, _ := newEngine(t)
	ctx := context.Background()
	l, err := e.Prepare("acme", perMinute)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if d, err := l.Allow(ctx, "k", 1); err != nil || !d.Allowed {
			t.Fatalf("prepared %d: %+v %v", i, d, err)
		}
	}
	if d, err := e.Allow(ctx, "acme", &perMinute, "k", 2); err != nil || !d.Allowed || d.Remaining != 0 {
		t.Fatalf("Allow after 3 prepared hits of 5: %+v %v", d, err)
	}
	if d, _ := l.Allow(ctx, "k", 1); d.Allowed {
		t.Fatalf("prepared admitted past the limit: %+v", d)
	}
	other, _ := e.Prepare("globex", perMinute)
	if d, _ := other.Allow(ctx, "k", 1); !d.Allowed || d.Remaining != 4 {
		t.Fatalf("another tenant shares the counter: %+v", d)
	}
	renamed := perMinute
	renamed.Name = "other"
	l2, _ := e.Prepare("acme", renamed)
	if d, _ := l2.Allow(ctx, "k", 1); !d.Allowed || d.Remaining != 4 {
		t.Fatalf("another policy shares the counter: %+v", d)
	}
}

// TestPreparedInvalidInput: Prepare refuses a bad tenant or policy, and
// Allow a bad key or hits, naming the field and counting nothing.
func TestPreparedInvalidInput(t *testing.T) {
	e, _ := newEngine(t)
	ctx := context.Background()
	for _, tc := range []struct {
		tenant string
		p      sluice.Policy
		field  string
	}{
		{"", perMinute, "tenant"},
		{strings.Repeat("t", sluice.MaxTenantLen+1), perMinute, "tenant"},
		{"acme", sluice.Policy{Name: "bad name", Algorithm: sluice.FixedWindow, Limit: 1, Window: time.Second}, "policy.name"},
		{"acme", sluice.Policy{Name: "p", Algorithm: sluice.FixedWindow, Window: time.Second}, "policy.limit"},
		{"acme", sluice.Policy{Name: "p", Algorithm: sluice.PenaltyBox, Limit: 1, Window: time.Second}, "policy.algorithm"},
	} {
		l, err := e.Prepare(tc.tenant, tc.p)
		if l != nil || sluice.KindOf(err) != sluice.KindInvalid || sluice.FieldOf(err) != tc.field {
			t.Errorf("Prepare(%.10q, %+v): want invalid %s, got %v", tc.tenant, tc.p, tc.field, err)
		}
	}

	l, err := e.Prepare("acme", perSecond) // a bucket of 2
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		key   string
		hits  int64
		field string
	}{
		{strings.Repeat("k", sluice.MaxKeyLen+1), 1, "key"},
		{"k", -1, "hits"},
		{"k", 3, "hits"},
		{"k", -1 << 63, "hits"},
	} {
		d, err := l.Allow(ctx, tc.key, tc.hits)
		if sluice.KindOf(err) != sluice.KindInvalid || sluice.FieldOf(err) != tc.field || d != (sluice.Decision{}) {
			t.Errorf("Allow(%.10q, %d): want invalid %s, got %+v, %v", tc.key, tc.hits, tc.field, d, err)
		}
	}
	if d, err := l.Allow(ctx, "k", 0); err != nil || d.Remaining != 2 {
		t.Fatalf("invalid requests counted: %+v %v", d, err)
	}
}

// TestPreparedFailModes: when the store fails, the policy's fail mode
// decides, as for Allow.
func TestPreparedFailModes(t *testing.T) {
	s := memstore.New(memstore.Options{})
	e := New(s, Options{})
	open := perMinute
	closed := perMinute
	closed.Name, closed.FailMode = "strict", sluice.FailClosed
	lo, _ := e.Prepare("a", open)
	lc, _ := e.Prepare("a", closed)
	s.Close()
	ctx := context.Background()
	if d, err := lo.Allow(ctx, "k", 1); err != nil || !d.Allowed || !d.FailedOpen {
		t.Fatalf("fail open: %+v %v", d, err)
	}
	if d, err := lc.Allow(ctx, "k", 1); err != nil || d.Allowed || !d.FailedClosed || d.Policy != "strict" {
		t.Fatalf("fail closed: %+v %v", d, err)
	}
}

// TestPreparedCopiesPolicy: changing the caller's policy after Prepare
// changes nothing.
func TestPreparedCopiesPolicy(t *testing.T) {
	e, _ := newEngine(t)
	p := perMinute
	l, _ := e.Prepare("acme", p)
	p.Limit, p.Name = 1000, "changed"
	d, err := l.Allow(context.Background(), "k", 1)
	if err != nil || d.Policy != perMinute.Name || d.Limit != perMinute.Limit {
		t.Fatalf("%+v %v", d, err)
	}
}

// TestPreparedExactUnderConcurrency: goroutines sharing a prepared limiter
// admit exactly its limit on one key, and on each of many.
func TestPreparedExactUnderConcurrency(t *testing.T) {
	e, _ := newEngine(t)
	p := sluice.Policy{Name: "p", Algorithm: sluice.FixedWindow, Limit: 100, Window: time.Hour}
	l, _ := e.Prepare("acme", p)
	var admitted [3]atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 150 {
				k := (g + i) % len(admitted)
				if d, err := l.Allow(context.Background(), fmt.Sprint("key-", k), 1); err != nil {
					t.Error(err)
					return
				} else if d.Allowed {
					admitted[k].Add(1)
				}
			}
		})
	}
	wg.Wait()
	for k := range admitted {
		if n := admitted[k].Load(); n != 100 {
			t.Errorf("key-%d: admitted %d, want 100", k, n)
		}
	}
}

// TestPreparedAllocatesNothing holds the prepared path to zero allocations
// on a key already held.
func TestPreparedAllocatesNothing(t *testing.T) {
	s := memstore.New(memstore.Options{})
	defer s.Close()
	e := New(s, Options{}) // the engine's own clock
	ctx := context.Background()
	l, err := e.Prepare("acme", sluice.Policy{Name: "p", Algorithm: sluice.TokenBucket, Limit: 1_000_000_000, Window: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Allow(ctx, "user-1", 1); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := l.Allow(ctx, "user-1", 1); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("Prepared.Allow allocates %v per call, want 0", allocs)
	}
}

// A limiter prepared once per policy decides by key.
func ExampleEngine_Prepare() {
	s := memstore.New(memstore.Options{})
	defer s.Close()
	e := New(s, Options{})
	perUser, err := e.Prepare("acme", sluice.Policy{Name: "per-user", Algorithm: sluice.TokenBucket, Limit: 2, Window: time.Minute})
	if err != nil {
		panic(err)
	}
	for range 3 {
		d, err := perUser.Allow(context.Background(), "user-1", 1)
		if err != nil {
			panic(err)
		}
		fmt.Println(d.Allowed, d.Remaining)
	}
	// Output:
	// true 1
	// true 0
	// false 0
}
