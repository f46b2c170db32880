package fairshare_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/fairshare"
	"github.com/sluicehq/sluice/store/memstore"
)

// slowLedger delays a ledger's calls: before the write lands, and after it
// landed before its answer comes back, as a loaded store does.
type slowLedger struct {
	fairshare.Ledger
	mu   sync.Mutex
	rnd  *rand.Rand
	most time.Duration // the longest delay
}

func (l *slowLedger) delay(ctx context.Context) error {
	l.mu.Lock()
	d := time.Duration(l.rnd.Int64N(int64(l.most)))
	l.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *slowLedger) Publish(ctx context.Context, now time.Time, d fairshare.Demand) (fairshare.Demand, int, error) {
	if err := l.delay(ctx); err != nil {
		return fairshare.Demand{}, 0, err
	}
	sum, n, err := l.Ledger.Publish(ctx, now, d)
	if err == nil {
		err = l.delay(ctx)
	}
	return sum, n, err
}

func (l *slowLedger) Claim(ctx context.Context, now time.Time, units int64) (bool, int64, error) {
	if err := l.delay(ctx); err != nil {
		return false, 0, err
	}
	ok, free, err := l.Ledger.Claim(ctx, now, units)
	if err == nil {
		err = l.delay(ctx)
	}
	return ok, free, err
}

// Three nodes whose ledger answers late (up to 600 ms before a write
// lands and as long again before its answer comes back, past the call's
// deadline at times), whose customers come and go, never release more
// than the rate in a second by grant time.
func TestClusterSlowLedgerNeverOver(t *testing.T) {
	for seed := range uint64(8) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { slowLedgerRun(t, seed) })
	}
}

func slowLedgerRun(t *testing.T, seed uint64) {
	synctest.Test(t, func(t *testing.T) {
		rnd := rand.New(rand.NewPCG(seed, 1))
		// Rate 150, as cmd/sluice's TestUpstreamAcrossNodes.
		cfg := fairshare.Config{Rate: 150, Window: time.Second, Burst: 10}
		st := memstore.New(memstore.Options{})
		defer st.Close()
		eng := engine.New(st, engine.Options{})
		var (
			mu    sync.Mutex
			sent  []time.Time
			nodes []*fairshare.Upstream
		)
		for i := range 3 {
			l, err := fairshare.NewLimiterLedger(eng, "partner", cfg, sluice.NamedLease|uint64(i+1), fairshare.DefaultTTL(cfg.Window))
			if err != nil {
				t.Fatal(err)
			}
			sl := &slowLedger{Ledger: l, rnd: rand.New(rand.NewPCG(seed, uint64(i+2))), most: time.Duration(1+rnd.IntN(600)) * time.Millisecond}
			u, err := fairshare.NewUpstream(cfg, fairshare.Options{Ledger: sl})
			if err != nil {
				t.Fatal(err)
			}
			nodes = append(nodes, u)
		}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		// Each node's heavy customers come and go.
		for i, u := range nodes {
			for k := range 4 {
				on, off := time.Duration(500+rnd.IntN(5000))*time.Millisecond, time.Duration(rnd.IntN(4000))*time.Millisecond
				conc := 1 + rnd.IntN(30)
				name := fairshare.Customer(fmt.Sprintf("n%dc%d", i, k))
				for range conc {
					wg.Go(func() {
						for ctx.Err() == nil {
							phase := time.Now().UnixNano() % int64(on+off)
							if phase >= int64(on) {
								select {
								case <-time.After(time.Duration(int64(on+off) - phase)):
								case <-ctx.Done():
									return
								}
								continue
							}
							g, err := u.AcquireGrant(ctx, name, string(name), 1, 1, 0)
							if err == nil {
								mu.Lock()
								sent = append(sent, g.At)
								mu.Unlock()
							}
						}
					})
				}
			}
		}
		time.Sleep(60 * time.Second)
		cancel()
		wg.Wait()
		for _, u := range nodes {
			u.Close()
		}
		if len(sent) < 1500 {
			t.Errorf("seed %d: %d granted in a minute: the nodes hardly shared the upstream", seed, len(sent))
		}
		if most := maxInWindow(sent, time.Second); most > 150 {
			t.Errorf("seed %d: %d of %d granted in one second, more than the rate of 150", seed, most, len(sent))
		}
	})
}

