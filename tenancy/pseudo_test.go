package tenancy

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/pseudo"
	"github.com/sluicehq/sluice/store/memstore"
)

// TestPseudonymisedChecks: with Pseudonyms, a named request's checks are
// keyed by each part's pseudonym, the same for every policy keyed by it,
// the client's address included, and tenant by tenant; an inline check's
// key is made whole, and the empty key stays empty.
func TestPseudonymisedChecks(t *testing.T) {
	s, k := newPseudoService(t)
	ctx := context.Background()
	parts := KeyParts{Parts: map[string]string{"user": "alice@example.com"}}
	checks, _, err := s.Checks(ctx, "acme", "search", nil, parts)
	if err != nil || len(checks) != 2 {
		t.Fatalf("search's checks: %v, %v", checks, err)
	}
	want := "user=" + k.Value("acme", "user", "alice@example.com")
	for _, c := range checks {
		if got := s.KeyLabel(c.Policy.Name, c.Key); got != want || strings.Contains(c.Key, "alice") {
			t.Errorf("%s's key %q, want %q", c.Policy.Name, got, want)
		}
	}
	other, _, _ := s.Checks(ctx, "demo", "search", nil, parts)
	if other[0].Key == checks[0].Key {
		t.Errorf("two tenants' pseudonyms of one key are one: %q", other[0].Key)
	}
	ip := KeyParts{IP: func() (string, bool) { return "192.0.2.7", true }}
	login, _, err := s.Checks(ctx, "acme", "", []string{"login-per-ip"}, ip)
	if err != nil || s.KeyLabel("login-per-ip", login[0].Key) != "ip="+k.Value("acme", "ip", "192.0.2.7") {
		t.Errorf("login-per-ip's key %q, %v: want the client's address made a pseudonym", s.KeyLabel("login-per-ip", login[0].Key), err)
	}
	inline := []sluice.Check{{Key: "alice@example.com"}, {Key: ""}}
	s.HideKeys("acme", inline)
	if inline[0].Key != k.Value("acme", "", "alice@example.com") || inline[1].Key != "" {
		t.Errorf("inline keys %q, want the first's pseudonym and the empty key", []string{inline[0].Key, inline[1].Key})
	}
}

// newPseudoService is a service of examples/sluice.yaml with pseudonymised
// keys, and the keyer of its secret.
func newPseudoService(t *testing.T) (*Service, *pseudo.Keyer) {
	t.Helper()
	cfg, err := config.Load("../examples/sluice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	k, err := pseudo.New([]byte("0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	return New(Options{Store: &memstore.Tenants{}, Secrets: &memstore.Tenants{}, Sessions: &memstore.Sessions{}, Audit: &memstore.Audit{},
		Config: func() *config.Config { return cfg }, Now: func() time.Time { return t0 }, Pseudonyms: k}), k
}
