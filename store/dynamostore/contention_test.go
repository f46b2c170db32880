package dynamostore

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// TestContentionAttemptCap: three nodes race on hot keys of each kind of
// decision through a proxy that drops items from failed conditions and
// injects a few faults. No decision (or batch of them) makes more than
// MaxAttempts (4) write requests counted against the cap: its first, and
// those after a fault; the writes lost to another node, and their retries
// (Stats.Contended), are not counted, and every write request is one of
// the two, as the proxy counts them. The nodes admit exactly the limit (a
// fault the proxy answers never lands), and the writes per decision are
// reported.
func TestContentionAttemptCap(t *testing.T) {
	first, px := proxied(t)
	px.DropConditionItems(true)
	px.SetFaultRate(0.02)
	nodes := []*Store{first}
	for range 2 {
		s, err := New(first.db, Options{Table: first.table})
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, s)
	}
	fw := sluice.Policy{Name: "fw", Algorithm: sluice.FixedWindow, Limit: 150, Window: time.Hour}
	sw := sluice.Policy{Name: "sw", Algorithm: sluice.SlidingWindow, Limit: 150, Window: time.Hour}
	tb := sluice.Policy{Name: "tb", Algorithm: sluice.TokenBucket, Limit: 150, Window: time.Hour}
	cases := map[string][]sluice.Op{
		"put":         {{Key: sluice.Key{Tenant: "acme", Policy: "fw", Value: "hot"}, Policy: &fw, Hits: 1}},
		"gcra":        {{Key: sluice.Key{Tenant: "acme", Policy: "tb", Value: "hot"}, Policy: &tb, Hits: 1}},
		"transaction": {{Key: sluice.Key{Tenant: "acme", Policy: "sw", Value: "hot"}, Policy: &sw, Hits: 1}, {Key: sluice.Key{Tenant: "acme", Policy: "fw", Value: "hot2"}, Policy: &fw, Hits: 1}},
	}
	for name, ops := range cases {
		t.Run(name, func(t *testing.T) {
			now := time.Now()
			var before, contendedBefore int64
			for _, s := range nodes {
				before += s.Stats().WriteAttempts
				contendedBefore += s.Stats().Contended
			}
			writes := px.Writes()
			var admitted, failed, decisions atomic.Int64
			var other atomic.Value
			var wg sync.WaitGroup
			for w := range 12 {
				s := nodes[w%len(nodes)]
				wg.Go(func() {
					dst := make([]sluice.Decision, len(ops))
					for {
						ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
						err := s.Apply(ctx, now, ops, dst)
						cancel()
						decisions.Add(1)
						switch {
						case sluice.KindOf(err) == sluice.KindUnavailable:
							failed.Add(1)
							continue
						case err != nil:
							other.Store(err)
							return
						case !allowedAll(dst):
							return
						}
						admitted.Add(1)
					}
				})
			}
			wg.Wait()
			if err, _ := other.Load().(error); err != nil {
				t.Fatal(err)
			}
			var attempts, contended, most int64
			for _, s := range nodes {
				st := s.Stats()
				attempts += st.WriteAttempts
				contended += st.Contended
				most = max(most, st.MostAttempts)
			}
			attempts -= before
			contended -= contendedBefore
			if got := px.Writes() - writes; got != attempts {
				t.Fatalf("the proxy saw %d writes, the stores counted %d attempts", got, attempts)
			}
			if most > 4 {
				t.Fatalf("a decision made %d write attempts", most)
			}
			if admitted.Load() != 150 {
				t.Fatalf("admitted %d, want exactly 150", admitted.Load())
			}
			t.Logf("%d decisions (%d admitted, %d failed unavailable), %d write requests (%d after a loss to another node): %.2f per decision, %.2f per admitted; at most %d counted against the cap in one",
				decisions.Load(), admitted.Load(), failed.Load(), attempts, contended, float64(attempts)/float64(decisions.Load()), float64(attempts)/float64(admitted.Load()), most)
		})
	}
}

func allowedAll(ds []sluice.Decision) bool {
	for _, d := range ds {
		if !d.Allowed {
			return false
		}
	}
	return true
}
