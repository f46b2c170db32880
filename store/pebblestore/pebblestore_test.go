package pebblestore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/storetest"
)

func open(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) sluice.Store { return open(t, t.TempDir()) })
}

// TestConformanceEverythingDurable runs the suite with every counter
// written to disk, whatever its period.
func TestConformanceEverythingDurable(t *testing.T) {
	storetest.Run(t, func(t *testing.T) sluice.Store {
		s, err := Open(t.TempDir(), Options{DurableAfter: time.Nanosecond})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// TestConformanceWriteBehind runs the suite with every counter durable and
// written behind.
func TestConformanceWriteBehind(t *testing.T) {
	storetest.Run(t, func(t *testing.T) sluice.Store {
		s, err := Open(t.TempDir(), Options{DurableAfter: time.Nanosecond, WriteBehind: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// TestWriteBehindReopen: with WriteBehind, the durable counters changed
// and not yet written are written by Close, and there after a reopen; the
// disk holds none of them before the write.
func TestWriteBehindReopen(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	now := time.Now()
	hour := sluice.Policy{Name: "hour", Algorithm: sluice.FixedWindow, Limit: 10, Window: time.Hour}
	conc := sluice.Policy{Name: "conc", Algorithm: sluice.Concurrency, Limit: 3, LeaseTTL: 5 * time.Minute}
	key := func(p string) sluice.Key { return sluice.Key{Tenant: "acme", Policy: p, Value: "u"} }
	s, err := Open(dir, Options{WriteBehind: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	dst := make([]sluice.Decision, 2)
	if err := s.Apply(ctx, now, []sluice.Op{{Key: key("hour"), Policy: &hour, Hits: 7}, {Key: key("conc"), Policy: &conc, Hits: 2}}, dst); err != nil || !dst[0].Allowed || !dst[1].Allowed {
		t.Fatal(dst, err)
	}
	if _, _, err := s.db.Get(counterKey(ptr(key("hour")))); !errors.Is(err, pebble.ErrNotFound) {
		t.Fatalf("on disk before the write behind: %v", err)
	}
	if st, ok := s.WriteBehindStats(); !ok || st.Pending != 2 {
		t.Fatalf("pending: %+v", st)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, dir)
	if err := s.Apply(ctx, now, []sluice.Op{{Key: key("hour"), Policy: &hour, Hits: 3}, {Key: key("conc"), Policy: &conc, Hits: 1}}, dst); err != nil {
		t.Fatal(err)
	}
	if dst[0].Remaining != 0 || dst[1].Remaining != 0 {
		t.Fatalf("after a reopen: %+v, want 7 of 10 hourly and 2 of 3 leases kept", dst)
	}
}

func ptr[T any](v T) *T { return &v }

func TestTenantsConformance(t *testing.T) {
	storetest.RunTenants(t, func(t *testing.T) sluice.TenantStore { return open(t, t.TempDir()) })
}

// TestReopen: durable counters, leases, tenants and keys are there after a
// reopen; counters shorter than DurableAfter are not.
func TestReopen(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	now := time.Now()
	hour := sluice.Policy{Name: "hour", Algorithm: sluice.FixedWindow, Limit: 10, Window: time.Hour}
	second := sluice.Policy{Name: "second", Algorithm: sluice.FixedWindow, Limit: 10, Window: time.Second}
	conc := sluice.Policy{Name: "conc", Algorithm: sluice.Concurrency, Limit: 3, LeaseTTL: 5 * time.Minute}
	key := func(p string) sluice.Key { return sluice.Key{Tenant: "acme", Policy: p, Value: "u"} }

	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	dst := make([]sluice.Decision, 3)
	ops := []sluice.Op{{Key: key("hour"), Policy: &hour, Hits: 7}, {Key: key("second"), Policy: &second, Hits: 7}, {Key: key("conc"), Policy: &conc, Hits: 2}}
	if err := s.Apply(ctx, now, ops, dst); err != nil || !dst[0].Allowed {
		t.Fatal(dst, err)
	}
	lease := dst[2].Lease.ID
	if err := s.CreateTenant(ctx, sluice.Tenant{ID: "acme", Tier: "premium"}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutAPIKey(ctx, sluice.APIKey{ID: "k1", Tenant: "acme", Hash: []byte("h")}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = open(t, dir)
	for _, op := range ops {
		op.Hits = 0
		if err := s.Apply(ctx, now, []sluice.Op{op}, dst[:1]); err != nil {
			t.Fatal(err)
		}
		want := map[string]int64{"hour": 3, "second": 10, "conc": 1}[op.Policy.Name]
		if dst[0].Remaining != want {
			t.Errorf("%s after reopen: remaining %d, want %d", op.Policy.Name, dst[0].Remaining, want)
		}
	}
	if _, err := s.Release(ctx, now, key("conc"), &conc, lease); err != nil {
		t.Errorf("releasing a lease taken before the reopen: %v", err)
	}
	if tn, err := s.GetTenant(ctx, "acme"); err != nil || tn.Tier != "premium" {
		t.Errorf("tenant after reopen: %+v %v", tn, err)
	}
	if k, err := s.GetAPIKey(ctx, "acme", "k1"); err != nil || string(k.Hash) != "h" {
		t.Errorf("key after reopen: %+v %v", k, err)
	}
}

// TestSweepDisk: expired counters are deleted from disk, live ones kept.
func TestSweepDisk(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	ctx := context.Background()
	now := time.Now()
	p := sluice.Policy{Name: "hour", Algorithm: sluice.FixedWindow, Limit: 10, Window: time.Hour}
	for _, v := range []string{"a", "b"} {
		if err := s.Apply(ctx, now, []sluice.Op{{Key: sluice.Key{Tenant: "t", Policy: "hour", Value: v}, Policy: &p, Hits: 1}}, make([]sluice.Decision, 1)); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := s.SweepDisk(now); err != nil || n != 0 {
		t.Fatalf("sweep of live counters: %d %v", n, err)
	}
	if n, err := s.SweepDisk(now.Add(2 * time.Hour)); err != nil || n != 2 {
		t.Fatalf("sweep of expired counters: %d %v", n, err)
	}
}

func TestSessionsConformance(t *testing.T) {
	storetest.RunSessions(t, func(t *testing.T) sluice.SessionStore { return open(t, t.TempDir()) })
}

func TestRegistryConformance(t *testing.T) {
	storetest.RunRegistry(t, func(t *testing.T) sluice.Registry { return open(t, t.TempDir()) })
}

// TestExpiredSessionsRemoved: an expired session's state is removed when
// met, and by the sweep.
func TestExpiredSessionsRemoved(t *testing.T) {
	s := open(t, t.TempDir())
	ctx := context.Background()
	t0 := time.Now()
	for _, id := range []string{"met", "swept"} {
		if err := s.CreateSession(ctx, sluice.Session{Tenant: "acme", ID: id, CreatedAt: t0, ExpiresAt: t0.Add(time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}
	later := t0.Add(2 * time.Minute)
	if _, err := s.GetSession(ctx, later, "acme", "met"); err == nil {
		t.Fatal("expired session found")
	}
	if n, err := s.SweepSessions(later); err != nil || n != 1 {
		t.Fatalf("sweep removed %d (%v), want 1: the met one is gone already", n, err)
	}
}

func TestAuditConformance(t *testing.T) { storetest.RunAudit(t, open(t, t.TempDir())) }

// TestSyncInterval: a durable decision right after another waits for the
// least time between two syncs, so that others can share its sync; it is
// still on disk when it answers. (Only a lower bound is asserted: a busy
// machine makes it longer, never shorter.)
func TestSyncInterval(t *testing.T) {
	const interval = 300 * time.Millisecond
	dir := t.TempDir()
	ctx := context.Background()
	s, err := Open(dir, Options{SyncInterval: interval})
	if err != nil {
		t.Fatal(err)
	}
	hour := sluice.Policy{Name: "hour", Algorithm: sluice.FixedWindow, Limit: 10, Window: time.Hour}
	op := []sluice.Op{{Key: sluice.Key{Tenant: "acme", Policy: "hour", Value: "u"}, Policy: &hour, Hits: 1}}
	dst := make([]sluice.Decision, 1)
	start := time.Now()
	for range 3 {
		if err := s.Apply(ctx, start, op, dst); err != nil || !dst[0].Allowed {
			t.Fatal(dst, err)
		}
	}
	if took := time.Since(start); took < 2*interval-20*time.Millisecond {
		t.Errorf("three durable decisions in a row took %v, want at least two intervals of %v between their syncs", took, interval)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, dir)
	op[0].Hits = 0
	if err := s.Apply(ctx, start, op, dst); err != nil || dst[0].Remaining != 7 {
		t.Fatalf("after reopen: remaining %d, %v; want 7", dst[0].Remaining, err)
	}
}

// TestCounterKeyEncoding: a counter key of epoch zero is encoded as it was
// before keys had epochs, so that counters written before an upgrade are
// found after it; one with an epoch is another counter, across a reopen.
func TestCounterKeyEncoding(t *testing.T) {
	k := sluice.Key{Tenant: "acme", Space: sluice.SpaceInline, Algorithm: sluice.SlidingWindow, Policy: "p", Value: "u"}
	want := append(append([]byte{'c', 4}, "acme"...), byte(sluice.SpaceInline), byte(sluice.SlidingWindow), 1, 'p', 'u')
	if got := counterKey(&k); string(got) != string(want) {
		t.Fatalf("counterKey of epoch 0 = %q, want %q (the encoding before epochs)", got, want)
	}

	dir := t.TempDir()
	ctx := context.Background()
	now := time.Now()
	hour := sluice.Policy{Name: "p", Algorithm: sluice.FixedWindow, Limit: 10, Window: time.Hour}
	old, next := sluice.Key{Tenant: "acme", Policy: "p", Value: "u"}, sluice.Key{Tenant: "acme", Epoch: 1234567, Policy: "p", Value: "u"}
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	dst := make([]sluice.Decision, 1)
	for k, hits := range map[sluice.Key]int64{old: 9, next: 2} {
		if err := s.Apply(ctx, now, []sluice.Op{{Key: k, Policy: &hour, Hits: hits}}, dst); err != nil || !dst[0].Allowed {
			t.Fatal(dst, err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, dir)
	for k, want := range map[sluice.Key]int64{old: 1, next: 8} {
		if err := s.Apply(ctx, now, []sluice.Op{{Key: k, Policy: &hour}}, dst); err != nil || dst[0].Remaining != want {
			t.Errorf("epoch %d after reopen: remaining %d (%v), want %d", k.Epoch, dst[0].Remaining, err, want)
		}
	}
}

// TestWriteBehindAllocatesNothing: written behind, a decision on a held
// durable counter allocates nothing, as on the memory store.
func TestWriteBehindAllocatesNothing(t *testing.T) {
	s, err := Open(t.TempDir(), Options{WriteBehind: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	hour := sluice.Policy{Name: "hour", Algorithm: sluice.FixedWindow, Limit: 1 << 40, Window: time.Hour}
	op := sluice.Op{Key: sluice.Key{Tenant: "acme", Algorithm: sluice.FixedWindow, Policy: "hour", Value: "u"}, Policy: &hour, Hits: 1}
	ctx, now := context.Background(), time.Now()
	if _, err := s.ApplyOne(ctx, now, op); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(1000, func() {
		if d, err := s.ApplyOne(ctx, now, op); err != nil || !d.Allowed {
			t.Fatal(d, err)
		}
	}); n != 0 {
		t.Fatalf("%v allocations per decision, want 0", n)
	}
}
