package dynamostore_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/dynamostore"
	"github.com/sluicehq/sluice/store/dynamostore/dynamotest"
)

// world is a global table over three regions, each its own dynoxide,
// copied by a replicator, with one store (a node) per region.
type world struct {
	regions []string
	stores  []*dynamostore.Store
	repl    *dynamotest.Replicator
}

func newWorld(t *testing.T, lag time.Duration) *world {
	t.Helper()
	w, _ := newProxiedWorld(t, lag)
	return w
}

// newProxiedWorld is newWorld, the first region's store reaching its
// table through a fault proxy (the replicator goes round it).
func newProxiedWorld(t *testing.T, lag time.Duration) (*world, *dynamotest.FaultProxy) {
	t.Helper()
	return newRebalancedWorld(t, lag, 200*time.Millisecond)
}

// newRebalancedWorld is newProxiedWorld with the stores' Rebalance period.
func newRebalancedWorld(t *testing.T, lag, rebalance time.Duration) (*world, *dynamotest.FaultProxy) {
	t.Helper()
	w := &world{regions: []string{"us", "eu", "ap"}}
	table := dynamotest.TableName(t)
	var apis []dynamotest.ReplicaAPI
	var px *dynamotest.FaultProxy
	for i, r := range w.regions {
		srv := dynamotest.StartOwn(t)
		db := dynamotest.NewClient(srv.Endpoint)
		if err := dynamostore.CreateTable(dynamotest.Context(t), db, table); err != nil {
			t.Fatal(err)
		}
		apis = append(apis, db)
		if i == 0 {
			px = dynamotest.NewFaultProxy(t, srv.Endpoint)
			db = dynamotest.NewClient(px.Endpoint)
		}
		s, err := dynamostore.New(db, dynamostore.Options{Table: table, Region: r, Regions: w.regions, Rebalance: rebalance})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		w.stores = append(w.stores, s)
	}
	w.repl = dynamotest.NewReplicator(table, apis, lag, 20*time.Millisecond)
	t.Cleanup(func() {
		if err := w.repl.Close(); err != nil {
			t.Error(err)
		}
	})
	return w, px
}

// load asks, in each region, for its rate of hits a second on one key of
// p for d, and returns the hits each region admitted in each of p's
// windows, by the window's start.
//
// The rates are the demand the allotments follow, so they must not hang
// on how fast the machine is: a region's node decides on a key one
// decision at a time, and a race build on a busy machine takes tens of
// milliseconds for some, so a region asks at most maxCalls decisions a
// second, of several hits each when its rate is higher. On such a machine
// a decision may also fail (a read of the allotments must end within half
// a Rebalance): a failed decision is counted as admitting nothing, and the
// region goes on; a region of which more than a quarter fail fails the
// test.
func (w *world) load(t *testing.T, p *sluice.Policy, rates []int, d time.Duration) []map[int64]int64 {
	t.Helper()
	admitted, _ := w.loadUntil(t, p, rates, d, nil)
	return admitted
}

// loadUntil is load, ended early, once a window is over, if until holds
// for the hits each region admitted in it: the readiness signal of a
// change whose pace is the machine's (the allotments following the
// demand, which waits on reads, writes and replication), so that the
// test's bound is checked on the window where the change shows rather
// than on a window a fixed time after the start. It returns the start of
// that window, or 0 if until never held within d.
func (w *world) loadUntil(t *testing.T, p *sluice.Policy, rates []int, d time.Duration, until func(admitted []int64) bool) ([]map[int64]int64, int64) {
	t.Helper()
	admitted := make([]map[int64]int64, len(rates))
	for i := range admitted {
		admitted[i] = map[int64]int64{}
	}
	var mu sync.Mutex
	ctx, stop := context.WithTimeout(context.Background(), d)
	defer stop()
	var ready int64
	var monitor sync.WaitGroup
	if until != nil {
		monitor.Go(func() {
			win := int64(p.Window)
			for {
				// A window is looked at once it is over and its last
				// decisions, a moment later, are counted; one counted
				// late only delays the end.
				now := time.Now().UnixNano()
				next := now - now%win + win
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Duration(next-now) + 250*time.Millisecond):
				}
				counts := make([]int64, len(admitted))
				mu.Lock()
				for i := range admitted {
					counts[i] = admitted[i][next-win]
				}
				mu.Unlock()
				if until(counts) {
					ready = next - win
					stop()
					return
				}
			}
		})
	}
	var wg sync.WaitGroup
	for i, rate := range rates {
		if rate == 0 {
			continue // an idle region
		}
		hits := (rate + maxCalls - 1) / maxCalls
		wg.Go(func() {
			tick := time.NewTicker(time.Second / time.Duration(rate/hits))
			defer tick.Stop()
			var calls, failed int
			var lastErr error
			for {
				var now time.Time
				select {
				case <-ctx.Done():
				case now = <-tick.C:
				}
				if ctx.Err() != nil {
					break
				}
				dctx, cancel := context.WithTimeout(context.Background(), time.Second)
				dst := []sluice.Decision{{}}
				err := w.stores[i].Apply(dctx, now, []sluice.Op{{Key: sluice.Key{Tenant: "acme", Policy: p.Name, Algorithm: p.Algorithm, Value: "k"}, Policy: p, Hits: int64(hits)}}, dst)
				cancel()
				calls++
				if err != nil {
					failed, lastErr = failed+1, err
					continue
				}
				if dst[0].Allowed {
					start := now.UnixNano() - now.UnixNano()%int64(p.Window)
					mu.Lock()
					admitted[i][start] += int64(hits)
					mu.Unlock()
				}
			}
			switch {
			case failed > calls/4:
				t.Errorf("region %s: %d of %d decisions failed, the last: %v", w.regions[i], failed, calls, lastErr)
			case failed > 0:
				t.Logf("region %s: %d of %d decisions failed, the last: %v", w.regions[i], failed, calls, lastErr)
			}
		})
	}
	wg.Wait()
	stop()
	monitor.Wait()
	return admitted, ready
}

