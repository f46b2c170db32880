package tenancy

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memstore"
)

// TestUpstreamWeight: a tenant's weight on an upstream is its own, else its
// tier's (the store's tier, else the file's), else 1; a failing store
// weighs by the file's tier rather than refusing.
func TestUpstreamWeight(t *testing.T) {
	ctx := context.Background()
	store := &memstore.Tenants{}
	for _, tn := range []sluice.Tenant{{ID: "x", Tier: "premium", CreatedAt: t0}, {ID: "acme", Tier: "free", CreatedAt: t0}} {
		if err := store.CreateTenant(ctx, tn); err != nil {
			t.Fatal(err)
		}
	}
	w := Weights{Tiers: map[string]int64{"premium": 2, "free": 3}, Tenants: map[string]int64{"own": 7}}
	s, down := newService(t, store), newService(t, failing{store})
	for _, tc := range []struct {
		s      *Service
		tenant string
		want   int64
	}{
		{s, "own", 7},     // its own weight, whatever its tier
		{s, "x", 2},       // the store's tier
		{s, "demo", 3},    // the file's tier (free)
		{s, "acme", 3},    // the store's tier over the file's (premium)
		{down, "acme", 2}, // the store down: the file's tier
		{down, "own", 7},  // its own weight needs no store
		{s, "nobody", 3},  // the default tier, free
	} {
		if got := tc.s.UpstreamWeight(ctx, w, tc.tenant); got != tc.want {
			t.Errorf("%s (store down: %v): weight %d, want %d", tc.tenant, tc.s == down, got, tc.want)
		}
	}
	if got := s.UpstreamWeight(ctx, Weights{}, "x"); got != 1 {
		t.Errorf("no weights: %d, want 1", got)
	}
}
