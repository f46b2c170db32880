package engine

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memstore"
)

// benchPolicies are policies no benchmark reaches, one per algorithm.
func benchPolicies() []sluice.Policy {
	var ps []sluice.Policy
	for _, alg := range sluice.Algorithms {
		p := sluice.Policy{Name: "p", Algorithm: alg, Limit: 1_000_000_000, Window: time.Second}
		switch alg {
		case sluice.SlidingLog:
			p.Limit = sluice.MaxLogLimit
			p.Window = time.Millisecond // entries leave as fast as they come
		case sluice.Concurrency:
			p.Limit, p.LeaseTTL = sluice.MaxLogLimit, time.Millisecond
		}
		ps = append(ps, p)
	}
	return ps
}

// BenchmarkAllow is one allowed decision on a key already held, through the
// engine: validation, the clock, key scoping and the memory store.
func BenchmarkAllow(b *testing.B) {
	s := memstore.New(memstore.Options{})
	defer s.Close()
	e := New(s, Options{})
	ctx := context.Background()
	for _, p := range benchPolicies() {
		b.Run(p.Algorithm.String(), func(b *testing.B) {
			if _, err := e.Allow(ctx, "acme", &p, "user-1", 1); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := e.Allow(ctx, "acme", &p, "user-1", 1); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkPrepared is BenchmarkAllow through a prepared limiter: the
// policy validated and its keys' scope hashed once, not per decision.
func BenchmarkPrepared(b *testing.B) {
	s := memstore.New(memstore.Options{})
	defer s.Close()
	e := New(s, Options{})
	ctx := context.Background()
	for _, p := range benchPolicies() {
		b.Run(p.Algorithm.String(), func(b *testing.B) {
			l, err := e.Prepare("acme", p)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := l.Allow(ctx, "user-1", 1); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := l.Allow(ctx, "user-1", 1); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkClock is one read of the engine's wall clock, and of time.Now
// for scale.
func BenchmarkClock(b *testing.B) {
	c := newWallClock()
	var sum int64
	b.Run("engine", func(b *testing.B) {
		for b.Loop() {
			sum += c.unixNano()
		}
	})
	b.Run("time.Now", func(b *testing.B) {
		for b.Loop() {
			sum += time.Now().UnixNano()
		}
	})
	_ = sum
}

// BenchmarkCheck is a request against four policies at once, the shape of
// the WebSocket gateway's admission (tenant and session, per minute and
// concurrent).
func BenchmarkCheck(b *testing.B) {
	s := memstore.New(memstore.Options{})
	defer s.Close()
	e := New(s, Options{})
	ctx := context.Background()
	req := sluice.Request{Tenant: "acme", Hits: 1}
	for i, alg := range []sluice.Algorithm{sluice.FixedWindow, sluice.SlidingWindow, sluice.TokenBucket, sluice.Quota} {
		req.Checks = append(req.Checks, sluice.Check{
			Policy: sluice.Policy{Name: fmt.Sprint("p", i), Algorithm: alg, Limit: 1_000_000_000, Window: time.Hour},
			Key:    "session-1",
		})
	}
	b.ReportAllocs()
	for b.Loop() {
		if res, err := e.Check(ctx, req); err != nil || !res.Allowed {
			b.Fatal(res, err)
		}
	}
}