// maxCalls is the most decisions a region asks a second in load.
const maxCalls = 40

// patience bounds a wait for the allotments to follow the demand: far
// more than they take on an idle machine (about a second), for a busy one.
const patience = 30 * time.Second

// windows returns the window starts seen, in order.
func windows(admitted []map[int64]int64) []int64 {
	seen := map[int64]bool{}
	var out []int64
	for _, m := range admitted {
		for w := range m {
			if !seen[w] {
				seen[w] = true
				out = append(out, w)
			}
		}
	}
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// Three regions share a global limit of 100 a second, with 80/15/5 of the
// demand, twice the limit, and replication 300ms behind: no window admits
// more than 100 across the regions, and the allotments follow the demand,
// so that the busy region gets most of the limit once they have moved.
func TestRegionsGlobalLimit(t *testing.T) {
	w := newWorld(t, 300*time.Millisecond)
	p := &sluice.Policy{Name: "api", Algorithm: sluice.FixedWindow, Limit: 100, Window: time.Second}
	// The allotments move to the busy region within a few Rebalance
	// periods and lags when the machine is idle, later when it is busy:
	// the load runs until a window shows it, every window within the limit.
	admitted, moved := w.loadUntil(t, p, []int{160, 30, 10}, patience, func(a []int64) bool {
		return a[0] >= 60 && a[0]+a[1]+a[2] >= 85
	})
	for _, start := range windows(admitted) {
		var sum int64
		for i := range admitted {
			sum += admitted[i][start]
		}
		if sum > p.Limit {
			t.Errorf("window %v: %d admitted across the regions (%d, %d, %d), over the limit of %d",
				time.Unix(0, start).Format("15:04:05"), sum, admitted[0][start], admitted[1][start], admitted[2][start], p.Limit)
		}
	}
	if moved == 0 {
		t.Fatalf("within %v the busy region never admitted 60 and all 85 in a window: the allotments did not follow the demand: %v", patience, admitted[0])
	}
	t.Logf("window %v: %d, %d, %d", time.Unix(0, moved).Format("15:04:05"), admitted[0][moved], admitted[1][moved], admitted[2][moved])
}

// A region cut off from the others keeps deciding within its allotment,
// and the others within theirs: no window admits more than the limit,
// though demand moves to another region meanwhile; once the cut heals,
// the allotments follow the demand again.
func TestRegionsPartition(t *testing.T) {
	w := newWorld(t, 200*time.Millisecond)
	p := &sluice.Policy{Name: "api", Algorithm: sluice.FixedWindow, Limit: 100, Window: time.Second}
	check := func(phase string, admitted []map[int64]int64) {
		t.Helper()
		for _, start := range windows(admitted) {
			if sum := admitted[0][start] + admitted[1][start] + admitted[2][start]; sum > p.Limit {
				t.Errorf("%s, window %v: %d admitted across the regions (%d, %d, %d), over the limit of %d", phase,
					time.Unix(0, start).Format("15:04:05"), sum, admitted[0][start], admitted[1][start], admitted[2][start], p.Limit)
			}
		}
	}
	// The allotments move to us, where the demand is: within a few
	// Rebalance periods and lags when the machine is idle, later when it
	// is busy, so the load runs until a window shows it.
	before, moved := w.loadUntil(t, p, []int{160, 30, 10}, patience, func(admitted []int64) bool { return admitted[0] >= 55 })
	check("before the cut", before)
	if moved == 0 {
		t.Fatalf("us never admitted most of the limit in a window within %v: %v", patience, before[0])
	}
	usHad := before[0][moved]

	// us is cut off for 3s, and the demand moves to eu.
	w.repl.Cut(0, 3*time.Second)
	during := w.load(t, p, []int{10, 160, 30}, 3*time.Second)
	check("during the cut", during)
	for _, start := range windows(during) {
		if eu := during[1][start]; eu > p.Limit-usHad+5 {
			t.Errorf("during the cut, window %v: eu admitted %d, more than the %d us did not hold",
				time.Unix(0, start).Format("15:04:05"), eu, p.Limit-usHad)
		}
	}

	// Healed: us's units reach eu.
	after, followed := w.loadUntil(t, p, []int{10, 160, 30}, patience, func(admitted []int64) bool { return admitted[1] >= 60 })
	check("after the cut", after)
	if followed == 0 {
		t.Fatalf("within %v after the cut healed, eu never admitted most of the limit in a window: the allotments did not follow the demand: %v", patience, after[1])
	}
	t.Logf("before %v; after the cut's end, in the first window where eu had most of the limit (%v after the load began): %d, %d, %d",
		usHad, time.Unix(0, followed).Sub(time.Unix(0, windows(after)[0])), after[0][followed], after[1][followed], after[2][followed])
}

// checkWindows fails the test for every window that admitted more than
// the limit across the regions.
func checkWindows(t *testing.T, p *sluice.Policy, admitted []map[int64]int64) {
	t.Helper()
	for _, start := range windows(admitted) {
		var sum int64
		for i := range admitted {
			sum += admitted[i][start]
		}
		if sum > p.Limit {
			t.Errorf("window %v: %d admitted across the regions, over the limit of %d", time.Unix(0, start).Format("15:04:05"), sum, p.Limit)
		}
	}
}

// All of a key's traffic is in one region: the two regions that never see
// it give it their parts (called through their inboxes), so the busy
// region admits all but 5% of the limit in a window, and no window passes
// the limit.
func TestRegionsIdleRegionsGive(t *testing.T) {
	w := newWorld(t, 300*time.Millisecond)
	p := &sluice.Policy{Name: "api", Algorithm: sluice.FixedWindow, Limit: 100, Window: time.Second}
	admitted, moved := w.loadUntil(t, p, []int{200, 0, 0}, patience, func(a []int64) bool { return a[0] >= 95 })
	checkWindows(t, p, admitted)
	if moved == 0 {
		t.Fatalf("within %v the busy region never admitted 95 of 100 in a window: the idle regions kept their parts: %v", patience, admitted[0])
	}
}

// All of a key's traffic moves from region to region every second, faster
// than units can follow it (a gift takes two lags and about three
// Rebalance periods to arrive): the regions the demand has just left keep
// their even parts for its return, rather than give them to the region it
// is in, where they would arrive after it left. So the regions admit
// about the even split, a third of the limit and more, where giving the
// units away admitted a few percent; no window passes the limit.
func TestRegionsMovingDemandKeepsEvenParts(t *testing.T) {
	w := newWorld(t, 300*time.Millisecond)
	p := &sluice.Policy{Name: "api", Algorithm: sluice.FixedWindow, Limit: 100, Window: time.Second}
	const moves, warm = 15, 6 // 1s each; the first warm are not counted
	var all []map[int64]int64
	var admitted, seconds int64
	for m := range moves {
		rates := make([]int, len(w.regions))
		rates[m%len(rates)] = 200
		a := w.load(t, p, rates, time.Second)
		all = append(all, a...)
		if m < warm {
			continue
		}
		seconds++
		for _, byWindow := range a {
			for _, n := range byWindow {
				admitted += n
			}
		}
	}
	checkWindows(t, p, all)
	// The even split admits about 33 a second (more in a window the
	// demand moved in, both regions' parts); giving the units away
	// admitted 0-10. A loaded machine loses some decisions: the floor is
	// far below the even split.
	if got := float64(admitted) / float64(seconds*p.Limit); got < 0.2 {
		t.Errorf("demand moving every second: %d admitted in %ds, %.0f%% of the limit; want at least 20%% (the even split is 33%%)", admitted, seconds, 100*got)
	} else {
		t.Logf("demand moving every second: %.0f%% of the limit", 100*got)
	}
}

// All of a key's traffic moves once, from one region to another, just
// after the demand peaked in the first: the region it left has never seen
// it come back, so it gives its units to the region the demand went to as
// soon as its fall is measured, rather than keep its even part (a third)
// for a return for recentDemand periods (30 s at this Rebalance of 1 s),
// during which the region with demand could admit no more than two thirds
// of the limit. The move is followed within seconds on an idle machine;
// the test allows 25, short of the 30 s the even part was kept.
func TestRegionsOneOffMoveFollowed(t *testing.T) {
	w, _ := newRebalancedWorld(t, 300*time.Millisecond, time.Second)
	p := &sluice.Policy{Name: "api", Algorithm: sluice.FixedWindow, Limit: 100, Window: time.Second}
	all, moved := w.loadUntil(t, p, []int{200, 0, 0}, patience, func(a []int64) bool { return a[0] >= 95 })
	if moved == 0 {
		t.Fatalf("within %v the busy region never admitted 95 of 100 in a window: %v", patience, all[0])
	}
	// The demand peaks just before it moves, so that the peak the region
	// keeps a floor for is recent: its floor would last about 30 s from
	// the move.
	all = append(all, w.load(t, p, []int{400, 0, 0}, 2500*time.Millisecond)...)
	after, followed := w.loadUntil(t, p, []int{0, 200, 0}, 25*time.Second, func(a []int64) bool { return a[1] >= 90 })
	checkWindows(t, p, append(all, after...))
	if followed == 0 {
		t.Fatalf("within 25s of a one-off move from us to eu, eu never admitted 90 of 100 in a window (us kept its even part for a return that never came): %v", after[1])
	}
}

// A limit of 2 over three regions, all the traffic in one: the integer
// parts (1, 1, 0) do not strand a unit, and the busy region admits both.
func TestRegionsSmallLimit(t *testing.T) {
	w := newWorld(t, 300*time.Millisecond)
	p := &sluice.Policy{Name: "api", Algorithm: sluice.FixedWindow, Limit: 2, Window: time.Second}
	admitted, moved := w.loadUntil(t, p, []int{20, 0, 0}, patience, func(a []int64) bool { return a[0] >= 2 })
	checkWindows(t, p, admitted)
	if moved == 0 {
		t.Fatalf("within %v the busy region never admitted the whole limit of 2 in a window: %v", patience, admitted[0])
	}
}

// A node that cannot read a key's allotment items (the read through the
// proxy outlasts its deadline of half a Rebalance, a real failure) decides
// against the allotment its copy vouches for, fail-open policy or not: it
// admits its region's part and no more, and never fails the decision to
// its fail mode. A node with no copy to vouch for anything admits nothing.
func TestRegionsFailedAllotmentRead(t *testing.T) {
	w, px := newProxiedWorld(t, 200*time.Millisecond)
	us := w.stores[0]
	// A minute's window: the copy read at the first decision holds for
	// the whole window (no gift of us read later can take effect in it).
	p := &sluice.Policy{Name: "api", Algorithm: sluice.FixedWindow, Limit: 9, Window: time.Minute, FailMode: sluice.FailOpen}
	now := time.Now()
	decide := func(key string) (bool, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		dst := []sluice.Decision{{}}
		err := us.Apply(ctx, now, []sluice.Op{{Key: sluice.Key{Tenant: "acme", Policy: p.Name, Algorithm: p.Algorithm, Value: key}, Policy: p, Hits: 1}}, dst)
		return dst[0].Allowed, err
	}
	if ok, err := decide("k"); !ok || err != nil {
		t.Fatalf("the first decision, the store healthy: allowed %v, %v", ok, err)
	}
	// Past the read's deadline of 100ms; each decision now takes longer
	// than a Rebalance, so the next finds its copy due for a refresh.
	px.SetLatency(400 * time.Millisecond)
	admitted := 1
	for range 5 {
		ok, err := decide("k")
		if err != nil {
			t.Fatalf("a decision whose allotment read failed: %v, want one against the copy", err)
		}
		if ok {
			admitted++
		}
	}
	if admitted != 3 {
		t.Errorf("admitted %d in the window with the allotment reads failing, want us's part of 9 over 3 regions, 3", admitted)
	}
	if ok, err := decide("other"); ok || err != nil {
		t.Errorf("a key never read, its allotment read failing: allowed %v, %v; want a denial (nothing vouched for), not an error", ok, err)
	}
	if n := us.Stats().AllotmentFallbacks; n < 5 {
		t.Errorf("AllotmentFallbacks %d, want at least 5", n)
	}
}
