package tenancy

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memstore"
)

// A lease token names its key and id to its tenant and policy alone: not
// to another tenant, nor another policy, nor a tenant made anew under the
// same id, whether this node deleted the earlier one or another did; a
// token changed in any byte is no token.
func TestLeaseTokens(t *testing.T) {
	ctx := context.Background()
	store := &memstore.Tenants{}
	s := newService(t, store)
	for _, id := range []string{"globex", "initech"} {
		if err := store.CreateTenant(ctx, sluice.Tenant{ID: id, CreatedAt: t0}); err != nil {
			t.Fatal(err)
		}
	}
	parts := KeyParts{}
	c, err := s.LeaseCheck(ctx, "globex", "reports-running", &parts)
	if err != nil {
		t.Fatal(err)
	}
	c.Key = "k"
	tok, err := s.LeaseToken(ctx, "globex", c, 7)
	if err != nil {
		t.Fatal(err)
	}
	named, err := s.LeaseCheck(ctx, "globex", "reports-running", nil) // a renewal's: no key
	if err != nil || named.Key != "" {
		t.Fatalf("a renewal's check: %+v, %v", named, err)
	}
	if key, id, err := s.ParseLeaseToken(ctx, "globex", named, tok); err != nil || key != "k" || id != 7 {
		t.Fatalf("the token's own tenant and policy: %q, %d, %v", key, id, err)
	}
	inline, err := s.InlineLeaseCheck(sluice.Policy{Name: "reports-running-2", Algorithm: sluice.Concurrency, Limit: 5, LeaseTTL: time.Minute}, "")
	if err != nil {
		t.Fatal(err)
	}
	tampered := []byte(tok)
	tampered[len(tampered)/2] ^= 1
	refused := func(what, tenant string, c sluice.Check, tok string) {
		t.Helper()
		if key, id, err := s.ParseLeaseToken(ctx, tenant, c, tok); sluice.FieldOf(err) != "token" {
			t.Errorf("%s: %q, %d, %v; want an invalid token", what, key, id, err)
		}
	}
	refused("another tenant", "initech", named, tok)
	refused("another policy", "globex", inline, tok)
	refused("a changed token", "globex", named, string(tampered))
	refused("no token", "globex", named, "")

	// Deleted here, then made anew.
	if err := s.DeleteTenant(ctx, admin, "globex"); err != nil {
		t.Fatal(err)
	}
	if err := store.CreateTenant(ctx, sluice.Tenant{ID: "globex", CreatedAt: t0.Add(time.Second)}); err != nil {
		t.Fatal(err)
	}
	refused("a tenant made anew", "globex", named, tok)
	// Deleted by another node, then made anew: this one's secret of the
	// earlier tenant is the earlier tenant's alone.
	again, err := s.LeaseToken(ctx, "globex", c, 8)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.DeleteTenant(ctx, "globex"); err != nil {
		t.Fatal(err)
	}
	if err := store.CreateTenant(ctx, sluice.Tenant{ID: "globex", CreatedAt: t0.Add(2 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	refused("a tenant made anew on another node", "globex", named, again)
}

// A lease's check: a configured concurrency policy, or an inline one that
// names no configured policy; anything else says which field is wrong. A
// lease needs the store: when it fails, no fail mode hands one out.
func TestLeaseCheck(t *testing.T) {
	ctx := context.Background()
	store := &memstore.Tenants{}
	s := newService(t, store)
	inline := sluice.Policy{Name: "jobs", Algorithm: sluice.Concurrency, Limit: 2, LeaseTTL: time.Minute}
	for _, tc := range []struct {
		name, field, message string
		check                func() (sluice.Check, error)
	}{
		{"a policy of another algorithm", "policy", "leases need a concurrency policy", func() (sluice.Check, error) {
			return s.LeaseCheck(ctx, "acme", "chat", &KeyParts{Parts: map[string]string{"user": "u"}})
		}},
		{"an unknown policy", "policy", "not a configured policy", func() (sluice.Check, error) {
			return s.LeaseCheck(ctx, "acme", "nosuch", nil)
		}},
		{"an inline policy named as a configured one", "policy.name", "is a configured policy", func() (sluice.Check, error) {
			p := inline
			p.Name = "reports-running"
			return s.InlineLeaseCheck(p, "")
		}},
		{"an inline policy of another algorithm", "policy", "leases need a concurrency policy", func() (sluice.Check, error) {
			p := inline
			p.Algorithm, p.Window = sluice.FixedWindow, time.Minute
			return s.InlineLeaseCheck(p, "")
		}},
		{"an inline key too long", "keyValue", "at most", func() (sluice.Check, error) {
			return s.InlineLeaseCheck(inline, strings.Repeat("k", sluice.MaxKeyLen+1))
		}},
	} {
		c, err := tc.check()
		if sluice.FieldOf(err) != tc.field || err == nil || !strings.Contains(err.Error(), tc.message) {
			t.Errorf("%s: %+v, %v; want an error of %s saying %q", tc.name, c, err, tc.field, tc.message)
		}
	}
	if c, err := s.InlineLeaseCheck(inline, "k"); err != nil || c.Space != sluice.SpaceInline || c.Key != "k" {
		t.Errorf("an inline lease: %+v, %v", c, err)
	}
	down := newService(t, failing{store})
	if c, err := down.LeaseCheck(ctx, "acme", "reports-running", nil); sluice.KindOf(err) != sluice.KindUnavailable {
		t.Errorf("a failing store: %+v, %v; want unavailable", c, err)
	}
}
