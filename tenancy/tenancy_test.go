package tenancy

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/store/memstore"
)

var t0 = time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)

// newService returns a Service over a memory store, configured by
// examples/sluice.yaml: acme (premium, chat overridden to 500) and demo
// (free) are the file's.
func newService(t *testing.T, store sluice.TenantStore) *Service {
	t.Helper()
	cfg, err := config.Load("../examples/sluice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return New(Options{Store: store, Secrets: &memstore.Tenants{}, Sessions: &memstore.Sessions{}, Audit: &memstore.Audit{},
		Config: func() *config.Config { return cfg }, Now: func() time.Time { return t0 }})
}

// failing is a tenant store whose reads fail, as an unreachable one's do.
type failing struct{ sluice.TenantStore }

func (failing) GetTenant(context.Context, string) (sluice.Tenant, error) {
	return sluice.Tenant{}, &sluice.Error{Kind: sluice.KindUnavailable, Message: "the store is down"}
}

// A tenant is one view of the store's record and the file's entry: the
// store's fields first, then the file's, then the defaults; a tenant
// neither knows is not found; a failing store is an error, never "not
// found".
func TestLookup(t *testing.T) {
	ctx := context.Background()
	store := &memstore.Tenants{}
	s := newService(t, store)
	if err := store.CreateTenant(ctx, sluice.Tenant{ID: "globex", Tier: "premium", CreatedAt: t0,
		Settings: sluice.TenantSettings{SessionTTL: 60}}); err != nil {
		t.Fatal(err)
	}
	if err := store.CreateTenant(ctx, sluice.Tenant{ID: "acme", Settings: sluice.TenantSettings{SessionTTL: 30}, CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		id           string
		stored, file bool
		tier         string
		conns, ttl   int64
	}{
		{"globex", true, false, "premium", 100, 60}, // stored only: the defaults fill in
		{"acme", true, true, "premium", 500, 30},    // both: the store's TTL, the file's tier and connections
		{"demo", false, true, "free", 100, 300},     // the file's alone
	} {
		got, err := s.Lookup(ctx, tc.id)
		if err != nil {
			t.Fatalf("%s: %v", tc.id, err)
		}
		if (got.Record != nil) != tc.stored || got.InFile != tc.file || got.Tier() != tc.tier ||
			got.Settings().TenantConnections != tc.conns || got.Settings().SessionTTL != tc.ttl {
			t.Errorf("%s: stored %v, file %v, tier %q, settings %+v; want %+v", tc.id, got.Record != nil, got.InFile, got.Tier(), got.Settings(), tc)
		}
		if want := map[bool]time.Time{true: t0}[tc.stored]; !got.Since().Equal(want) {
			t.Errorf("%s: since %v, want %v", tc.id, got.Since(), want)
		}
	}
	if _, err := s.Lookup(ctx, "nobody"); !errors.Is(err, sluice.ErrTenantNotFound) {
		t.Errorf("a tenant nobody knows: %v, want not found", err)
	}
	down := newService(t, failing{store})
	if _, err := down.Lookup(ctx, "demo"); sluice.KindOf(err) != sluice.KindUnavailable {
		t.Errorf("a failing store: %v, want unavailable", err)
	}
	if v, err := down.View(ctx, "acme"); sluice.KindOf(err) != sluice.KindUnavailable || !v.InFile || v.Tier() != "premium" {
		t.Errorf("a failing store's view: %+v, %v; want the file's acme and the store's error", v, err)
	}
}

// Checks are the limits enforced: the tier's and overrides' limit, the
// counter's key of the request's parts, the operator's block; a missing
// part names its field; a failing store leaves the file's checks and
// says so.
func TestChecks(t *testing.T) {
	ctx := context.Background()
	store := &memstore.Tenants{}
	s := newService(t, store)
	ten := int64(10)
	if err := store.CreateTenant(ctx, sluice.Tenant{ID: "globex", Tier: "premium", CreatedAt: t0,
		Overrides: map[string]sluice.PolicyOverride{"models": {Limit: &ten}}}); err != nil {
		t.Fatal(err)
	}
	user := func(u string) KeyParts { return KeyParts{Parts: map[string]string{"user": u}} }
	for _, tc := range []struct {
		tenant, endpoint string
		want             int64
	}{
		{"globex", "chat", 100},  // the premium tier's
		{"globex", "models", 10}, // the store's override, over the tier's 50
		{"acme", "chat", 500},    // the file's override, over the tier's 100
		{"demo", "chat", 20},     // the policy's own
		{"nobody", "chat", 20},   // a tenant nobody knows: the defaults
	} {
		checks, storeErr, err := s.Checks(ctx, tc.tenant, tc.endpoint, nil, user("bob"))
		if err != nil || storeErr != nil || len(checks) != 1 || checks[0].Policy.Limit != tc.want {
			t.Errorf("%s on %s: %+v, %v, %v; want a limit of %d", tc.tenant, tc.endpoint, checks, storeErr, err, tc.want)
		}
	}
	if _, _, err := s.Checks(ctx, "globex", "chat", nil, KeyParts{}); sluice.FieldOf(err) != "key.user" {
		t.Errorf("a missing key part: %v, want an error naming key.user", err)
	}
	ip := KeyParts{IP: func() (string, bool) { return "192.0.2.7", true }}
	checks, _, err := s.Checks(ctx, "globex", "login", nil, ip)
	if err != nil || checks[0].Key != "\x02ip\x09192.0.2.7" {
		t.Errorf("a policy keyed by ip: %+v, %v; want the client's address", checks, err)
	}
	// A block of bob's chat key holds bob, not alice.
	key, _ := CounterKey(config.Resolved{Key: []string{"user"}}, user("bob"))
	if _, _, err := s.Update(ctx, "globex", func(t sluice.Tenant) (sluice.Tenant, error) {
		t.Blocks = []sluice.KeyBlock{{Policy: "chat", Key: key, Until: t0.Add(time.Hour), At: t0}}
		return t, nil
	}); err != nil {
		t.Fatal(err)
	}
	for u, want := range map[string]time.Time{"bob": t0.Add(time.Hour), "alice": {}} {
		checks, _, _ := s.Checks(ctx, "globex", "chat", nil, user(u))
		if !checks[0].BlockedUntil.Equal(want) {
			t.Errorf("%s: blocked until %v, want %v", u, checks[0].BlockedUntil, want)
		}
	}
	down := newService(t, failing{store})
	checks, storeErr, err := down.Checks(ctx, "acme", "chat", nil, user("bob"))
	if err != nil || sluice.KindOf(storeErr) != sluice.KindUnavailable || checks[0].Policy.Limit != 500 {
		t.Errorf("a failing store: %+v, %v, %v; want the file's checks and the store's error", checks, storeErr, err)
	}
}

// racing is a tenant store that, once, lets another writer change the
// tenant between a writer's read and its write.
type racing struct {
	*memstore.Tenants
	once atomic.Bool
}

func (r *racing) GetTenant(ctx context.Context, id string) (sluice.Tenant, error) {
	t, err := r.Tenants.GetTenant(ctx, id)
	if err == nil && r.once.CompareAndSwap(false, true) {
		other := t
		other.Tier = "premium"
		if err := r.Tenants.UpdateTenant(ctx, other); err != nil {
			return t, err
		}
	}
	return t, err
}

// Update writes over the version it read, and reads and changes again
// when another writer came between: both changes land. A change's own
// error is not tried again.
func TestUpdate(t *testing.T) {
	ctx := context.Background()
	store := &racing{Tenants: &memstore.Tenants{}}
	s := newService(t, store)
	if err := store.CreateTenant(ctx, sluice.Tenant{ID: "globex", CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	calls := 0
	_, got, err := s.Update(ctx, "globex", func(t sluice.Tenant) (sluice.Tenant, error) {
		calls++
		t.Settings.SessionTTL = 42
		return t, nil
	})
	if err != nil || calls != 2 || got.Version != 3 {
		t.Fatalf("an update raced once: %+v, %v, after %d changes; want version 3 after 2", got, err, calls)
	}
	if stored, _ := store.GetTenant(ctx, "globex"); stored.Tier != "premium" || stored.Settings.SessionTTL != 42 || stored.Version != 3 {
		t.Fatalf("stored: %+v; want both writers' changes at version 3", stored)
	}
	calls = 0
	if _, _, err := s.Update(ctx, "globex", func(t sluice.Tenant) (sluice.Tenant, error) {
		calls++
		return t, sluice.ErrTenantChanged
	}); !errors.Is(err, sluice.ErrTenantChanged) || calls != 1 {
		t.Errorf("a change's own precondition: %v after %d calls, want it once", err, calls)
	}
	if _, _, err := s.Update(ctx, "nobody", func(t sluice.Tenant) (sluice.Tenant, error) { return t, nil }); !errors.Is(err, sluice.ErrTenantNotFound) {
		t.Errorf("updating a tenant nobody stored: %v", err)
	}
}

// A counter key reads as "user=bot-7", and the readable form parses back
// to the same key, whatever its values hold; anything else is refused.
func TestReadableKey(t *testing.T) {
	for _, tc := range []struct {
		names []string
		parts map[string]string
		want  string
	}{
		{[]string{"user"}, map[string]string{"user": "bot-7"}, "user=bot-7"},
		{[]string{"user", "ip"}, map[string]string{"user": "a&b=c, d", "ip": "2001:db8::1"}, "user=a%26b%3Dc%2C+d&ip=2001%3Adb8%3A%3A1"},
		{[]string{"user"}, map[string]string{"user": ""}, "user="},
	} {
		raw, err := CounterKey(config.Resolved{Key: tc.names}, KeyParts{Parts: tc.parts})
		if err != nil {
			t.Fatal(err)
		}
		got, ok := ReadableKey(tc.names, raw)
		if !ok || got != tc.want {
			t.Errorf("%v: %q, %v; want %q", tc.parts, got, ok, tc.want)
		}
		if back, ok := ParseReadableKey(tc.names, got); !ok || back != raw {
			t.Errorf("%q parsed back: %q, %v; want %q", got, back, ok, raw)
		}
	}
	user, _ := CounterKey(config.Resolved{Key: []string{"user"}}, KeyParts{Parts: map[string]string{"user": "x"}})
	for _, bad := range []struct {
		names []string
		s     string
	}{
		{[]string{"user"}, "ip=1.2.3.4"},
		{[]string{"user"}, "user=a&user=b"},
		{[]string{"user"}, "user=a&ip=b"},
		{[]string{"user", "ip"}, "user=a"},
		{[]string{"user"}, user}, // a raw key is not a readable one
		{[]string{"user"}, "%zz"},
	} {
		if k, ok := ParseReadableKey(bad.names, bad.s); ok {
			t.Errorf("%q for %v parsed as %q", bad.s, bad.names, k)
		}
	}
	if _, ok := ReadableKey([]string{"ip"}, user); ok {
		t.Error("a key of user read as a key of ip")
	}
	if _, ok := ReadableKey([]string{"user"}, "plain"); ok {
		t.Error("an inline key read as a configured policy's")
	}
}

// A configuration of no policies (serve without --config) limits nothing:
// a tenant's limits are none, not an error.
func TestLimitsWithoutPolicies(t *testing.T) {
	cfg, err := config.Parse("empty.yaml", []byte("{}"))
	if err != nil {
		t.Fatal(err)
	}
	store := &memstore.Tenants{}
	s := New(Options{Store: store, Secrets: &memstore.Tenants{}, Sessions: &memstore.Sessions{}, Audit: &memstore.Audit{},
		Config: func() *config.Config { return cfg }, Now: func() time.Time { return t0 }})
	if err := store.CreateTenant(context.Background(), sluice.Tenant{ID: "t1"}); err != nil {
		t.Fatal(err)
	}
	tn, err := s.Lookup(context.Background(), "t1")
	if err != nil {
		t.Fatal(err)
	}
	if ls, err := tn.Limits(); err != nil || ls == nil || len(ls) != 0 {
		t.Fatalf("limits without policies: %v %v, want none", ls, err)
	}
}
