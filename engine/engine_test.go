package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memstore"
)

// clock is a fake clock for the engine.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

func newEngine(t *testing.T) (*Engine, *clock) {
	t.Helper()
	s := memstore.New(memstore.Options{})
	t.Cleanup(func() { s.Close() })
	c := &clock{t: time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)}
	return New(s, Options{Now: c.now}), c
}

var (
	perMinute = sluice.Policy{Name: "tenant-per-minute", Algorithm: sluice.FixedWindow, Limit: 5, Window: time.Minute}
	perSecond = sluice.Policy{Name: "session-per-second", Algorithm: sluice.TokenBucket, Limit: 2, Window: time.Second}
	conc      = sluice.Policy{Name: "tenant-concurrent", Algorithm: sluice.Concurrency, Limit: 3, LeaseTTL: time.Minute}
)

// TestCheckAllOrNothing: a request checked against a tenant per-minute, a
// session per-second and a tenant concurrency policy; when the session's
// bucket is empty, the other two consume nothing.
func TestCheckAllOrNothing(t *testing.T) {
	e, c := newEngine(t)
	ctx := context.Background()
	req := sluice.Request{Tenant: "acme", Hits: 1, Checks: []sluice.Check{
		{Policy: perMinute},
		{Policy: perSecond, Key: "session-1"},
		{Policy: conc},
	}}
	for i := range 2 {
		res, err := e.Check(ctx, req)
		if err != nil || !res.Allowed {
			t.Fatalf("request %d: %+v, %v", i, res, err)
		}
	}
	res, err := e.Check(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if res.Allowed || res.Decision.Policy != "session-per-second" || res.Decision.RetryAfter != 500*time.Millisecond {
		t.Fatalf("third request: %+v", res.Decision)
	}
	if got := res.Decisions[0].Remaining; got != 3 {
		t.Fatalf("per-minute remaining %d after a denied request, want 3", got)
	}
	if got := res.Decisions[2].Remaining; got != 1 {
		t.Fatalf("concurrency remaining %d after a denied request, want 1", got)
	}
	c.advance(500 * time.Millisecond)
	res, err = e.Check(ctx, req)
	if err != nil || !res.Allowed || res.Decisions[0].Remaining != 2 || res.Decisions[2].Lease.ID == 0 {
		t.Fatalf("after the refill: %+v, %v", res, err)
	}
	// Allowed: the reported decision is the one with the fewest remaining,
	// the earlier check on a tie.
	if res.Decision.Policy != "session-per-second" || res.Decision.Remaining != 0 {
		t.Fatalf("reported %+v", res.Decision)
	}
}

// TestLongestRetryAfterReported: of several denying policies, the one that
// frees up last is reported.
func TestLongestRetryAfterReported(t *testing.T) {
	e, _ := newEngine(t)
	ctx := context.Background()
	short := sluice.Policy{Name: "short", Algorithm: sluice.FixedWindow, Limit: 1, Window: time.Second}
	long := sluice.Policy{Name: "long", Algorithm: sluice.FixedWindow, Limit: 1, Window: time.Hour}
	req := sluice.Request{Tenant: "acme", Hits: 1, Checks: []sluice.Check{{Policy: short}, {Policy: long}}}
	if res, err := e.Check(ctx, req); err != nil || !res.Allowed {
		t.Fatalf("%+v %v", res, err)
	}
	res, err := e.Check(ctx, req)
	if err != nil || res.Allowed || res.Decision.Policy != "long" {
		t.Fatalf("%+v %v", res.Decision, err)
	}
}

func TestTenantsAreScoped(t *testing.T) {
	e, _ := newEngine(t)
	ctx := context.Background()
	p := sluice.Policy{Name: "p", Algorithm: sluice.FixedWindow, Limit: 1, Window: time.Minute}
	for _, tenant := range []string{"a", "b"} {
		if d, err := e.Allow(ctx, tenant, &p, "same-key", 1); err != nil || !d.Allowed {
			t.Fatalf("tenant %s: %+v %v", tenant, d, err)
		}
	}
}

func TestInvalidInputNamesTheFieldAndCountsNothing(t *testing.T) {
	e, _ := newEngine(t)
	ctx := context.Background()
	ok := sluice.Check{Policy: perMinute, Key: "k"}
	with := func(f func(p *sluice.Policy)) sluice.Check {
		c := ok
		f(&c.Policy)
		return c
	}
	cases := []struct {
		field string
		req   sluice.Request
	}{
		{"tenant", sluice.Request{Hits: 1, Checks: []sluice.Check{ok}}},
		{"tenant", sluice.Request{Tenant: strings.Repeat("t", sluice.MaxTenantLen+1), Hits: 1, Checks: []sluice.Check{ok}}},
		{"checks", sluice.Request{Tenant: "a", Hits: 1}},
		{"checks", sluice.Request{Tenant: "a", Hits: 1, Checks: make([]sluice.Check, sluice.MaxChecks+1)}},
		{"hits", sluice.Request{Tenant: "a", Hits: -1, Checks: []sluice.Check{ok}}},
		{"checks[1].hits", sluice.Request{Tenant: "a", Hits: 4, Checks: []sluice.Check{ok, {Policy: conc}}}},
		{"checks[1].key", sluice.Request{Tenant: "a", Hits: 1, Checks: []sluice.Check{ok, {Policy: perMinute, Key: strings.Repeat("k", sluice.MaxKeyLen+1)}}}},
		{"checks[0].policy.algorithm", sluice.Request{Tenant: "a", Hits: 1, Checks: []sluice.Check{with(func(p *sluice.Policy) { p.Algorithm = 0 })}}},
		{"checks[0].policy.limit", sluice.Request{Tenant: "a", Hits: 1, Checks: []sluice.Check{with(func(p *sluice.Policy) { p.Limit = 0 })}}},
		{"checks[0].policy.window", sluice.Request{Tenant: "a", Hits: 1, Checks: []sluice.Check{with(func(p *sluice.Policy) { p.Window = -time.Second })}}},
		{"checks[0].policy.name", sluice.Request{Tenant: "a", Hits: 1, Checks: []sluice.Check{with(func(p *sluice.Policy) { p.Name = "" })}}},
		{"checks[1].lease", sluice.Request{Tenant: "a", Hits: 1, Checks: []sluice.Check{ok, {Policy: perMinute, Lease: sluice.NamedLease | 1}}}},
		{"checks[1].lease", sluice.Request{Tenant: "a", Hits: 1, Checks: []sluice.Check{ok, {Policy: conc, Lease: 12345}}}}, // a store's kind of id
	}
	for _, tc := range cases {
		_, err := e.Check(ctx, tc.req)
		if sluice.KindOf(err) != sluice.KindInvalid || sluice.FieldOf(err) != tc.field {
			t.Errorf("want invalid %s, got kind %v field %q: %v", tc.field, sluice.KindOf(err), sluice.FieldOf(err), err)
		}
	}
	// The valid check in those requests counted nothing.
	d, err := e.Allow(ctx, "a", &perMinute, "k", 0)
	if err != nil || d.Remaining != perMinute.Limit {
		t.Fatalf("after invalid requests: %+v %v", d, err)
	}
}

func TestLeases(t *testing.T) {
	e, c := newEngine(t)
	ctx := context.Background()
	chk := sluice.Check{Policy: conc, Key: "job"}
	res, err := e.Check(ctx, sluice.Request{Tenant: "acme", Hits: 3, Checks: []sluice.Check{chk}})
	if err != nil || !res.Allowed {
		t.Fatal(res, err)
	}
	id := res.Decision.Lease.ID
	c.advance(30 * time.Second)
	if _, err := e.Renew(ctx, "acme", chk, id); err != nil {
		t.Fatal(err)
	}
	// Another tenant cannot touch it.
	if _, err := e.Release(ctx, "other", chk, id); !errors.Is(err, sluice.ErrLeaseNotFound) {
		t.Fatalf("release by another tenant: %v", err)
	}
	c.advance(45 * time.Second) // past the first expiry, within the renewed one
	if d, _ := e.Allow(ctx, "acme", &conc, "job", 0); d.Remaining != 0 {
		t.Fatalf("renewed lease not held: %+v", d)
	}
	d, err := e.Release(ctx, "acme", chk, id)
	if err != nil || d.Remaining != 3 {
		t.Fatalf("release: %+v %v", d, err)
	}
	if _, err := e.Release(ctx, "acme", chk, id); sluice.KindOf(err) != sluice.KindNotFound {
		t.Fatalf("second release: %v", err)
	}
	if _, err := e.Release(ctx, "acme", sluice.Check{Policy: perMinute}, id); sluice.FieldOf(err) != "policy.algorithm" {
		t.Fatalf("release on a window policy: %v", err)
	}
}

// TestFailModes: with the store closed, a fail-open policy admits and a
// fail-closed one denies, and Check answers without an error.
func TestFailModes(t *testing.T) {
	s := memstore.New(memstore.Options{})
	obs := &counts{}
	e := New(s, Options{Observer: obs})
	s.Close()
	ctx := context.Background()
	open := perMinute
	closed := perMinute
	closed.Name, closed.FailMode = "strict", sluice.FailClosed

	d, err := e.Allow(ctx, "a", &open, "k", 1)
	if err != nil || !d.Allowed || !d.FailedOpen {
		t.Fatalf("fail open: %+v %v", d, err)
	}
	res, err := e.Check(ctx, sluice.Request{Tenant: "a", Hits: 1, Checks: []sluice.Check{{Policy: open}, {Policy: closed}}})
	if err != nil || res.Allowed || res.Decision.Policy != "strict" || res.Decision.RetryAfter != time.Second {
		t.Fatalf("fail closed: %+v %v", res, err)
	}
	if obs.get("tenant-per-minute", FailedOpen) != 2 || obs.get("strict", FailedClosed) != 1 {
		t.Fatalf("observed %v", obs.m)
	}
}

// slowStore never answers before the caller's deadline.
type slowStore struct{ sluice.Store }

func (s slowStore) Apply(ctx context.Context, now time.Time, ops []sluice.Op, dst []sluice.Decision) error {
	<-ctx.Done()
	return ctx.Err()
}

// TestDeadline: a store that misses the per-decision deadline is a store
// failure, and the fail mode decides, in about the deadline.
func TestDeadline(t *testing.T) {
	s := memstore.New(memstore.Options{})
	defer s.Close()
	e := New(slowStore{s}, Options{Timeout: 20 * time.Millisecond})
	closed := perMinute
	closed.FailMode = sluice.FailClosed
	start := time.Now()
	res, err := e.Check(context.Background(), sluice.Request{Tenant: "a", Hits: 1, Checks: []sluice.Check{{Policy: closed}}})
	if err != nil || res.Allowed {
		t.Fatalf("%+v %v", res, err)
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Fatalf("waited %v for a 20ms deadline", waited)
	}
}

// TestShadow: a shadow policy counts but never denies, and a denied
// request consumes nothing from it.
func TestShadow(t *testing.T) {
	e, _ := newEngine(t)
	ctx := context.Background()
	shadow := sluice.Policy{Name: "trial", Algorithm: sluice.FixedWindow, Limit: 2, Window: time.Minute, Shadow: true}
	enforced := sluice.Policy{Name: "real", Algorithm: sluice.FixedWindow, Limit: 4, Window: time.Minute}
	req := sluice.Request{Tenant: "a", Hits: 1, Checks: []sluice.Check{{Policy: shadow}, {Policy: enforced}}}
	for i := range 4 {
		res, err := e.Check(ctx, req)
		if err != nil || !res.Allowed {
			t.Fatalf("request %d: %+v %v", i, res, err)
		}
		if got, want := res.Decisions[0].Shadowed, i >= 2; got != want {
			t.Fatalf("request %d: shadowed=%v, want %v", i, got, want)
		}
	}
	res, _ := e.Check(ctx, req)
	if res.Allowed || res.Decision.Policy != "real" {
		t.Fatalf("fifth request: %+v", res)
	}
}

// TestPenalty: a key denied After times in a row is blocked for Base even
// once its window has room again, and the block counts nothing.
func TestPenalty(t *testing.T) {
	e, c := newEngine(t)
	ctx := context.Background()
	p := sluice.Policy{Name: "login", Algorithm: sluice.FixedWindow, Limit: 1, Window: time.Second,
		Penalty: sluice.Penalty{After: 2, Base: time.Minute, Max: time.Hour}}
	other := sluice.Policy{Name: "other", Algorithm: sluice.FixedWindow, Limit: 100, Window: time.Hour}
	req := sluice.Request{Tenant: "a", Hits: 1, Checks: []sluice.Check{{Policy: p, Key: "1.2.3.4"}, {Policy: other, Key: "1.2.3.4"}}}
	c.t = c.t.Truncate(time.Second)
	want := []bool{true, false, false}
	for i, w := range want {
		if res, _ := e.Check(ctx, req); res.Allowed != w {
			t.Fatalf("request %d: allowed=%v, want %v", i, res.Allowed, w)
		}
	}
	// The window has room again, but the key is in the box for a minute.
	c.advance(2 * time.Second)
	res, _ := e.Check(ctx, req)
	if res.Allowed || res.Decision.Policy != "login" || res.Decision.RetryAfter < 57*time.Second {
		t.Fatalf("boxed: %+v", res.Decision)
	}
	if d, _ := e.Allow(ctx, "a", &other, "1.2.3.4", 0); d.Remaining != 99 {
		t.Fatalf("boxed requests consumed from the other policy: remaining %d", d.Remaining)
	}
	// Another key is not boxed.
	req.Checks[0].Key = "5.6.7.8"
	if res, _ := e.Check(ctx, req); !res.Allowed {
		t.Fatalf("another key boxed: %+v", res.Decision)
	}
	req.Checks[0].Key = "1.2.3.4"
	c.advance(time.Minute)
	if res, _ := e.Check(ctx, req); !res.Allowed {
		t.Fatalf("after the block: %+v", res.Decision)
	}
}

// counts is an Observer that counts outcomes.
type counts struct {
	mu sync.Mutex
	m  map[string]int
}

func (c *counts) Decided(policy string, o Outcome) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]int{}
	}
	c.m[policy+"/"+o.String()]++
}
func (c *counts) StoreDone(time.Duration, error) {}
func (c *counts) get(policy string, o Outcome) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[policy+"/"+o.String()]
}

