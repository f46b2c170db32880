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
	benchApply(b, func(s *Store, p *sluice.Policy) func(ctx context.Context, now int64, value string, hits int64) (sluice.Decision, error) {
		return func(ctx context.Context, now int64, value string, hits int64) (sluice.Decision, error) {
			op := sluice.Op{Key: sluice.Key{Tenant: "acme", Algorithm: p.Algorithm, Policy: p.Name, Value: value}, Policy: p, Hits: hits}
			return s.ApplyOne(ctx, time.Unix(0, now), op)
		}
	})
}

// BenchmarkScope is BenchmarkApplyOne through a Scope: the key's value
// hashed and compared, its scope's part computed once.
func BenchmarkScope(b *testing.B) {
	benchApply(b, func(s *Store, p *sluice.Policy) func(ctx context.Context, now int64, value string, hits int64) (sluice.Decision, error) {
		return s.Scope("acme", sluice.SpacePolicy, p)
	})
}

// benchApply runs the decisions of the function newApply returns, over
// each count of benchKeys held keys, visited in a random order.
func benchApply(b *testing.B, newApply func(*Store, *sluice.Policy) func(ctx context.Context, now int64, value string, hits int64) (sluice.Decision, error)) {
	for _, n := range benchKeys {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			s := New(Options{})
			defer s.Close()
			p := sluice.Policy{Name: "p", Algorithm: sluice.TokenBucket, Limit: 1_000_000_000, Window: time.Second}
			apply := newApply(s, &p)
			keys := make([]string, n)
			for i := range keys {
				keys[i] = fmt.Sprint("user-", i)
			}
			ctx := context.Background()
			now := time.Now().UnixNano()
			for _, k := range keys {
				apply(ctx, now, k, 1)
			}
			order := visitOrder(n)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if d, err := apply(ctx, now, keys[order[i%n]], 1); err != nil || !d.Allowed {
					b.Fatal(d, err)
				}
			}
		})
	}
}

// visitOrder is a random order of n keys, not the order they were created
// in, which memory follows: real traffic does not.
func visitOrder(n int) []int { return rand.New(rand.NewPCG(1, 2)).Perm(n) }

// benchKeys: one hot key, and more keys than the processor's caches hold.
var benchKeys = []int{1, 100_000}
