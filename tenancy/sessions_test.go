package tenancy

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memstore"
)

// A session lives its tenant's sessionTTL, is its tenant's alone, and
// goes with its tenant: a deleted tenant's sessions are gone, and an
// earlier tenant's of the same id are not the new one's. Deletions are
// told to the subscribers.
func TestSessions(t *testing.T) {
	ctx := context.Background()
	store := &memstore.Tenants{}
	s := newService(t, store)
	var tenants, sessions []string
	s.OnTenantDeleted(func(tenant string) { tenants = append(tenants, tenant) })
	s.OnSessionDeleted(func(tenant, id string) { sessions = append(sessions, tenant+"/"+id) })
	if err := store.CreateTenant(ctx, sluice.Tenant{ID: "globex", CreatedAt: t0, Settings: sluice.TenantSettings{SessionTTL: 60}}); err != nil {
		t.Fatal(err)
	}
	globex := Principal{Tenant: "globex", Key: "k1"}
	x, err := s.CreateSession(ctx, globex, "globex")
	if err != nil || !x.ExpiresAt.Equal(t0.Add(time.Minute)) || x.ID == "" {
		t.Fatalf("a session of globex: %+v, %v; want one expiring in its TTL", x, err)
	}
	if got, err := s.Session(ctx, globex, "globex", x.ID); err != nil || got.ID != x.ID {
		t.Errorf("reading it: %+v, %v", got, err)
	}
	initech := Principal{Tenant: "initech", Key: "k2"}
	if _, err := s.Session(ctx, initech, "globex", x.ID); err != ErrForbidden {
		t.Errorf("another tenant's key reading it: %v, want ErrForbidden", err)
	}
	if _, err := s.CreateSession(ctx, admin.Principal, "nosuch"); !errors.Is(err, sluice.ErrTenantNotFound) {
		t.Errorf("a session of an unknown tenant: %v", err)
	}
	if err := s.DeleteSession(ctx, globex, "globex", x.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Session(ctx, globex, "globex", x.ID); !errors.Is(err, sluice.ErrSessionNotFound) {
		t.Errorf("a deleted session: %v", err)
	}

	x, _ = s.CreateSession(ctx, globex, "globex")
	if err := s.DeleteTenant(ctx, admin, "globex"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Session(ctx, globex, "globex", x.ID); !errors.Is(err, sluice.ErrTenantNotFound) {
		t.Errorf("a deleted tenant's session: %v", err)
	}
	if err := store.CreateTenant(ctx, sluice.Tenant{ID: "globex", CreatedAt: t0.Add(time.Second)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Session(ctx, globex, "globex", x.ID); !errors.Is(err, sluice.ErrSessionNotFound) {
		t.Errorf("an earlier tenant's session: %v", err)
	}
	if err := s.DeleteSession(ctx, globex, "globex", x.ID); !errors.Is(err, sluice.ErrSessionNotFound) {
		t.Errorf("deleting an earlier tenant's session: %v", err)
	}
	if len(tenants) != 1 || tenants[0] != "globex" || len(sessions) != 1 {
		t.Errorf("told of tenants %v and sessions %v; want globex, and the one session deleted", tenants, sessions)
	}
}
