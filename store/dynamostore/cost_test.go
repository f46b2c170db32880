package dynamostore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/storetest"
)

// BenchmarkCost measures what an allowed single-policy decision costs in
// DynamoDB requests ("rt/op": round trips) and write units ("wu/op"), for
// every algorithm, with one node, and with three nodes taking turns on one
// key (each node's memory of the key is then always stale). Run it with a
// fixed count, e.g. -benchtime 300x; see docs/benchmarks.md.
func BenchmarkCost(b *testing.B) {
	for _, p := range storetest.Policies(1_000_000_000) {
		if p.Algorithm == sluice.SlidingLog || p.Algorithm == sluice.Concurrency {
			p.Limit = sluice.MaxLogLimit
			p.Window, p.LeaseTTL = time.Second, time.Second
			if p.Algorithm == sluice.Concurrency {
				p.Window = 0
			}
		}
		for _, n := range []int{1, 3} {
			b.Run(fmt.Sprintf("%s/nodes=%d", p.Name, n), func(b *testing.B) {
				first := newStore(b)
				nodes := []*Store{first}
				for range n - 1 {
					s, err := New(first.db, Options{Table: first.table})
					if err != nil {
						b.Fatal(err)
					}
					nodes = append(nodes, s)
				}
				k := sluice.Key{Tenant: "acme", Policy: p.Name, Value: "k"}
				dst := make([]sluice.Decision, 1)
				start := time.Now()
				var before []StatsSnapshot
				for _, s := range nodes {
					before = append(before, s.Stats())
				}
				b.ResetTimer()
				for i := 0; b.Loop(); i++ {
					// Time moves a millisecond a decision, so that short
					// windows and leases turn over as in use.
					now := start.Add(time.Duration(i) * time.Millisecond)
					if err := nodes[i%n].Apply(context.Background(), now, []sluice.Op{{Key: k, Policy: &p, Hits: 1}}, dst); err != nil {
						b.Fatal(err)
					}
					if !dst[0].Allowed {
						b.Fatalf("decision %d denied", i)
					}
				}
				var rt, wu int64
				for j, s := range nodes {
					st := s.Stats()
					rt += st.Reads + st.Writes + st.Transactions - before[j].Reads - before[j].Writes - before[j].Transactions
					wu += st.WriteUnits - before[j].WriteUnits
				}
				b.ReportMetric(float64(rt)/float64(b.N), "rt/op")
				b.ReportMetric(float64(wu)/float64(b.N), "wu/op")
			})
		}
	}
}

// BenchmarkCostMultiPolicy measures a request on two policies at once (a
// fixed window and a sliding window on two keys), decided all-or-nothing by
// one TransactWriteItems.
func BenchmarkCostMultiPolicy(b *testing.B) {
	s := newStore(b)
	ps := []sluice.Policy{
		{Name: "minute", Algorithm: sluice.FixedWindow, Limit: 1_000_000_000, Window: time.Minute},
		{Name: "hour", Algorithm: sluice.SlidingWindow, Limit: 1_000_000_000, Window: time.Hour},
	}
	ops := []sluice.Op{
		{Key: sluice.Key{Tenant: "acme", Policy: "minute", Value: "u"}, Policy: &ps[0], Hits: 1},
		{Key: sluice.Key{Tenant: "acme", Policy: "hour", Value: "u"}, Policy: &ps[1], Hits: 1},
	}
	dst := make([]sluice.Decision, 2)
	before := s.Stats()
	now := time.Now()
	for b.Loop() {
		if err := s.Apply(context.Background(), now, ops, dst); err != nil || !dst[0].Allowed {
			b.Fatal(dst, err)
		}
	}
	st := s.Stats()
	rt := st.Reads + st.Writes + st.Transactions - before.Reads - before.Writes - before.Transactions
	b.ReportMetric(float64(rt)/float64(b.N), "rt/op")
	b.ReportMetric(float64(st.WriteUnits-before.WriteUnits)/float64(b.N), "wu/op")
}
