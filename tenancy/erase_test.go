package tenancy

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memstore"
)

// TestPseudonymisedListedKeys: under pseudonymised keys, a key given as
// listed whose value is not a pseudonym is refused, naming key, by a
// block, a lift and an erase, and nothing is recorded; a lift by parts
// finds the block made by parts, and a key as listed (a pseudonym) does.
func TestPseudonymisedListedKeys(t *testing.T) {
	s, k := newPseudoService(t)
	ctx := context.Background()
	alice := Actor{Principal: admin.Principal, Name: "alice"}
	if _, err := s.CreateTenant(ctx, alice, TenantDoc{ID: "globex"}); err != nil {
		t.Fatal(err)
	}
	field := func(err error) string {
		var e *sluice.Error
		if errors.As(err, &e) {
			return e.Field
		}
		return ""
	}
	raw := "user=RAWKEY"
	if _, err := s.Block(ctx, alice, "globex", BlockRequest{Policy: "chat", Key: &raw, Seconds: 60}); field(err) != "key" {
		t.Errorf("a block of a raw listed key: %v, want a refusal naming key", err)
	}
	if _, err := s.Lift(ctx, alice, "globex", LiftRequest{Policy: "chat", Key: &raw}, nil); field(err) != "key" {
		t.Errorf("a lift of a raw listed key: %v, want a refusal naming key", err)
	}
	noErase := func(context.Context, string, string, []sluice.Check) (int, error) {
		t.Error("erase called")
		return 0, nil
	}
	if _, err := s.Erase(ctx, alice, "globex", EraseRequest{Key: &raw}, noErase); field(err) != "key" {
		t.Errorf("an erase of a raw listed key: %v, want a refusal naming key", err)
	}
	entries, _ := s.Audit(ctx, admin.Principal, "globex", 10)
	for _, e := range entries {
		if strings.Contains(string(e.Before)+string(e.After), "RAWKEY") {
			t.Errorf("the trail holds the raw key: %s %s %s", e.Action, e.Before, e.After)
		}
	}

	parts := map[string]string{"user": "RAWKEY"}
	b, err := s.Block(ctx, alice, "globex", BlockRequest{Policy: "chat", Parts: parts, Seconds: 60})
	if err != nil || b.Key != "user="+k.Value("globex", "user", "RAWKEY") {
		t.Fatalf("a block by parts: %+v, %v", b, err)
	}
	if l, err := s.Lift(ctx, alice, "globex", LiftRequest{Policy: "chat", Parts: parts}, nil); err != nil || !l.Block {
		t.Errorf("a lift by parts: %+v, %v; want the block lifted", l, err)
	}
	if _, err := s.Block(ctx, alice, "globex", BlockRequest{Policy: "chat", Parts: parts, Seconds: 60}); err != nil {
		t.Fatal(err)
	}
	if l, err := s.Lift(ctx, alice, "globex", LiftRequest{Policy: "chat", Key: &b.Key}, nil); err != nil || !l.Block {
		t.Errorf("a lift by the listed pseudonym: %+v, %v; want the block lifted", l, err)
	}
}

// TestErasePartial: an erase whose store fails part-way lifts the key's
// blocks first, answers the store's error, and records an entry marked
// partial with what it did; a retry finishes. Without pseudonyms the
// entry holds no trace of the key: no value, no hash of it.
func TestErasePartial(t *testing.T) {
	ctx := context.Background()
	s := newService(t, &memstore.Tenants{})
	alice := Actor{Principal: admin.Principal, Name: "alice"}
	if _, err := s.CreateTenant(ctx, alice, TenantDoc{ID: "globex"}); err != nil {
		t.Fatal(err)
	}
	parts := map[string]string{"user": "mallory@example.com"}
	if _, err := s.Block(ctx, alice, "globex", BlockRequest{Policy: "chat", Parts: parts, Seconds: 60}); err != nil {
		t.Fatal(err)
	}
	down := errors.New("store down")
	calls := 0
	failing := func(context.Context, string, string, []sluice.Check) (int, error) { calls++; return 0, down }
	if _, err := s.Erase(ctx, alice, "globex", EraseRequest{Parts: parts}, failing); !errors.Is(err, down) || calls == 0 {
		t.Fatalf("an erase on a failing store: %v after %d calls, want the store's error", err, calls)
	}
	if bs, _ := s.Blocks(ctx, admin.Principal, "globex"); len(bs) != 0 {
		t.Errorf("the key's block after a failed erase: %+v, want it lifted", bs)
	}
	last := func() sluice.AuditEntry {
		t.Helper()
		entries, err := s.Audit(ctx, admin.Principal, "globex", 1)
		if err != nil || len(entries) != 1 || entries[0].Action != "erase" {
			t.Fatalf("the trail's last entry: %+v, %v; want an erase", entries, err)
		}
		if a := string(entries[0].After); strings.Contains(a, "mallory") || strings.Contains(a, "sha256") || strings.Contains(a, `"keys"`) {
			t.Errorf("the erase entry holds a trace of the key: %s", a)
		}
		return entries[0]
	}
	if e := last(); string(e.After) != `{"partNames":["user"],"keyCount":1,"counters":0,"blocks":1,"partial":true,"failed":"counters"}` || e.Actor != "admin (alice)" {
		t.Errorf("the failed erase's entry: %s by %q", e.After, e.Actor)
	}
	ok := func(context.Context, string, string, []sluice.Check) (int, error) { return 2, nil }
	out, err := s.Erase(ctx, alice, "globex", EraseRequest{Parts: parts}, ok)
	if err != nil || out.Partial || out.Blocks != 0 || out.Counters == 0 {
		t.Fatalf("the retry: %+v, %v", out, err)
	}
	if e := last(); strings.Contains(string(e.After), "partial") {
		t.Errorf("the retry's entry: %s, want it whole", e.After)
	}
}