// TestAllowAllocatesNothing holds the hot path to zero allocations on a key
// already held.
func TestAllowAllocatesNothing(t *testing.T) {
	e, _ := newEngine(t)
	ctx := context.Background()
	p := sluice.Policy{Name: "p", Algorithm: sluice.TokenBucket, Limit: 1_000_000_000, Window: time.Second}
	if _, err := e.Allow(ctx, "acme", &p, "user-1", 1); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := e.Allow(ctx, "acme", &p, "user-1", 1); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("Allow allocates %v per call, want 0", allocs)
	}
}

// TestManyPenaltyChecks: the most checks a request may hold, every one with
// a penalty (so twice as many store ops), are decided.
func TestManyPenaltyChecks(t *testing.T) {
	e, _ := newEngine(t)
	req := sluice.Request{Tenant: "a", Hits: 1}
	for i := range sluice.MaxChecks {
		req.Checks = append(req.Checks, sluice.Check{Key: fmt.Sprint(i), Policy: sluice.Policy{Name: "login", Algorithm: sluice.FixedWindow, Limit: 1, Window: time.Minute,
			Penalty: sluice.Penalty{After: 1, Base: time.Minute, Max: time.Hour}}})
	}
	for i, want := range []bool{true, false, false} {
		res, err := e.Check(context.Background(), req)
		if err != nil || res.Allowed != want {
			t.Fatalf("request %d: %+v %v", i, res.Decision, err)
		}
	}
}

