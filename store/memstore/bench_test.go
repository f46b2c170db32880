package memstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// BenchmarkApplyOne is one allowed token-bucket decision on a key already
// held, at the store, without the engine's validation and clock.
func BenchmarkApplyOne(b *testing.B) {
	for _, n := range []int{1, 100_000} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			s := New(Options{})
			defer s.Close()
			p := sluice.Policy{Name: "p", Algorithm: sluice.TokenBucket, Limit: 1_000_000_000, Window: time.Second}
			ops := make([]sluice.Op, n)
			for i := range ops {
				ops[i] = sluice.Op{Key: sluice.Key{Tenant: "acme", Policy: "p", Value: fmt.Sprint("user-", i)}, Policy: &p, Hits: 1}
			}
			ctx := context.Background()
			now := time.Now()
			for _, op := range ops {
				s.ApplyOne(ctx, now, op)
			}
			// Visit keys in a random order, not the order they were
			// created in, which memory follows: real traffic does not.
			order := rand.New(rand.NewPCG(1, 2)).Perm(n)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if d, err := s.ApplyOne(ctx, now, ops[order[i%n]]); err != nil || !d.Allowed {
					b.Fatal(d, err)
				}
			}
		})
	}
}
