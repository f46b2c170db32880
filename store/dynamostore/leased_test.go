package dynamostore

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// TestLeasedMode: three nodes admit from leased batches of a fixed window:
// never more than the limit in a window, far fewer writes than decisions,
// and the unused batches are the only shortfall.
func TestLeasedMode(t *testing.T) {
	first := newStore(t)
	nodes := []*Store{first}
	for range 2 {
		s, err := New(first.db, Options{Table: first.table})
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, s)
	}
	p := sluice.Policy{Name: "leased", Algorithm: sluice.FixedWindow, Limit: 5000, Window: time.Minute, Leased: true}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	k := sluice.Key{Tenant: "acme", Policy: p.Name, Value: "k"}
	start := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	dst := make([]sluice.Decision, 1)
	admitted := 0
	// 1,000 decisions a second, spread over the nodes, for 8 seconds: more
	// than the window's 5,000.
	for i := range 8000 {
		now := start.Add(time.Duration(i) * time.Millisecond)
		if err := nodes[i%3].Apply(context.Background(), now, []sluice.Op{{Key: k, Policy: &p, Hits: 1}}, dst); err != nil {
			t.Fatal(err)
		}
		if dst[0].Allowed {
			admitted++
		}
	}
	var writes, local int64
	for _, s := range nodes {
		st := s.Stats()
		writes += st.Writes + st.Transactions
		local += st.LeasedLocal
	}
	if admitted > 5000 {
		t.Fatalf("admitted %d in one window of 5000", admitted)
	}
	if admitted < 5000-3*int(p.Limit/MaxLeaseShare) {
		t.Fatalf("admitted %d: more lost than the nodes' unused batches", admitted)
	}
	if writes*20 > int64(admitted) {
		t.Fatalf("%d writes for %d admitted decisions: not 20x fewer", writes, admitted)
	}
	t.Logf("admitted %d of 8000 at a limit of 5000 with %d writes (%d decisions served locally)", admitted, writes, local)
}

func TestLeasedOnlyForWindows(t *testing.T) {
	p := sluice.Policy{Name: "x", Algorithm: sluice.TokenBucket, Limit: 5, Window: time.Second, Leased: true}
	if sluice.FieldOf(p.Validate()) != "leased" {
		t.Fatalf("%v", p.Validate())
	}
}
