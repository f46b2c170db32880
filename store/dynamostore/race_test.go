package dynamostore

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/storetest"
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
// on one counter land each burn once (storetest.BurnRace), for a fixed
// window, a leased one (a burn takes no batch) and a calendar month.
func TestTwoStoresOneTableBurn(t *testing.T) {
	a := newStore(t)
	b, err := New(a.db, Options{Table: a.table})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []sluice.Policy{
		{Name: "fixed", Algorithm: sluice.FixedWindow, Limit: 100, Window: time.Hour},
		{Name: "leased", Algorithm: sluice.FixedWindow, Limit: 100, Window: time.Hour, Leased: true},
		{Name: "month", Algorithm: sluice.Quota, Limit: 100, Calendar: sluice.Month},
	} {
		k := sluice.Key{Tenant: "acme", Algorithm: p.Algorithm, Policy: p.Name, Value: "k"}
		storetest.BurnRace(t, []sluice.Store{a, b}, &p, k, 16, 20)
	}
}
