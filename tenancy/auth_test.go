package tenancy

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memstore"
)

const adminKey = "admin-key-for-tests"

var admin = Actor{Principal: Principal{Admin: true}}

// newKeyed is newService with an admin key: every caller authenticates.
func newKeyed(t *testing.T, store sluice.TenantStore) *Service {
	t.Helper()
	s := newService(t, store)
	s.opts.AdminKey = adminKey
	return s
}

// flaky is a tenant store whose reads fail while it is down, as an
// unreachable one's do.
type flaky struct {
	*memstore.Tenants
	down atomic.Bool
}

var errDown = &sluice.Error{Kind: sluice.KindUnavailable, Message: "the store is down"}

func (f *flaky) GetAPIKey(ctx context.Context, tenant, id string) (sluice.APIKey, error) {
	if f.down.Load() {
		return sluice.APIKey{}, errDown
	}
	return f.Tenants.GetAPIKey(ctx, tenant, id)
}

func (f *flaky) GetTenant(ctx context.Context, id string) (sluice.Tenant, error) {
	if f.down.Load() {
		return sluice.Tenant{}, errDown
	}
	return f.Tenants.GetTenant(ctx, id)
}

// mustKey creates tenant (unless it exists) and an API key of it.
func mustKey(t *testing.T, s *Service, tenant string) APIKey {
	t.Helper()
	ctx := context.Background()
	if _, err := s.CreateTenant(ctx, admin, TenantDoc{ID: tenant}); err != nil && !errors.Is(err, sluice.ErrTenantExists) {
		t.Fatal(err)
	}
	k, err := s.CreateKey(ctx, admin, tenant, "test")
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// Authenticate: the admin key is the admin; a tenant's key its tenant,
// by its id; anything else, a key deleted included, is unauthorized, and
// says nothing of why.
func TestAuthenticate(t *testing.T) {
	ctx := context.Background()
	s := newKeyed(t, &memstore.Tenants{})
	k := mustKey(t, s, "globex")
	other := mustKey(t, s, "initech")
	prefix := k.Token[:strings.LastIndexByte(k.Token, '.')+1]
	for _, tc := range []struct {
		name, token string
		want        Principal
	}{
		{"the admin key", adminKey, Principal{Admin: true}},
		{"a tenant's key", k.Token, Principal{Tenant: "globex", Key: k.ID}},
		{"no token", "", Principal{}},
		{"the admin key, longer", adminKey + "x", Principal{}},
		{"an unknown key", "sk_globex.nosuchid.secret", Principal{}},
		{"a wrong secret", prefix + "wrong", Principal{}},
		{"the key of another tenant, named as ours", "sk_globex" + other.Token[len("sk_initech"):], Principal{}},
		{"an invalid tenant", "sk_glo/bex.id.secret", Principal{}},
		{"no id", "sk_globex.secret", Principal{}},
		{"no prefix", strings.TrimPrefix(k.Token, "sk_"), Principal{}},
	} {
		p, err := s.Authenticate(ctx, tc.token)
		if tc.want == (Principal{}) {
			if err != ErrUnauthorized {
				t.Errorf("%s: %+v, %v; want ErrUnauthorized", tc.name, p, err)
			}
			continue
		}
		if err != nil || p != tc.want {
			t.Errorf("%s: %+v, %v; want %+v", tc.name, p, err, tc.want)
		}
	}
	if err := s.DeleteKey(ctx, Actor{Principal: Principal{Tenant: "globex", Key: k.ID}}, "globex", k.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Authenticate(ctx, k.Token); err != ErrUnauthorized {
		t.Errorf("a deleted key: %v, want ErrUnauthorized", err)
	}
	// Without an admin key, everyone is the admin.
	open := newService(t, &memstore.Tenants{})
	if p, err := open.Authenticate(ctx, ""); err != nil || !p.Admin || open.RequiresKey() {
		t.Errorf("without an admin key: %+v, %v", p, err)
	}
}

// A store that fails leaves the fail modes to decide: a key read before
// still authenticates, by the key last read (its secret checked); a key
// never read is unavailable, never unauthorized. A key deleted, or its
// tenant, is forgotten: the store's failure does not bring it back.
func TestAuthenticateStoreDown(t *testing.T) {
	ctx := context.Background()
	store := &flaky{Tenants: &memstore.Tenants{}}
	s := newKeyed(t, store)
	read, unread, deleted := mustKey(t, s, "globex"), mustKey(t, s, "globex"), mustKey(t, s, "initech")
	for _, k := range []APIKey{read, deleted} {
		if _, err := s.Authenticate(ctx, k.Token); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.DeleteTenant(ctx, admin, "initech"); err != nil {
		t.Fatal(err)
	}
	store.down.Store(true)
	if p, err := s.Authenticate(ctx, read.Token); err != nil || p.Tenant != "globex" {
		t.Errorf("a key read before: %+v, %v; want globex's", p, err)
	}
	if _, err := s.Authenticate(ctx, read.Token[:len(read.Token)-1]+"x"); err != ErrUnauthorized {
		t.Errorf("a key read before, with a wrong secret: %v, want ErrUnauthorized", err)
	}
	for name, k := range map[string]APIKey{"a key never read": unread, "a deleted tenant's key": deleted} {
		if p, err := s.Authenticate(ctx, k.Token); sluice.KindOf(err) != sluice.KindUnavailable {
			t.Errorf("%s: %+v, %v; want unavailable", name, p, err)
		}
	}
}

func TestPrincipal(t *testing.T) {
	key := Principal{Tenant: "globex", Key: "k1"}
	for _, tc := range []struct {
		who           Principal
		named, tenant string
		err           error
	}{
		{key, "", "globex", nil},
		{key, "globex", "globex", nil},
		{key, "initech", "", ErrForbidden},
		{admin.Principal, "initech", "initech", nil},
	} {
		got, err := tc.who.TenantOf(tc.named)
		if got != tc.tenant || err != tc.err {
			t.Errorf("%+v naming %q: %q, %v; want %q, %v", tc.who, tc.named, got, err, tc.tenant, tc.err)
		}
	}
	if key.Can("initech") || !key.Can("globex") || !admin.Can("initech") {
		t.Error("Can: a key reaches its tenant alone, the admin every one")
	}
	if key.AdminOnly() != ErrAdminOnly || admin.AdminOnly() != nil {
		t.Error("AdminOnly: the admin's alone")
	}
}

// The audit trail names the admin with the operator's name, if it is
// printable and short; a tenant's key by its id, whatever name it gives.
func TestActor(t *testing.T) {
	for _, tc := range []struct {
		a    Actor
		want string
	}{
		{admin, "admin"},
		{Actor{Principal: admin.Principal, Name: "alice"}, "admin (alice)"},
		{Actor{Principal: admin.Principal, Name: strings.Repeat("a", 65)}, "admin"},
		{Actor{Principal: admin.Principal, Name: "al\nice"}, "admin"},
		{Actor{Principal: Principal{Tenant: "globex", Key: "k1"}, Name: "admin (alice)"}, "key k1"},
	} {
		if got := tc.a.String(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.a, got, tc.want)
		}
	}
}
