package dynamostore

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/dynamostore/dynamotest"
)

// fakeClock is a settable clock for the tenant cache.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestTenantCache: two nodes on one table. Node A answers GetTenant from
// its cache for TenantTTL, so node B's changes reach it only after the
// TTL; A's own changes it sees at once.
func TestTenantCache(t *testing.T) {
	ctx := dynamotest.Context(t)
	db := dynamotest.Client(t)
	table := dynamotest.TableName(t)
	if err := CreateTable(ctx, db, table); err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{t: time.Unix(1_800_000_000, 0)}
	a, err := New(db, Options{Table: table, TenantTTL: time.Second, Now: clock.now})
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(db, Options{Table: table, TenantTTL: -1})
	if err != nil {
		t.Fatal(err)
	}

	if _, err := a.GetTenant(ctx, "acme"); !errors.Is(err, sluice.ErrTenantNotFound) {
		t.Fatalf("before create: %v", err)
	}
	if err := b.CreateTenant(ctx, sluice.Tenant{ID: "acme", Tier: "free"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.GetTenant(ctx, "acme"); !errors.Is(err, sluice.ErrTenantNotFound) {
		t.Fatalf("A within the TTL of its miss: %v, want its cached miss", err)
	}
	if got, _ := b.GetTenant(ctx, "acme"); got.Tier != "free" {
		t.Fatalf("B, uncached: %+v", got)
	}
	clock.add(time.Second)
	got, err := a.GetTenant(ctx, "acme")
	if err != nil || got.Tier != "free" {
		t.Fatalf("A after the TTL: %+v, %v", got, err)
	}

	// A caller changing what it got does not change the cache.
	got.Overrides = map[string]sluice.PolicyOverride{"x": {}}
	if again, _ := a.GetTenant(ctx, "acme"); len(again.Overrides) != 0 {
		t.Fatalf("cache changed by a caller: %+v", again)
	}

	if err := b.UpdateTenant(ctx, sluice.Tenant{ID: "acme", Tier: "pro", Version: 1}); err != nil {
		t.Fatal(err)
	}
	cached, _ := a.GetTenant(ctx, "acme")
	if cached.Tier != "free" || cached.Version != 1 {
		t.Fatalf("A within the TTL: %q at version %d, want the cached free at 1", cached.Tier, cached.Version)
	}
	// A write over what A cached is refused, and A reads the tenant
	// again, whatever its TTL.
	cached.Tier = "enterprise"
	if err := a.UpdateTenant(ctx, cached); !errors.Is(err, sluice.ErrTenantChanged) {
		t.Fatalf("A writing over its cached version: %v, want ErrTenantChanged", err)
	}
	fresh, _ := a.GetTenant(ctx, "acme")
	if fresh.Tier != "pro" || fresh.Version != 2 {
		t.Fatalf("A after a refused write: %q at version %d, want pro at 2", fresh.Tier, fresh.Version)
	}
	fresh.Tier = "enterprise"
	if err := a.UpdateTenant(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	if got, _ := a.GetTenant(ctx, "acme"); got.Tier != "enterprise" {
		t.Fatalf("A after its own update: %q", got.Tier)
	}
	if err := a.DeleteTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.GetTenant(ctx, "acme"); !errors.Is(err, sluice.ErrTenantNotFound) {
		t.Fatalf("A after its own delete: %v", err)
	}
}

// TestTenantCacheBounded: lookups of more unknown tenants than the cache
// holds keep it at its bound.
func TestTenantCacheBounded(t *testing.T) {
	now := time.Unix(0, 0)
	c := newTenantCache(time.Second, 3, func() time.Time { return now })
	for i := range 10 {
		c.put(string(rune('a'+i)), sluice.Tenant{}, false, 0)
	}
	if len(c.entries) != 3 {
		t.Fatalf("%d entries, want 3", len(c.entries))
	}
	now = now.Add(time.Second)
	c.put("z", sluice.Tenant{}, false, 0)
	if _, _, ok, _ := c.get("z"); !ok || len(c.entries) != 1 {
		t.Fatalf("after expiry: z cached %v, %d entries, want the expired dropped", ok, len(c.entries))
	}
}

// TestTenantCacheRace: a read that began before this node's write is not
// kept over it.
func TestTenantCacheRace(t *testing.T) {
	now := time.Unix(0, 0)
	c := newTenantCache(time.Second, 10, func() time.Time { return now })
	_, _, _, gen := c.get("acme")
	c.forget("acme") // a write lands while the read is in flight
	c.put("acme", sluice.Tenant{ID: "acme", Tier: "old"}, true, gen)
	if _, _, ok, _ := c.get("acme"); ok {
		t.Fatal("a read from before the write was cached")
	}
}

// TestTenantWrittenBeforeVersions: a tenant item written before tenants
// had versions (no ver attribute, no version in its document) reads as
// version 0, and is written over once from it: the second write over
// version 0 is told the tenant changed.
func TestTenantWrittenBeforeVersions(t *testing.T) {
	s := newStore(t)
	ctx := dynamotest.Context(t)
	item := key(tenantPK("old"), skTenant)
	item[attrDoc] = str(`{"id":"old","tier":"free","settings":{},"createdAt":"2026-01-01T00:00:00Z","updatedAt":"2026-01-01T00:00:00Z"}`)
	item[attrGSI1PK], item[attrGSI1SK] = str("tenants"), str("old")
	if _, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &s.table, Item: item}); err != nil {
		t.Fatal(err)
	}
	old, err := s.GetTenant(ctx, "old")
	if err != nil || old.Version != 0 || old.Tier != "free" {
		t.Fatalf("a tenant of before versions: %+v, %v; want free at version 0", old, err)
	}
	first, second := old, old
	first.Tier, second.Tier = "pro", "enterprise"
	if err := s.UpdateTenant(ctx, first); err != nil {
		t.Fatal(err)
	}
	if err := s.UpdateTenant(ctx, second); !errors.Is(err, sluice.ErrTenantChanged) {
		t.Fatalf("a second write over version 0: %v, want ErrTenantChanged", err)
	}
	if got, _ := s.GetTenant(ctx, "old"); got.Tier != "pro" || got.Version != 1 {
		t.Fatalf("after: %q at version %d, want pro at 1", got.Tier, got.Version)
	}
}