// TestShadowNeverDeniesOrReports: a shadow policy neither denies when the
// store fails with its fail mode closed, nor becomes the reported decision.
func TestShadowNeverDeniesOrReports(t *testing.T) {
	e, _ := newEngine(t)
	ctx := context.Background()
	trial := sluice.Policy{Name: "trial", Algorithm: sluice.FixedWindow, Limit: 1, Window: time.Minute, Shadow: true, FailMode: sluice.FailClosed}
	real := sluice.Policy{Name: "real", Algorithm: sluice.FixedWindow, Limit: 100, Window: time.Minute}
	req := sluice.Request{Tenant: "a", Hits: 1, Checks: []sluice.Check{{Policy: trial}, {Policy: real}}}
	res, err := e.Check(ctx, req)
	if err != nil || !res.Allowed || res.Decision.Policy != "real" {
		t.Fatalf("reported %+v %v", res.Decision, err)
	}
	s := memstore.New(memstore.Options{})
	s.Close()
	res, err = New(s, Options{}).Check(ctx, req)
	if err != nil || !res.Allowed {
		t.Fatalf("store down: %+v %v", res, err)
	}
}

// TestOtherAlgorithmIsAnotherCounter: a check that names a spent counter's
// policy under another algorithm counts a new counter; it never reads the
// spent one as empty and resets it. Nor does an internal check share a
// counter with a request's check of the same name.
func TestOtherAlgorithmIsAnotherCounter(t *testing.T) {
	e, _ := newEngine(t)
	ctx := context.Background()
	fixed := sluice.Policy{Name: "shared-name", Algorithm: sluice.FixedWindow, Limit: 1, Window: time.Minute}
	check := func(p sluice.Policy, internal bool) bool {
		t.Helper()
		space := sluice.SpacePolicy
		if internal {
			space = sluice.SpaceInternal
		}
		res, err := e.Check(ctx, sluice.Request{Tenant: "acme", Hits: 1, Checks: []sluice.Check{{Policy: p, Key: "k", Space: space}}})
		if err != nil {
			t.Fatal(err)
		}
		return res.Allowed
	}
	if !check(fixed, false) || check(fixed, false) {
		t.Fatal("a limit of 1 did not admit exactly one")
	}
	sliding := fixed
	sliding.Algorithm = sluice.SlidingWindow
	if !check(sliding, false) {
		t.Fatal("the sliding window of the same name is a new counter, and admits")
	}
	if check(fixed, false) {
		t.Fatal("the fixed window was reset by a check under another algorithm")
	}
	if !check(fixed, true) || check(fixed, true) {
		t.Fatal("the internal counter of the same name is its own, with its own limit of 1")
	}
}

