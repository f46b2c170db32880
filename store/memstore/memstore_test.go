package memstore

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) sluice.Store { return New(Options{}) })
}

// TestConformanceOneShard runs the suite with every key in one shard, where
// multi-key requests lock one mutex, and with many shards per key.
func TestConformanceOneShard(t *testing.T) {
	storetest.Run(t, func(t *testing.T) sluice.Store { return New(Options{Shards: 1}) })
}

// TestConformanceCollisions runs the suite with every key hashing alike,
// so that every key shares one chain of one shard.
func TestConformanceCollisions(t *testing.T) {
	storetest.Run(t, func(t *testing.T) sluice.Store {
		s := New(Options{})
		s.collide = func(sluice.Key) uint64 { return 42 }
		return s
	})
}

var fixed = sluice.Policy{Name: "p", Algorithm: sluice.FixedWindow, Limit: 5, Window: time.Minute}

func hit(s *Store, now time.Time, value string) (sluice.Decision, error) {
	dst := make([]sluice.Decision, 1)
	err := s.Apply(context.Background(), now, []sluice.Op{{Key: sluice.Key{Tenant: "t", Policy: "p", Value: value}, Policy: &fixed, Hits: 1}}, dst)
	return dst[0], err
}

// TestSweep: one periodic sweep removes expired keys, with the store's own
// ticker running on synctest's fake clock.
func TestSweep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New(Options{SweepInterval: 10 * time.Second})
		defer s.Close()
		for _, v := range []string{"a", "b", "c"} {
			if _, err := hit(s, time.Now(), v); err != nil {
				t.Fatal(err)
			}
		}
		if n := s.Len(); n != 3 {
			t.Fatalf("Len = %d, want 3", n)
		}
		// The keys' minute window ends within 60s; the sweep after that
		// removes them.
		time.Sleep(75 * time.Second)
		synctest.Wait()
		if n := s.Len(); n != 0 {
			t.Fatalf("Len = %d after expiry and sweep, want 0", n)
		}
	})
}

// TestKeyCap: at the cap a new key is refused with ErrStoreFull, held keys
// keep working, and the sweep makes room again.
func TestKeyCap(t *testing.T) {
	s := New(Options{MaxKeys: 4, Shards: 1})
	defer s.Close()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, v := range []string{"a", "b", "c", "d"} {
		if _, err := hit(s, now, v); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := hit(s, now, "e"); !errors.Is(err, sluice.ErrStoreFull) {
		t.Fatalf("fifth key: %v, want ErrStoreFull", err)
	}
	if sluice.KindOf(sluice.ErrStoreFull) != sluice.KindUnavailable {
		t.Fatal("ErrStoreFull is not KindUnavailable")
	}
	if d, err := hit(s, now, "a"); err != nil || !d.Allowed || d.Remaining != 3 {
		t.Fatalf("held key at the cap: %+v, %v", d, err)
	}
	// A multi-op request that would add a key is refused whole.
	dst := make([]sluice.Decision, 2)
	err := s.Apply(context.Background(), now, []sluice.Op{
		{Key: sluice.Key{Tenant: "t", Policy: "p", Value: "a"}, Policy: &fixed, Hits: 1},
		{Key: sluice.Key{Tenant: "t", Policy: "p", Value: "f"}, Policy: &fixed, Hits: 1},
	}, dst)
	if !errors.Is(err, sluice.ErrStoreFull) {
		t.Fatalf("multi-op adding a key: %v", err)
	}
	if d, _ := hit(s, now, "a"); d.Remaining != 2 {
		t.Fatalf("refused request consumed: remaining %d, want 2", d.Remaining)
	}
	if n := s.Sweep(now.Add(time.Minute)); n != 4 {
		t.Fatalf("swept %d, want 4", n)
	}
	if _, err := hit(s, now.Add(time.Minute), "e"); err != nil {
		t.Fatalf("after the sweep: %v", err)
	}
}

// TestCloseStopsSweep: Close returns only once the sweep goroutine is gone.
func TestCloseStopsSweep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New(Options{})
		s.Close()
		// synctest.Test fails if a goroutine started in the bubble is
		// still running when the function returns.
	})
}

func TestTenantsConformance(t *testing.T) {
	storetest.RunTenants(t, func(t *testing.T) sluice.TenantStore { return &Tenants{} })
}

func TestSessionsConformance(t *testing.T) {
	storetest.RunSessions(t, func(t *testing.T) sluice.SessionStore { return &Sessions{} })
}

func TestRegistryConformance(t *testing.T) {
	storetest.RunRegistry(t, func(t *testing.T) sluice.Registry { return &Registry{} })
}

func TestAuditConformance(t *testing.T) { storetest.RunAudit(t, &Audit{}) }
