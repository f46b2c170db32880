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
	benchDecide(b, func(e *Engine, p sluice.Policy) (decide func() (sluice.Decision, error)) {
		return func() (sluice.Decision, error) { return e.Allow(context.Background(), "acme", &p, "user-1", 1) }
	})
}

// BenchmarkPrepared is BenchmarkAllow through a prepared limiter: the
// policy validated and its keys' scope hashed once, not per decision.
func BenchmarkPrepared(b *testing.B) {
	benchDecide(b, func(e *Engine, p sluice.Policy) (decide func() (sluice.Decision, error)) {
		l, err := e.Prepare("acme", p)
		if err != nil {
			b.Fatal(err)
		}
		return func() (sluice.Decision, error) { return l.Allow(context.Background(), "user-1", 1) }
	})
}

// benchDecide runs, for each of benchPolicies, the decisions that newDecide
// makes on an engine over the memory store.
func benchDecide(b *testing.B, newDecide func(*Engine, sluice.Policy) func() (sluice.Decision, error)) {
	s := memstore.New(memstore.Options{})
	defer s.Close()
	e := New(s, Options{})
	for _, p := range benchPolicies() {
		b.Run(p.Algorithm.String(), func(b *testing.B) {
			decide := newDecide(e, p)
			if _, err := decide(); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := decide(); err != nil {
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
