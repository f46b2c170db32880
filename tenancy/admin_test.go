package tenancy

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memstore"
)

// The administration is the admin's; a tenant's key reads its own
// tenant's trail, from its creation on, with the operators named "admin"
// (in the entries and in the blocks they record), and its own blocks the
// same way.
func TestAuditAndBlocks(t *testing.T) {
	ctx := context.Background()
	s := newService(t, &memstore.Tenants{})
	alice := Actor{Principal: admin.Principal, Name: "alice"}
	key := Actor{Principal: Principal{Tenant: "globex", Key: "k1"}}
	if _, err := s.CreateTenant(ctx, key, TenantDoc{ID: "globex"}); err != ErrAdminOnly {
		t.Fatalf("a tenant's key creating a tenant: %v, want ErrAdminOnly", err)
	}
	if _, err := s.CreateTenant(ctx, alice, TenantDoc{ID: "globex"}); err != nil {
		t.Fatal(err)
	}
	mallory := "mallory"
	block := BlockRequest{Policy: "chat", Parts: map[string]string{"user": mallory}, Seconds: 60}
	if _, err := s.Block(ctx, key, "globex", block); err != ErrAdminOnly {
		t.Fatalf("a tenant's key blocking: %v, want ErrAdminOnly", err)
	}
	b, err := s.Block(ctx, alice, "globex", block)
	if err != nil || b.Key != "user=mallory" || b.By != "admin (alice)" {
		t.Fatalf("a block: %+v, %v", b, err)
	}
	if _, err := s.Lift(ctx, key, "globex", LiftRequest{Policy: "chat", Key: new("user=mallory")}, nil); err != ErrAdminOnly {
		t.Fatalf("a tenant's key lifting: %v, want ErrAdminOnly", err)
	}
	for _, tc := range []struct {
		who  Principal
		want string
	}{{admin.Principal, "admin (alice)"}, {key.Principal, "admin"}} {
		bs, err := s.Blocks(ctx, tc.who, "globex")
		if err != nil || len(bs) != 1 || bs[0].By != tc.want {
			t.Errorf("%+v reading the blocks: %+v, %v; want by %q", tc.who, bs, err, tc.want)
		}
		entries, err := s.Audit(ctx, tc.who, "globex", 10)
		if err != nil || len(entries) != 2 {
			t.Fatalf("%+v reading the trail: %+v, %v", tc.who, entries, err)
		}
		for _, e := range entries {
			if e.Actor != tc.want || (e.Action == "block" && !strings.Contains(string(e.After), `"by":"`+tc.want+`"`)) {
				t.Errorf("%+v reading the trail: %s by %q, after %s; want the operator named %q", tc.who, e.Action, e.Actor, e.After, tc.want)
			}
		}
	}
	if _, err := s.Audit(ctx, Principal{Tenant: "initech", Key: "k2"}, "globex", 10); err != ErrForbidden {
		t.Errorf("another tenant's key reading the trail: %v, want ErrForbidden", err)
	}
	l, err := s.Lift(ctx, alice, "globex", LiftRequest{Policy: "chat", Key: new("user=mallory")}, nil)
	if err != nil || !l.Block {
		t.Errorf("a lift: %+v, %v", l, err)
	}

	// Made anew: the trail of the earlier tenant is the admin's alone.
	if err := s.DeleteTenant(ctx, alice, "globex"); err != nil {
		t.Fatal(err)
	}
	s.opts.Now = func() time.Time { return t0.Add(time.Second) }
	if _, err := s.CreateTenant(ctx, alice, TenantDoc{ID: "globex"}); err != nil {
		t.Fatal(err)
	}
	if entries, _ := s.Audit(ctx, key.Principal, "globex", 10); len(entries) != 1 || entries[0].Action != "tenant.create" {
		t.Errorf("a tenant made anew reads %+v; want its own creation alone", entries)
	}
	if entries, _ := s.Audit(ctx, admin.Principal, "globex", 10); len(entries) != 5 {
		t.Errorf("the admin reads %d entries, want all 5", len(entries))
	}
}

// A tenant's writes are checked against the configuration, naming the
// field at fault; a tenant of the configuration file is changed in the
// file.
func TestTenantWrites(t *testing.T) {
	ctx := context.Background()
	s := newService(t, &memstore.Tenants{})
	for _, tc := range []struct {
		doc   string
		d     TenantDoc
		field string
	}{
		{"an unknown tier", TenantDoc{ID: "globex", Tier: "gold"}, "tier"},
		{"an override of an unknown policy", TenantDoc{ID: "globex", Overrides: map[string]OverrideDoc{"nosuch": {}}}, "overrides.nosuch"},
		{"a bad window", TenantDoc{ID: "globex", Overrides: map[string]OverrideDoc{"chat": {Window: []byte(`"soon"`)}}}, "overrides.chat.window"},
		{"an override leaving no valid policy", TenantDoc{ID: "globex", Overrides: map[string]OverrideDoc{"chat": {Limit: new(int64)}}}, "overrides.chat.limit"},
		{"a source", TenantDoc{ID: "globex", Source: "file"}, "source"},
		{"a negative version", TenantDoc{ID: "globex", Version: -1}, "version"},
	} {
		if _, err := s.CreateTenant(ctx, admin, tc.d); sluice.FieldOf(err) != tc.field {
			t.Errorf("%s: %v, want an error naming %s", tc.doc, err, tc.field)
		}
	}
	if _, err := s.ReplaceTenant(ctx, admin, "globex", TenantDoc{ID: "initech"}); sluice.FieldOf(err) != "id" {
		t.Errorf("a replacement naming another id: %v", err)
	}
	_, err := s.ReplaceTenant(ctx, admin, "demo", TenantDoc{Tier: "premium"})
	if sluice.KindOf(err) != sluice.KindConflict || !strings.Contains(fmt.Sprint(err), "configuration file") {
		t.Errorf("a replacement of the file's demo: %v, want a conflict naming the file", err)
	}
	if d, err := s.ShowTenant(ctx, admin.Principal, "demo"); err != nil || d.Source != "file" || d.Tier != "free" {
		t.Errorf("the file's demo: %+v, %v", d, err)
	}
}

// The caches are bounded per server, and forget a tenant's values, and
// no other's, when it is deleted.
func TestCacheBounded(t *testing.T) {
	c := cache[int]{max: 3}
	for i := range 3 {
		c.put("a", fmt.Sprint(i), i)
	}
	c.put("ab", "0", 9)
	if n := c.n.Load(); n > 3 {
		t.Fatalf("%d values held, at most 3", n)
	}
	c.put("a", "0", 0)
	c.put("b", "0", 1)
	c.forgetTenant("a")
	if _, ok := c.get("a", "0"); ok {
		t.Error("a deleted tenant's value is held")
	}
	if v, ok := c.get("ab", "0"); !ok || v != 9 {
		t.Errorf("tenant ab's value: %d, %v; want it held", v, ok)
	}
	if v, ok := c.get("b", "0"); !ok || v != 1 {
		t.Errorf("tenant b's value: %d, %v; want it held", v, ok)
	}
	if n := c.n.Load(); n != 2 {
		t.Errorf("%d values counted, want 2", n)
	}
}
