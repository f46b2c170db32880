package dynamostore

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// TestBatchesBounded: 600 decisions at once on one key of one node, on a
// table 20ms away, are decided in batches of at most 256 (so in at least
// three), exactly (500 admitted of a limit of 500), in a handful of
// writes; and once they are done the node keeps nothing of the key at
// work (only its remembered state).
func TestBatchesBounded(t *testing.T) {
	s, px := proxied(t)
	px.SetLatency(20 * time.Millisecond)
	p := sluice.Policy{Name: "fw", Algorithm: sluice.FixedWindow, Limit: 500, Window: 24 * time.Hour}
	ops := []sluice.Op{{Key: sluice.Key{Tenant: "acme", Policy: "fw", Value: "k"}, Policy: &p, Hits: 1}}
	now := time.Now()
	before, writes := s.Stats(), px.Writes()
	var admitted atomic.Int64
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range 600 {
		wg.Go(func() {
			<-start
			dst := make([]sluice.Decision, 1)
			ctx, cancel := context.WithTimeout(context.Background(), patience)
			defer cancel()
			if err := s.Apply(ctx, now, ops, dst); err != nil {
				t.Error(err)
				return
			}
			if dst[0].Allowed {
				admitted.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	st := s.Stats()
	batches, batched := st.Batches-before.Batches, st.Batched-before.Batched
	t.Logf("600 decisions: %d admitted, %d answered from remembered state, %d in %d batches (%d combined), %d writes",
		admitted.Load(), st.LocalDenials-before.LocalDenials, batched, batches, st.Combined-before.Combined, px.Writes()-writes)
	if admitted.Load() != 500 {
		t.Fatalf("admitted %d at a limit of 500", admitted.Load())
	}
	if batched > 0 && batches < (batched+maxBatch-1)/maxBatch {
		t.Fatalf("%d decisions in %d batches: some batch held more than %d", batched, batches, maxBatch)
	}
	if batches < 3 {
		t.Fatalf("600 decisions in %d batches: some batch held more than %d", batches, maxBatch)
	}
	if n := px.Writes() - writes; n > 10 {
		t.Fatalf("%d writes for 600 decisions on one key of one node", n)
	}
	waitIdle(t, s)
}

// waitIdle waits until s has no key at work: a batch's goroutine gives
// its key back just after its decisions have their answers.
func waitIdle(t testing.TB, s *Store) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for s.keys.size() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d keys still at work after %v", s.keys.size(), patience)
		}
		time.Sleep(time.Millisecond) // the poll's period, not a handshake
	}
}