// A grant's time is what the client and the other nodes see of when it
// went: its wall clock. The Upstream stamps and paces by that reading
// alone, with no monotonic reading beside it that could say otherwise
// (time.Now reads the two one after the other, and a thread preempted
// between them gets a wall reading that much earlier).
func TestUpstreamGrantsOnTheWallClock(t *testing.T) {
	u, err := fairshare.NewUpstream(fairshare.Config{Rate: 100, Burst: 10}, fairshare.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	for range 5 { // within the burst: granted at once
		g, err := u.AcquireGrant(context.Background(), "c", "", 1, 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		if g.At != g.At.Round(0) {
			t.Fatalf("granted at %v: a monotonic reading beside the wall clock's, which the pacer may have gone by", g.At)
		}
	}
}

// A wall clock that steps back (an NTP step; or a reading taken before
// its thread was preempted) stands still for the Upstream until it has
// caught up: releases are never stamped before those already made, which
// the pacer has forgotten, so no window by grant time holds more than the
// rate.
func TestUpstreamClockSteppingBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var back atomic.Int64 // how far the clock is behind time.Now
		clock := func() time.Time { return time.Now().Add(-time.Duration(back.Load())) }
		u, err := fairshare.NewUpstream(fairshare.Config{Rate: 10, Burst: 10}, fairshare.Options{Now: clock})
		if err != nil {
			t.Fatal(err)
		}
		defer u.Close()
		var at []time.Time
		acquire := func(n int) {
			t.Helper()
			for range n {
				g, err := u.AcquireGrant(context.Background(), "c", "", 1, 1, 0)
				if err != nil {
					t.Fatal(err)
				}
				at = append(at, g.At)
			}
		}
		acquire(10) // the whole rate at 0
		time.Sleep(1200 * time.Millisecond)
		acquire(1) // at 1.2 s: the ten at 0 leave the pacer's window
		back.Store(int64(500 * time.Millisecond))
		acquire(9) // the clock reads 0.7 s: the ten at 0 are 0.7 s ago by it
		if most := maxInWindow(at, time.Second); most > 10 {
			t.Errorf("%d granted in one second by grant time, more than the rate of 10: %v", most, at)
		}
		for i := 1; i < len(at); i++ {
			if at[i].Before(at[i-1]) {
				t.Fatalf("grant %d at %v, before grant %d at %v", i, at[i], i-1, at[i-1])
			}
		}
	})
}

// wallLedger grants every claim, and records how far ahead of its wall
// clock each claim said it was made.
type wallLedger struct {
	wall   func() time.Time
	mu     sync.Mutex
	claims int
	ahead  []time.Duration
}

func (l *wallLedger) TTL() time.Duration { return fairshare.DefaultTTL(time.Second) }

func (l *wallLedger) Publish(ctx context.Context, now time.Time, d fairshare.Demand) (fairshare.Demand, int, error) {
	return d, 1, nil
}

func (l *wallLedger) Claim(ctx context.Context, now time.Time, units int64) (bool, int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.claims++
	if d := now.Sub(l.wall()); d > 0 {
		l.ahead = append(l.ahead, d)
	}
	return true, 0, nil
}

func (l *wallLedger) Leave(ctx context.Context, now time.Time) error { return nil }

// While an Upstream's clock stands still after the wall clock stepped
// back, its claims are reckoned by the wall clock, as the table reckons
// their leases: a node that stopped by its clock, ahead, would release
// past the lapse of its claim that other nodes see.
func TestUpstreamClaimsByTheWallClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var back atomic.Int64
		clock := func() time.Time { return time.Now().Add(-time.Duration(back.Load())) }
		l := &wallLedger{wall: clock}
		u, err := fairshare.NewUpstream(fairshare.Config{Rate: 10, Burst: 10}, fairshare.Options{Now: clock, Ledger: l})
		if err != nil {
			t.Fatal(err)
		}
		defer u.Close()
		time.Sleep(2500 * time.Millisecond)
		back.Store(int64(2 * time.Second)) // the clock stands still for 1.5 s
		l.mu.Lock()
		before := l.claims
		l.mu.Unlock()
		time.Sleep(3 * time.Second)
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.claims-before < 2 {
			t.Fatalf("%d claims in the 3 s after the step, want one a second", l.claims-before)
		}
		if len(l.ahead) > 0 {
			t.Errorf("claims made ahead of the wall clock by %v", l.ahead)
		}
	})
}