// TestPenaltyBoxesApart: one name under two algorithms has two penalty
// boxes: an offence against one never opens, nor fills, the other's box.
func TestPenaltyBoxesApart(t *testing.T) {
	e, _ := newEngine(t)
	ctx := context.Background()
	long := sluice.Policy{Name: "pb", Algorithm: sluice.FixedWindow, Limit: 1, Window: time.Hour, Penalty: sluice.Penalty{After: 1, Base: time.Hour, Max: time.Hour}}
	short := sluice.Policy{Name: "pb", Algorithm: sluice.SlidingWindow, Limit: 1, Window: time.Hour, Penalty: sluice.Penalty{After: 1, Base: time.Millisecond, Max: time.Millisecond}}
	check := func(p sluice.Policy) sluice.Decision {
		t.Helper()
		res, err := e.Check(ctx, sluice.Request{Tenant: "acme", Hits: 1, Checks: []sluice.Check{{Policy: p, Key: "k", Space: sluice.SpaceInline}}})
		if err != nil {
			t.Fatal(err)
		}
		return res.Decision
	}
	for range 3 {
		check(long) // admitted, denied, then boxed for an hour
	}
	if d := check(short); !d.Allowed {
		t.Fatalf("the sliding window of the same name is penalised by the fixed window's box: %+v", d)
	}
	check(short) // denied: an offence in its own, short box
	if d := check(long); d.Allowed || d.RetryAfter < 59*time.Minute {
		t.Fatalf("the fixed window's hour-long block was cut short: %+v", d)
	}
}

