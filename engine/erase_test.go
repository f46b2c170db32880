package engine

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memstore"
)

// noEraser is a store that erases nothing.
type noEraser struct{ sluice.Store }

// TestErase: an erase deletes a key's counter and its penalty box, so
// that the key is neither boxed nor spent; a store that cannot erase is an
// internal error, never a silent success.
func TestErase(t *testing.T) {
	s := memstore.New(memstore.Options{})
	t.Cleanup(func() { s.Close() })
	c := &clock{t: time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)}
	e := New(s, Options{Now: c.now})
	ctx := context.Background()
	p := sluice.Policy{Name: "login", Algorithm: sluice.FixedWindow, Limit: 2, Window: time.Minute,
		Penalty: sluice.Penalty{After: 1, Base: time.Minute, Max: time.Hour}}
	check := sluice.Check{Policy: p, Key: "mallory"}
	for range 3 {
		e.Check(ctx, sluice.Request{Tenant: "a", Hits: 1, Checks: []sluice.Check{check}})
	}
	n, err := e.Erase(ctx, "a", "mallory", []sluice.Check{check})
	if err != nil || n != 2 {
		t.Fatalf("Erase = %d, %v; want the counter and the box", n, err)
	}
	counter, box, err := e.State(ctx, "a", check)
	if err != nil || counter.Remaining != 2 || !box.Allowed || box.RetryAfter > 0 {
		t.Errorf("after the erase: %+v, box %+v, %v; want a full window and no box", counter, box, err)
	}
	if _, err := New(noEraser{s}, Options{}).Erase(ctx, "a", "mallory", nil); sluice.KindOf(err) != sluice.KindInternal {
		t.Errorf("a store that cannot erase: %v, want an internal error", err)
	}
}
