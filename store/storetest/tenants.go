package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// NewTenantStore returns a new, empty tenant store for one test.
type NewTenantStore func(t *testing.T) sluice.TenantStore

// RunTenants runs the tenant store's conformance suite.
func RunTenants(t *testing.T, newStore NewTenantStore) {
	ctx := context.Background()
	limit := int64(500)
	day := 24 * time.Hour
	acme := sluice.Tenant{
		ID: "acme", Tier: "premium",
		Settings:  sluice.TenantSettings{ConnectionsPerSession: 2, TenantConnections: 10, SessionPerMinute: 5, TenantPerMinute: 50, SessionTTL: 300, MessagesPerMinute: 600},
		Overrides: map[string]sluice.PolicyOverride{"chat": {Limit: &limit, Window: &day}},
		CreatedAt: t0, UpdatedAt: t0,
	}

	t.Run("Secrets", func(t *testing.T) {
		s, ok := newStore(t).(sluice.SecretStore)
		if !ok {
			t.Fatal("the tenant store keeps no secrets (sluice.SecretStore)")
		}
		a, err := s.Secret(ctx, "acme", "lease")
		if err != nil || len(a) != sluice.SecretLen {
			t.Fatalf("secret: %x %v", a, err)
		}
		again, err := s.Secret(ctx, "acme", "lease")
		if err != nil || string(again) != string(a) {
			t.Fatalf("the same secret read again differs: %x, %v", again, err)
		}
		for _, other := range [][2]string{{"beta", "lease"}, {"acme", "other"}} {
			b, err := s.Secret(ctx, other[0], other[1])
			if err != nil || string(b) == string(a) {
				t.Fatalf("secret %v is acme's lease secret: %v", other, err)
			}
		}
	})

	t.Run("CRUD", func(t *testing.T) {
		s := newStore(t)
		if _, err := s.GetTenant(ctx, "acme"); !errors.Is(err, sluice.ErrTenantNotFound) {
			t.Fatalf("get missing: %v", err)
		}
		if err := s.CreateTenant(ctx, acme); err != nil {
			t.Fatal(err)
		}
		if err := s.CreateTenant(ctx, acme); !errors.Is(err, sluice.ErrTenantExists) {
			t.Fatalf("create twice: %v", err)
		}
		got, err := s.GetTenant(ctx, "acme")
		if err != nil || !sameTenant(got, acme) || got.Version != 1 {
			t.Fatalf("get: %+v %v, want acme at version 1", got, err)
		}
		upd := acme
		upd.Tier, upd.Settings.TenantConnections, upd.Overrides, upd.Version = "free", 3, nil, got.Version
		if err := s.UpdateTenant(ctx, upd); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.GetTenant(ctx, "acme"); !sameTenant(got, upd) || got.Version != 2 {
			t.Fatalf("after update: %+v, want version 2", got)
		}
		if err := s.UpdateTenant(ctx, sluice.Tenant{ID: "ghost"}); !errors.Is(err, sluice.ErrTenantNotFound) {
			t.Fatalf("update missing: %v", err)
		}
		if err := s.CreateTenant(ctx, sluice.Tenant{ID: "beta"}); err != nil {
			t.Fatal(err)
		}
		list, err := s.ListTenants(ctx)
		if err != nil || len(list) != 2 || list[0].ID != "acme" || list[1].ID != "beta" {
			t.Fatalf("list: %+v %v", list, err)
		}
		if err := s.DeleteTenant(ctx, "acme"); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteTenant(ctx, "acme"); !errors.Is(err, sluice.ErrTenantNotFound) {
			t.Fatalf("delete twice: %v", err)
		}
		if list, _ := s.ListTenants(ctx); len(list) != 1 || list[0].ID != "beta" {
			t.Fatalf("list after delete: %+v", list)
		}
	})

	// Two writers read one version and write over it: the first wins, the
	// second is told the tenant changed and changes nothing; writers that
	// read again and write again on ErrTenantChanged lose nothing.
	t.Run("TwoWriters", func(t *testing.T) {
		s := newStore(t)
		if err := s.CreateTenant(ctx, acme); err != nil {
			t.Fatal(err)
		}
		a, _ := s.GetTenant(ctx, "acme")
		b, _ := s.GetTenant(ctx, "acme")
		a.Tier, b.Tier = "free", "pro"
		if err := s.UpdateTenant(ctx, a); err != nil {
			t.Fatal(err)
		}
		if err := s.UpdateTenant(ctx, b); !errors.Is(err, sluice.ErrTenantChanged) {
			t.Fatalf("a write over a version no longer stored: %v, want ErrTenantChanged", err)
		}
		if got, _ := s.GetTenant(ctx, "acme"); got.Tier != "free" || got.Version != 2 {
			t.Fatalf("after a stale write: tier %q at version %d, want free at 2", got.Tier, got.Version)
		}
		const each = 10
		var wg sync.WaitGroup
		for w := range 2 {
			wg.Go(func() {
				for i := range each {
					key := fmt.Sprintf("w%d-%d", w, i)
					for try := 0; ; try++ {
						cur, err := s.GetTenant(ctx, "acme")
						if err != nil {
							t.Error(err)
							return
						}
						cur.Blocks = append(slices.Clone(cur.Blocks), sluice.KeyBlock{Policy: "login", Key: key, Until: t0.Add(time.Hour), At: t0})
						err = s.UpdateTenant(ctx, cur)
						if err == nil {
							break
						}
						if !errors.Is(err, sluice.ErrTenantChanged) || try == 1000 {
							t.Errorf("writer %d, block %s, try %d: %v", w, key, try, err)
							return
						}
					}
				}
			})
		}
		wg.Wait()
		got, err := s.GetTenant(ctx, "acme")
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Blocks) != 2*each || got.Version != 2+2*each {
			t.Fatalf("two writers of %d blocks each left %d blocks at version %d, want %d at %d", each, len(got.Blocks), got.Version, 2*each, 2+2*each)
		}
	})

	t.Run("APIKeys", func(t *testing.T) {
		s := newStore(t)
		k := sluice.APIKey{ID: "k1", Tenant: "acme", Name: "ci", Hash: []byte{1, 2, 3}, CreatedAt: t0}
		if err := s.PutAPIKey(ctx, k); !errors.Is(err, sluice.ErrTenantNotFound) {
			t.Fatalf("key for a missing tenant: %v", err)
		}
		for _, id := range []string{"acme", "beta"} {
			if err := s.CreateTenant(ctx, sluice.Tenant{ID: id}); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.PutAPIKey(ctx, k); err != nil {
			t.Fatal(err)
		}
		if err := s.PutAPIKey(ctx, sluice.APIKey{ID: "k2", Tenant: "beta", Hash: []byte{4}}); err != nil {
			t.Fatal(err)
		}
		got, err := s.GetAPIKey(ctx, "acme", "k1")
		if err != nil || got.Tenant != "acme" || string(got.Hash) != string(k.Hash) || !got.CreatedAt.Equal(t0) || got.Name != "ci" {
			t.Fatalf("get key: %+v %v", got, err)
		}
		if keys, _ := s.ListAPIKeys(ctx, "acme"); len(keys) != 1 || keys[0].ID != "k1" {
			t.Fatalf("acme's keys: %+v", keys)
		}
		// A tenant cannot delete another's key.
		if err := s.DeleteAPIKey(ctx, "beta", "k1"); !errors.Is(err, sluice.ErrKeyNotFound) {
			t.Fatalf("beta deleting acme's key: %v", err)
		}
		if err := s.DeleteAPIKey(ctx, "acme", "k1"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.GetAPIKey(ctx, "acme", "k1"); !errors.Is(err, sluice.ErrKeyNotFound) {
			t.Fatalf("deleted key: %v", err)
		}
		// Deleting a tenant deletes its keys.
		if err := s.DeleteTenant(ctx, "beta"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.GetAPIKey(ctx, "acme", "k2"); !errors.Is(err, sluice.ErrKeyNotFound) {
			t.Fatalf("beta's key found under acme: %v", err)
		}
		if _, err := s.GetAPIKey(ctx, "beta", "k2"); !errors.Is(err, sluice.ErrKeyNotFound) {
			t.Fatalf("key of a deleted tenant: %v", err)
		}
	})
}

func sameTenant(a, b sluice.Tenant) bool {
	if a.ID != b.ID || a.Tier != b.Tier || a.Settings != b.Settings || !a.CreatedAt.Equal(b.CreatedAt) || !a.UpdatedAt.Equal(b.UpdatedAt) || len(a.Overrides) != len(b.Overrides) {
		return false
	}
	for name, o := range a.Overrides {
		p := b.Overrides[name]
		if !sameInt(o.Limit, p.Limit) || !sameInt(o.Burst, p.Burst) || !sameDur(o.Window, p.Window) || !sameDur(o.LeaseTTL, p.LeaseTTL) {
			return false
		}
	}
	return true
}

func sameInt(a, b *int64) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }
func sameDur(a, b *time.Duration) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}