// Observers tells each observer every decision, and the key observers
// among them each decision's tenant and key.
func TestObservers(t *testing.T) {
	a, b := &countObserver{}, &keyCounter{}
	e := New(memstore.New(memstore.Options{}), Options{Observer: Observers(a, b)})
	p := sluice.Policy{Name: "api", Algorithm: sluice.FixedWindow, Limit: 1, Window: time.Minute}
	for range 2 {
		if _, err := e.Check(context.Background(), sluice.Request{Tenant: "acme", Hits: 1, Checks: []sluice.Check{{Policy: p, Key: "u1"}}}); err != nil {
			t.Fatal(err)
		}
	}
	if a.n != 2 || b.keys["acme/u1/denied"] != 1 || b.keys["acme/u1/allowed"] != 1 {
		t.Errorf("observer %d decisions, key observer %v", a.n, b.keys)
	}
}

type countObserver struct{ n int }

func (c *countObserver) Decided(string, Outcome)        { c.n++ }
func (c *countObserver) StoreDone(time.Duration, error) {}

type keyCounter struct {
	countObserver
	keys map[string]int
}

func (k *keyCounter) DecidedKey(tenant string, c *sluice.Check, hits int64, o Outcome) {
	if k.keys == nil {
		k.keys = map[string]int{}
	}
	k.keys[tenant+"/"+c.Key+"/"+o.String()]++
}

