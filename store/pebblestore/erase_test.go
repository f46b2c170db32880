package pebblestore

import (
	"context"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sluicehq/sluice"
)

// TestEraseKeyOnDisk: a key's counters written before a restart, which
// the memory tables have not loaded since, are erased from the disk too,
// known or not (an inline policy's).
func TestEraseKeyOnDisk(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	p := sluice.Policy{Name: "api", Algorithm: sluice.SlidingWindow, Limit: 5, Window: time.Hour}
	keys := []sluice.Key{
		{Tenant: "acme", Epoch: 7, Space: sluice.SpacePolicy, Algorithm: p.Algorithm, Policy: "api", Value: "alice"},
		{Tenant: "acme", Space: sluice.SpaceInline, Algorithm: p.Algorithm, Policy: "mine", Value: "alice"},
		{Tenant: "acme", Space: sluice.SpacePolicy, Algorithm: p.Algorithm, Policy: "api", Value: "bob"},
		{Tenant: "acme", Space: sluice.SpaceInternal, Algorithm: p.Algorithm, Policy: "gw", Value: "alice"},
	}
	s := open(t, dir)
	for _, k := range keys {
		dst := make([]sluice.Decision, 1)
		if err := s.Apply(context.Background(), now, []sluice.Op{{Key: k, Policy: &p, Hits: 2}}, dst); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	s = open(t, dir)
	n, err := s.EraseKey(context.Background(), "acme", "alice", nil)
	if err != nil || n != 2 {
		t.Fatalf("EraseKey = %d, %v; want the 2 counters of alice outside Sluice's own space", n, err)
	}
	s.Close()
	db, err := pebble.Open(dir, &pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	want := map[string]bool{string(counterKey(&keys[2])): true, string(counterKey(&keys[3])): true}
	iter, _ := db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixCounter}, UpperBound: []byte{prefixCounter + 1}})
	defer iter.Close()
	for iter.First(); iter.Valid(); iter.Next() {
		if !want[string(iter.Key())] {
			t.Errorf("counter %q left on disk", iter.Key())
		}
		delete(want, string(iter.Key()))
	}
	if len(want) > 0 {
		t.Errorf("counters of other keys erased: %v", want)
	}
}
