package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sethvargo/go-limiter"
	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/throttled/throttled/v2"
	throttledmem "github.com/throttled/throttled/v2/store/memstore"
	"golang.org/x/time/rate"
)

// Every limiter is set to a rate no benchmark can reach, so that every
// decision is an allowed decision on a key that is already held ("ready").
const hugeRate = 1_000_000_000

// decider is one limiter under test: allow reports whether a hit on key is
// admitted.
type decider interface {
	allow(key string) bool
	close()
}

// sluiceDecider decides through a limiter prepared once for its policy
// (engine.Prepared), the way an in-process user holds one per policy.
type sluiceDecider struct {
	l     *engine.Prepared
	store *memstore.Store
}

// sluicePolicy is a token bucket (GCRA) no benchmark can reach.
var sluicePolicy = sluice.Policy{Name: "api", Algorithm: sluice.TokenBucket, Limit: hugeRate, Window: time.Second}

func newSluice() decider {
	s := memstore.New(memstore.Options{})
	l, err := engine.New(s, engine.Options{}).Prepare("acme", sluicePolicy)
	if err != nil {
		panic(err)
	}
	return &sluiceDecider{l: l, store: s}
}

func (d *sluiceDecider) allow(key string) bool {
	dec, err := d.l.Allow(context.Background(), key, 1)
	return err == nil && dec.Allowed
}
func (d *sluiceDecider) close() { d.store.Close() }

// sluiceAllowDecider decides through engine.Engine.Allow, which validates
// the policy and scopes the key on every decision.
type sluiceAllowDecider struct {
	eng   *engine.Engine
	store *memstore.Store
	p     sluice.Policy
}

func newSluiceAllow() decider {
	s := memstore.New(memstore.Options{})
	return &sluiceAllowDecider{eng: engine.New(s, engine.Options{}), store: s, p: sluicePolicy}
}

func (d *sluiceAllowDecider) allow(key string) bool {
	dec, err := d.eng.Allow(context.Background(), "acme", &d.p, key, 1)
	return err == nil && dec.Allowed
}
func (d *sluiceAllowDecider) close() { d.store.Close() }

// xtimeDecider is how x/time/rate is used per key: a map of limiters behind
// a mutex.
type xtimeDecider struct {
	mu sync.Mutex
	m  map[string]*rate.Limiter
}

func newXTime() decider { return &xtimeDecider{m: map[string]*rate.Limiter{}} }

func (d *xtimeDecider) allow(key string) bool {
	d.mu.Lock()
	l, ok := d.m[key]
	if !ok {
		l = rate.NewLimiter(hugeRate, hugeRate)
		d.m[key] = l
	}
	d.mu.Unlock()
	return l.Allow()
}
func (d *xtimeDecider) close() {}

type goLimiterDecider struct{ s limiter.Store }

func newGoLimiter() decider {
	// go-limiter v0.7.1 refills only interval/tokens tokens per elapsed
	// interval (it multiplies ticks by that "fill rate"), so with a huge
	// rate per second it denies from the second second on. An hour-long
	// interval keeps every benchmark within the first interval, where it
	// admits as configured.
	s, err := memorystore.New(&memorystore.Config{Tokens: 1 << 62, Interval: time.Hour})
	if err != nil {
		panic(err)
	}
	return &goLimiterDecider{s: s}
}

func (d *goLimiterDecider) allow(key string) bool {
	_, _, _, ok, err := d.s.Take(context.Background(), key)
	return err == nil && ok
}
func (d *goLimiterDecider) close() { d.s.Close(context.Background()) }

type throttledDecider struct{ rl *throttled.GCRARateLimiterCtx }

func newThrottled() decider {
	// Bounded like Sluice's store (an LRU of 2^18 keys); unbounded would
	// grow without limit.
	st, err := throttledmem.NewCtx(1 << 18)
	if err != nil {
		panic(err)
	}
	rl, err := throttled.NewGCRARateLimiterCtx(st, throttled.RateQuota{MaxRate: throttled.PerSec(hugeRate), MaxBurst: hugeRate})
	if err != nil {
		panic(err)
	}
	// Under contention throttled's compare-and-swap loop gives up after 10
	// attempts by default and returns an error; let it retry as a user
	// serving production traffic would.
	rl.SetMaxCASAttemptsLimit(1000)
	return &throttledDecider{rl: rl}
}

func (d *throttledDecider) allow(key string) bool {
	limited, _, err := d.rl.RateLimitCtx(context.Background(), key, 1)
	return err == nil && !limited
}
func (d *throttledDecider) close() {}

var libs = []struct {
	name string
	new  func() decider
}{
	{"sluice", newSluice},
	{"sluice-allow", newSluiceAllow},
	{"xtime", newXTime},
	{"golimiter", newGoLimiter},
	{"throttled", newThrottled},
}

func keys(n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = fmt.Sprintf("user-%d", i)
	}
	return ks
}

// BenchmarkDecision is one allowed decision on a key already held, serial
// and parallel, over 1 key and over 100,000 keys, for every limiter. Read it
// with benchstat, columns by lib:
//
//	benchstat -col /lib bench.txt
func BenchmarkDecision(b *testing.B) {
	for _, n := range []int{1, 100_000} {
		ks := keys(n)
		// The benchmarks visit keys in a random order, not the order they
		// were created in, which memory follows: real traffic does not.
		order := rand.New(rand.NewPCG(1, 2)).Perm(n)
		for _, mode := range []string{"serial", "parallel"} {
			for _, lib := range libs {
				b.Run(fmt.Sprintf("mode=%s/keys=%d/lib=%s", mode, n, lib.name), func(b *testing.B) {
					d := lib.new()
					defer d.close()
					for _, k := range ks { // make every key ready
						if !d.allow(k) {
							b.Fatalf("%s denied %s", lib.name, k)
						}
					}
					b.ReportAllocs()
					b.ResetTimer()
					// Every decision should admit; a denial is counted
					// and reported, not fatal, so that one limiter's
					// surprise does not cost the whole side-by-side run.
					var denied atomic.Int64
					defer func() { b.ReportMetric(float64(denied.Load())/float64(b.N), "denied/op") }()
					if mode == "serial" {
						for i := 0; b.Loop(); i++ {
							if !d.allow(ks[order[i%n]]) {
								denied.Add(1)
							}
						}
						return
					}
					var worker atomic.Uint64
					b.RunParallel(func(pb *testing.PB) {
						// Each goroutine walks the order from its own
						// offset.
						i := int(worker.Add(1) * 7919)
						for pb.Next() {
							i++
							if !d.allow(ks[order[i%n]]) {
								denied.Add(1)
							}
						}
					})
				})
			}
		}
	}
}

// TestDecidersAdmit: every limiter under test admits a burst of requests on
// a few keys, as the benchmarks assume of their huge rate.
func TestDecidersAdmit(t *testing.T) {
	for _, lib := range libs {
		d := lib.new()
		for i := range 1000 {
			if !d.allow(fmt.Sprint("k", i%10)) {
				t.Errorf("%s denied at a huge rate", lib.name)
				break
			}
		}
		d.close()
	}
}