// TestOperatorBlock: a check whose key an operator blocked denies the whole
// request until the block ends, consuming nothing and recording no offence;
// Lift ends a penalty box's block at once.
func TestOperatorBlock(t *testing.T) {
	e, c := newEngine(t)
	ctx := context.Background()
	p := sluice.Policy{Name: "login", Algorithm: sluice.FixedWindow, Limit: 1, Window: time.Second,
		Penalty: sluice.Penalty{After: 1, Base: time.Minute, Max: time.Hour}}
	other := sluice.Policy{Name: "other", Algorithm: sluice.FixedWindow, Limit: 100, Window: time.Hour}
	until := c.t.Add(10 * time.Second)
	req := sluice.Request{Tenant: "a", Hits: 1, Checks: []sluice.Check{{Policy: p, Key: "mallory", BlockedUntil: until}, {Policy: other, Key: "mallory"}}}
	res, err := e.Check(ctx, req)
	if err != nil || res.Allowed || res.Decision.Policy != "login" || res.Decision.RetryAfter != 10*time.Second || res.Decisions[0].ResetAt.Before(until) {
		t.Fatalf("blocked key: %+v, %v", res.Decision, err)
	}
	if d, _ := e.Allow(ctx, "a", &other, "mallory", 0); d.Remaining != 100 {
		t.Fatalf("a blocked request consumed from the other policy: remaining %d", d.Remaining)
	}
	// The block is the operator's, not an offence: when it ends, the key
	// is admitted, its penalty box empty.
	c.advance(10 * time.Second)
	if res, _ := e.Check(ctx, req); !res.Allowed {
		t.Fatalf("after the block ended: %+v", res.Decision)
	}
	// Into the penalty box by its own offence, then lifted.
	req.Checks[0].BlockedUntil = time.Time{}
	if res, _ := e.Check(ctx, req); res.Allowed {
		t.Fatal("second request in the window admitted with a limit of 1")
	}
	c.advance(time.Second)
	if res, _ := e.Check(ctx, req); res.Allowed {
		t.Fatal("the offence did not box the key")
	}
	lifted, err := e.Lift(ctx, "a", req.Checks[0])
	if err != nil || !lifted {
		t.Fatalf("Lift = %v, %v; want true: the key was boxed", lifted, err)
	}
	if res, _ := e.Check(ctx, req); !res.Allowed {
		t.Fatalf("after Lift: %+v", res.Decision)
	}
	if lifted, err := e.Lift(ctx, "a", req.Checks[0]); err != nil || lifted {
		t.Fatalf("second Lift = %v, %v; want false: nothing left to lift", lifted, err)
	}
	if lifted, err := e.Lift(ctx, "a", sluice.Check{Policy: other, Key: "mallory"}); err != nil || lifted {
		t.Fatalf("Lift on a policy without a penalty = %v, %v", lifted, err)
	}
}

