package dynamostore

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// TestTwoStoresOneTable: two stores (two nodes) on one table, racing, admit
// exactly the limit: the conditions, not the turns, keep them exact. A
// decision out of attempts (Options.MaxAttempts) fails unavailable, having
// admitted nothing, and is asked again.
func TestTwoStoresOneTable(t *testing.T) {
	a := newStore(t)
	b, err := New(a.db, Options{Table: a.table})
	if err != nil {
		t.Fatal(err)
	}
	for _, alg := range sluice.Algorithms {
		p := sluice.Policy{Name: alg.String(), Algorithm: alg, Limit: 200, Window: time.Hour, LeaseTTL: time.Hour}
		if alg == sluice.Concurrency {
			p.Window = 0
		}
		k := sluice.Key{Tenant: "acme", Policy: p.Name, Value: "k"}
		now := time.Now()
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for w := range 16 {
			s := a
			if w%2 == 1 {
				s = b
			}
			wg.Go(func() {
				dst := make([]sluice.Decision, 1)
				for n := 0; n < 30; n++ {
					err := s.Apply(context.Background(), now, []sluice.Op{{Key: k, Policy: &p, Hits: 1}}, dst)
					if sluice.KindOf(err) == sluice.KindUnavailable {
						// Out of attempts under contention (MaxAttempts):
						// nothing was admitted; ask again.
						n--
						continue
					}
					if err != nil {
						t.Error(err)
						return
					}
					if dst[0].Allowed {
						admitted.Add(1)
					}
				}
			})
		}
		wg.Wait()
		if got := admitted.Load(); got != 200 {
			t.Errorf("%v: admitted %d of 480 at a limit of 200", alg, got)
		}
	}
}

// TestTwoStoresOneTableBurn: two nodes racing burn ops (sluice.Op.Burn)
// on one counter land each burn once: the counts the burns see are each
// count from 1 to the total exactly once, and exactly the limit of them
// are within it, for a fixed window, a leased one (a burn takes no
// batch) and a calendar month.
func TestTwoStoresOneTableBurn(t *testing.T) {
	a := newStore(t)
	b, err := New(a.db, Options{Table: a.table})
	if err != nil {
		t.Fatal(err)
	}
	const limit, workers, each = 100, 16, 20
	for _, p := range []sluice.Policy{
		{Name: "fixed", Algorithm: sluice.FixedWindow, Limit: limit, Window: time.Hour},
		{Name: "leased", Algorithm: sluice.FixedWindow, Limit: limit, Window: time.Hour, Leased: true},
		{Name: "month", Algorithm: sluice.Quota, Limit: limit, Calendar: sluice.Month},
	} {
		k := sluice.Key{Tenant: "acme", Algorithm: p.Algorithm, Policy: p.Name, Value: "k"}
		now := time.Now()
		var mu sync.Mutex
		seen := make([]int, workers*each+1)
		var wg sync.WaitGroup
		for w := range workers {
			s := a
			if w%2 == 1 {
				s = b
			}
			wg.Go(func() {
				dst := make([]sluice.Decision, 1)
				for n := 0; n < each; n++ {
					err := s.Apply(context.Background(), now, []sluice.Op{{Key: k, Policy: &p, Hits: 1, Burn: true}}, dst)
					if sluice.KindOf(err) == sluice.KindUnavailable {
						n-- // out of attempts: nothing written; ask again
						continue
					}
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					if c := limit - dst[0].Remaining; dst[0].Allowed && c >= 1 && c < int64(len(seen)) {
						seen[c]++
					} else {
						seen[0]++
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		for c := range seen {
			if want := min(c, 1); seen[c] != want {
				t.Fatalf("%s: count %d seen %d times, want %d", p.Name, c, seen[c], want)
			}
		}
		dst := make([]sluice.Decision, 1)
		if err := b.Apply(context.Background(), now, []sluice.Op{{Key: k, Policy: &p, Burn: true}}, dst); err != nil || dst[0].Remaining != limit-workers*each {
			t.Fatalf("%s: read %+v %v, want %d counted", p.Name, dst[0], err, workers*each)
		}
	}
}
