package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// testEraseKey: a KeyEraser deletes every known counter and penalty box of
// a tenant's key, leases included, and nothing of another key or of
// another tenant's key of the same value.
func testEraseKey(t *testing.T, s sluice.Store) {
	er, ok := s.(sluice.KeyEraser)
	if !ok {
		t.Skip("the store erases no keys (a wrapper in a test)")
	}
	ps := Policies(3)
	boxOf := func(k sluice.Key) sluice.Key {
		c := sluice.Check{Policy: sluice.Policy{Name: k.Policy, Algorithm: k.Algorithm}, Key: k.Value}
		return c.BoxKey(k.Tenant)
	}
	var known []sluice.Key
	spend := func(tenant, value string) {
		for i := range ps {
			p := &ps[i]
			for _, k := range []sluice.Key{keyIn(sluice.SpacePolicy, p.Algorithm, tenant, p.Name, value), keyIn(sluice.SpaceInline, p.Algorithm, tenant, p.Name, value)} {
				if d := apply(t, s, t0, sluice.Op{Key: k, Policy: p, Hits: 3})[0]; !d.Allowed {
					t.Fatalf("%s %+v: spending the limit was denied: %+v", p.Name, k, d)
				}
				if tenant == "acme" && value == "alice" && k.Space == sluice.SpacePolicy {
					known = append(known, k)
				}
			}
			box := boxOf(keyIn(sluice.SpacePolicy, p.Algorithm, tenant, p.Name, value))
			apply(t, s, t0, sluice.Op{Key: box, Policy: p, Hits: 1})
			if tenant == "acme" && value == "alice" {
				known = append(known, box)
			}
		}
	}
	spend("acme", "alice")
	spend("acme", "bob")
	spend("globex", "alice")
	// A known policy's counter under an earlier algorithm: erased too.
	earlier := sluice.Policy{Name: ps[0].Name, Algorithm: sluice.SlidingWindow, Limit: 3, Window: time.Minute}
	earlierKey := keyIn(sluice.SpacePolicy, earlier.Algorithm, "acme", earlier.Name, "alice")
	apply(t, s, t0, sluice.Op{Key: earlierKey, Policy: &earlier, Hits: 3})
	n, err := er.EraseKey(context.Background(), "acme", "alice", known)
	if err != nil {
		t.Fatalf("EraseKey: %v", err)
	}
	if n < len(known) {
		t.Errorf("EraseKey deleted %d states, want at least the %d known", n, len(known))
	}
	now := t0.Add(1)
	if d := peek(t, s, now, earlierKey, &earlier); d.Remaining != earlier.Limit {
		t.Errorf("%+v, of a known policy under an earlier algorithm, after the erase: %d remaining, want a full %d", earlierKey, d.Remaining, earlier.Limit)
	}
	for i := range ps {
		p := &ps[i]
		for _, k := range known {
			if k.Policy != p.Name {
				continue
			}
			if d := peek(t, s, now, k, p); d.Remaining != p.Limit {
				t.Errorf("%s %+v after the erase: %d remaining, want a full %d", p.Name, k, d.Remaining, p.Limit)
			}
		}
		for _, k := range []sluice.Key{keyIn(sluice.SpacePolicy, p.Algorithm, "acme", p.Name, "bob"), keyIn(sluice.SpacePolicy, p.Algorithm, "globex", p.Name, "alice")} {
			if d := peek(t, s, now, k, p); d.Remaining != 0 {
				t.Errorf("%s %+v, not erased: %d remaining, want its 0", p.Name, k, d.Remaining)
			}
		}
	}
}