// TestState: State reads a key's counter and penalty box without
// consuming or being observed.
func TestState(t *testing.T) {
	s := memstore.New(memstore.Options{})
	t.Cleanup(func() { s.Close() })
	c := &clock{t: time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)}
	obs := &counts{}
	e := New(s, Options{Now: c.now, Observer: obs})
	ctx := context.Background()
	p := sluice.Policy{Name: "login", Algorithm: sluice.FixedWindow, Limit: 2, Window: time.Minute,
		Penalty: sluice.Penalty{After: 1, Base: time.Minute, Max: time.Hour}}
	check := sluice.Check{Policy: p, Key: "mallory"}
	for range 3 {
		e.Check(ctx, sluice.Request{Tenant: "a", Hits: 1, Checks: []sluice.Check{check}})
	}
	obs.mu.Lock()
	seen := len(obs.m)
	before := obs.m["login/allowed"] + obs.m["login/denied"]
	obs.mu.Unlock()
	counter, box, err := e.State(ctx, "a", check)
	if err != nil || counter.Remaining != 0 || counter.Limit != 2 || box.Allowed || box.RetryAfter <= 0 {
		t.Fatalf("State = %+v, box %+v, %v; want the window spent and the key boxed", counter, box, err)
	}
	obs.mu.Lock()
	after := obs.m["login/allowed"] + obs.m["login/denied"]
	obs.mu.Unlock()
	if seen == 0 || after != before {
		t.Fatalf("State was observed: %d decisions before, %d after", before, after)
	}
}

// TestOperatorBlockWhenStoreFails: a block needs no store: when the store
// fails, a fail-open policy admits other keys and still denies the blocked
// one.
func TestOperatorBlockWhenStoreFails(t *testing.T) {
	s := memstore.New(memstore.Options{})
	s.Close() // every Apply fails: unavailable
	c := &clock{t: time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)}
	e := New(s, Options{Now: c.now})
	p := sluice.Policy{Name: "api", Algorithm: sluice.FixedWindow, Limit: 10, Window: time.Minute, FailMode: sluice.FailOpen}
	res, err := e.Check(context.Background(), sluice.Request{Tenant: "a", Hits: 1, Checks: []sluice.Check{{Policy: p, Key: "bob"}}})
	if err != nil || !res.Allowed || !res.Decision.FailedOpen {
		t.Fatalf("another key with the store down: %+v, %v; want admitted, failed open", res.Decision, err)
	}
	res, err = e.Check(context.Background(), sluice.Request{Tenant: "a", Hits: 1, Checks: []sluice.Check{{Policy: p, Key: "mallory", BlockedUntil: c.t.Add(time.Minute)}}})
	if err != nil || res.Allowed || res.Decision.RetryAfter != time.Minute {
		t.Fatalf("the blocked key with the store down: %+v, %v; want denied for the minute", res.Decision, err)
	}
}

// burnFails is a store whose Apply fails for a request of burn ops.
type burnFails struct{ sluice.Store }

func (s burnFails) Apply(ctx context.Context, now time.Time, ops []sluice.Op, dst []sluice.Decision) error {
	if ops[0].Burn {
		return sluice.ErrStoreClosed
	}
	return s.Store.Apply(ctx, now, ops, dst)
}

// TestBurnBesides: a burn check counts beside a shadow one, a block makes
// it a read, and a store failing on the burn checks' operation leaves them
// to their fail mode and the others' decisions as they were.
func TestBurnBesides(t *testing.T) {
	ctx := context.Background()
	win := func(name string, limit int64) sluice.Policy {
		return sluice.Policy{Name: name, Algorithm: sluice.FixedWindow, Limit: limit, Window: time.Minute}
	}
	t.Run("shadow", func(t *testing.T) {
		e, _ := newEngine(t)
		trial := win("trial", 2)
		trial.Shadow = true
		full := sluice.Check{Policy: win("full", 1)}
		if _, err := e.Check(ctx, sluice.Request{Tenant: "acme", Hits: 1, Checks: []sluice.Check{full}}); err != nil {
			t.Fatal(err)
		}
		// A denied request: the shadow burn check still counts.
		for i := range 3 {
			res, err := e.Check(ctx, sluice.Request{Tenant: "acme", Hits: 1, Checks: []sluice.Check{full, {Policy: trial, Burn: true}}})
			if err != nil || res.Allowed || !res.Decisions[1].Allowed || res.Decisions[1].Shadowed != (i >= 2) {
				t.Fatalf("request %d: %+v %v", i, res, err)
			}
		}
		for _, burn := range []bool{false, true} {
			d, _, err := e.State(ctx, "acme", sluice.Check{Policy: trial, Burn: burn})
			if err != nil || d.Allowed || d.Remaining != 0 {
				t.Fatalf("shadow burn counter after 3 of 2 (read with burn %v): %+v %v, want past its limit", burn, d, err)
			}
		}
	})
	t.Run("blocked", func(t *testing.T) {
		e, c := newEngine(t)
		b := sluice.Check{Policy: win("b", 5), Burn: true, BlockedUntil: c.t.Add(time.Second)}
		res, err := e.Check(ctx, sluice.Request{Tenant: "acme", Hits: 3, Checks: []sluice.Check{b}})
		if err != nil || res.Allowed {
			t.Fatalf("blocked: %+v %v", res, err)
		}
		b.BlockedUntil = time.Time{}
		if d, _, err := e.State(ctx, "acme", b); err != nil || d.Remaining != 5 {
			t.Fatalf("after a blocked burn: %+v %v, want nothing counted", d, err)
		}
	})
	t.Run("store fails", func(t *testing.T) {
		s := memstore.New(memstore.Options{})
		defer s.Close()
		obs := &counts{}
		e := New(burnFails{s}, Options{Observer: obs})
		strict := win("strict", 5)
		strict.FailMode = sluice.FailClosed
		res, err := e.Check(ctx, sluice.Request{Tenant: "acme", Hits: 1, Checks: []sluice.Check{{Policy: win("plain", 5)}, {Policy: strict, Burn: true}}})
		if err != nil || res.Allowed || !res.Decisions[0].Allowed || res.Decisions[0].Remaining != 4 || !res.Decisions[1].FailedClosed {
			t.Fatalf("%+v %v", res, err)
		}
		if obs.get("strict", FailedClosed) != 1 || obs.get("plain", Allowed) != 1 {
			t.Fatalf("observed %v", obs.m)
		}
	})
}

// TestBurnRefusedNamesTheCheck: a burn of a policy that is not a fixed
// window is invalid input naming the check's field and its algorithm.
func TestBurnRefusedNamesTheCheck(t *testing.T) {
	e, _ := newEngine(t)
	rolling := sluice.Policy{Name: "hourly", Algorithm: sluice.Quota, Limit: 5, Window: time.Hour}
	_, err := e.Check(context.Background(), sluice.Request{Tenant: "acme", Hits: 1, Checks: []sluice.Check{{Policy: perMinute}, {Policy: rolling, Burn: true}}})
	if sluice.KindOf(err) != sluice.KindInvalid || !strings.Contains(err.Error(), "checks[1].burn") || !strings.Contains(err.Error(), `"hourly" is a rolling quota`) {
		t.Fatalf("error %v", err)
	}
}
