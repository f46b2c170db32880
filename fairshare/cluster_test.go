package fairshare_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/fairshare"
	"github.com/sluicehq/sluice/store/memstore"
)

// cluster is nodes sharing one upstream through a LimiterLedger on one
// store, in one process, as nodes share DynamoDB.
type cluster struct {
	t     *testing.T
	cfg   fairshare.Config
	eng   *engine.Engine
	mu    sync.Mutex
	sent  []time.Time            // every release, as the upstream sees it
	byKey map[string][]time.Time // releases by customer
}

func newCluster(t *testing.T, cfg fairshare.Config) *cluster {
	st := memstore.New(memstore.Options{})
	t.Cleanup(func() { st.Close() })
	return &cluster{t: t, cfg: cfg, eng: engine.New(st, engine.Options{}), byKey: map[string][]time.Time{}}
}

var nodeIDs uint64

// node starts one node; stop it with Close.
func (c *cluster) node(ledgerTTL time.Duration) *fairshare.Upstream {
	c.t.Helper()
	nodeIDs++
	l, err := fairshare.NewLimiterLedger(c.eng, "partner", c.cfg, sluice.NamedLease|nodeIDs, ledgerTTL)
	if err != nil {
		c.t.Fatal(err)
	}
	u, err := fairshare.NewUpstream(c.cfg, fairshare.Options{Ledger: l})
	if err != nil {
		c.t.Fatal(err)
	}
	return u
}

// client keeps n requests of customer waiting at u until ctx ends (a heavy
// customer), or, with every > 0, sends one request every interval (a light
// one); each release is recorded.
func (c *cluster) client(ctx context.Context, wg *sync.WaitGroup, u *fairshare.Upstream, customer string, n int, every time.Duration) {
	acquire := func() {
		if _, err := u.Acquire(ctx, fairshare.Customer(customer), customer, 1, 1, 0); err == nil {
			c.record(customer, 1)
		}
	}
	if every > 0 {
		wg.Go(func() {
			for t := time.NewTicker(every); ; {
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
					wg.Go(acquire)
				}
			}
		})
		return
	}
	for range n {
		wg.Go(func() {
			for ctx.Err() == nil {
				acquire()
			}
		})
	}
}

// maxInWindow returns the most releases in any interval of length w.
func maxInWindow(ts []time.Time, w time.Duration) int {
	ts = slices.Clone(ts)
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	most := 0
	for i, lo := 0, 0; i < len(ts); i++ {
		for ts[i].Sub(ts[lo]) >= w {
			lo++
		}
		most = max(most, i-lo+1)
	}
	return most
}

// count returns customer's releases in [from, to).
func (c *cluster) count(customer string, from, to time.Time) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, t := range c.byKey[customer] {
		if !t.Before(from) && t.Before(to) {
			n++
		}
	}
	return n
}

// record counts a release of customer k's request of cost units.
func (c *cluster) record(k string, cost int64) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for range cost {
		c.sent = append(c.sent, now)
	}
	c.byKey[k] = append(c.byKey[k], now)
}

// finish ends the clients (cancel), stops nodes and waits for the
// clients, then checks that no second saw more than the rate.
func (c *cluster) finish(cancel context.CancelFunc, wg *sync.WaitGroup, nodes ...*fairshare.Upstream) {
	c.t.Helper()
	cancel()
	for _, u := range nodes {
		u.Close()
	}
	wg.Wait()
	if most := maxInWindow(c.sent, c.cfg.Window); int64(most) > c.cfg.Rate {
		c.t.Errorf("the upstream saw %d units in one window, more than its rate of %d", most, c.cfg.Rate)
	}
}

// Three nodes with different customers split the rate so that each
// customer gets its max-min share, and the upstream never sees more than
// its rate in any second, while the shares settle as well as after.
func TestClusterMaxMinAcrossNodes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, fairshare.Config{Rate: 100, Window: time.Second, Burst: 10})
		ttl := 4 * time.Second
		a, b, d := c.node(ttl), c.node(ttl), c.node(ttl)
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		// Node a: five heavy customers; b: one heavy; d: two light at 5/s.
		for i := range 5 {
			c.client(ctx, &wg, a, fmt.Sprintf("a%d", i), 20, 0)
		}
		c.client(ctx, &wg, b, "b0", 20, 0)
		c.client(ctx, &wg, d, "d0", 0, 200*time.Millisecond)
		c.client(ctx, &wg, d, "d1", 0, 200*time.Millisecond)
		start := time.Now()
		time.Sleep(30 * time.Second)
		c.finish(cancel, &wg, a, b, d)
		// Max-min: the light get 5/s each; the six heavy share 90: 15/s.
		from, to := start.Add(10*time.Second), start.Add(30*time.Second)
		want := map[string]float64{"d0": 5 * 20, "d1": 5 * 20, "b0": 15 * 20}
		for i := range 5 {
			want[fmt.Sprintf("a%d", i)] = 15 * 20
		}
		total := 0
		for k, w := range want {
			got := c.count(k, from, to)
			total += got
			if math.Abs(float64(got)-w) > 0.05*w {
				t.Errorf("customer %s got %d in 20s, want %.0f (within 5%%)", k, got, w)
			}
		}
		// The 98% is the simulation's target (TestSimClusterTargets).
		// Here the goroutines' order varies from run to run, fake clock or
		// not: 97.5 to 100% measured over 41 runs under the race detector
		// (all but two at 99.2% or more), so the floor is 96%.
		t.Logf("the upstream served %d of 2000 in 20s", total)
		if total < 1920 {
			t.Errorf("the upstream served %d of 2000 in 20s: under 96%% used", total)
		}
	})
}

// A node that joins a busy upstream starts with what is free and gets its
// half as the other shrinks; a node that dies without a word has its share
// back with the other within the ledger's TTL and an interval. The
// upstream never sees more than its rate in a second meanwhile.
func TestClusterJoinAndDeath(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, fairshare.Config{Rate: 100, Window: time.Second, Burst: 10})
		ttl := 4 * time.Second
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var wg sync.WaitGroup
		a := c.node(ttl)
		defer a.Close()
		c.client(ctx, &wg, a, "a", 20, 0)
		time.Sleep(5 * time.Second)
		if sh := a.Stats(0).Share; sh != 100 {
			t.Fatalf("a alone holds %v, want the whole 100", sh)
		}

		bctx, bcancel := context.WithCancel(ctx)
		b := c.node(ttl)
		c.client(bctx, &wg, b, "b", 20, 0)
		time.Sleep(10 * time.Second)
		if sa, sb := a.Stats(0).Share, b.Stats(0).Share; sa != 50 || sb != 50 {
			t.Errorf("10s after b joined: shares %v and %v, want 50 and 50", sa, sb)
		}

		// b dies busy: Close withdraws nothing, its claim lapses.
		b.Close()
		bcancel()
		died := time.Now()
		for a.Stats(0).Share < 100 {
			time.Sleep(100 * time.Millisecond)
			if time.Since(died) > ttl+2*time.Second {
				t.Fatalf("a holds %v %v after b died, want 100 within the TTL (%v) and an interval", a.Stats(0).Share, time.Since(died), ttl)
			}
		}
		if took := time.Since(died); took < ttl-2*time.Second {
			t.Errorf("a had b's share back after %v, before b's claim could lapse", took)
		}
		time.Sleep(2 * time.Second)
		cancel()
		a.Close()
		wg.Wait()
		if most := maxInWindow(c.sent, time.Second); most > 100 {
			t.Errorf("the upstream saw %d releases in one second, more than its rate of 100", most)
		}
	})
}

// A node whose customers' requests all cost 10 uses its share in steps of
// 10: a share of 25 would send 20 in every window and leave 5 unused. It
// plans its share in whole steps, 20 and 30 in turn, and the other nodes
// size theirs around it: it gets its share over time, and the upstream is
// used whole, never more than the rate in any second.
func TestClusterCostlyNodeGetsItsShare(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, fairshare.Config{Rate: 100, Window: time.Second, Burst: 10})
		ttl := 4 * time.Second
		a, b, d := c.node(ttl), c.node(ttl), c.node(ttl)
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		// Weights 1, 1 and 2: a's share is 25, b's 25 and d's 50.
		cost := map[string]int64{"a": 10, "b": 1, "d": 1}
		weight := map[string]int64{"a": 1, "b": 1, "d": 2}
		for k, u := range map[string]*fairshare.Upstream{"a": a, "b": b, "d": d} {
			for range 20 {
				wg.Go(func() {
					for ctx.Err() == nil {
						if _, err := u.Acquire(ctx, fairshare.Customer(k), k, weight[k], cost[k], 0); err == nil {
							c.record(k, cost[k])
						}
					}
				})
			}
		}
		start := time.Now()
		time.Sleep(40 * time.Second)
		c.finish(cancel, &wg, a, b, d)
		// Measured over 20 runs under the race detector: a 680 to 720
		// units of 750, the upstream 2929 to 2974 of 3000. Before a node
		// planned in whole steps: a 600 to 620, the upstream 2845 to 2850.
		from, to := start.Add(10*time.Second), start.Add(40*time.Second)
		total := 0
		for k, share := range map[string]float64{"a": 25, "b": 25, "d": 50} {
			got := c.count(k, from, to) * int(cost[k])
			total += got
			t.Logf("%s got %d units in 30s, its share %.0f", k, got, share*30)
			if math.Abs(float64(got)-share*30) > 0.12*share*30 {
				t.Errorf("%s got %d units in 30s, want %.0f (within 12%%)", k, got, share*30)
			}
		}
		t.Logf("the upstream served %d of 3000 units in 30s", total)
		if total < 2900 {
			t.Errorf("the upstream served %d of 3000 units in 30s: under 96.7%% used", total)
		}
	})
}

// A tenant that bursts and then goes quiet stops holding its node's share
// at once: the rate it no longer uses reaches the other nodes' heavy
// tenants within a few steps of the burst's end, not as its eight-step
// average decays. The upstream never sees more than its rate meanwhile.
func TestClusterEndedBurstFreesItsShare(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, fairshare.Config{Rate: 100, Window: time.Second, Burst: 10})
		ttl := 4 * time.Second
		a, b, d := c.node(ttl), c.node(ttl), c.node(ttl)
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		// Node a: a tenant bursting for 12 s and a light one at 5/s; b: a
		// heavy one; d: a light one at 5/s.
		bctx, bcancel := context.WithCancel(ctx)
		c.client(bctx, &wg, a, "burst", 20, 0)
		c.client(ctx, &wg, a, "al", 0, 200*time.Millisecond)
		c.client(ctx, &wg, b, "heavy", 20, 0)
		c.client(ctx, &wg, d, "dl", 0, 200*time.Millisecond)
		time.Sleep(12 * time.Second)
		bcancel()
		end := time.Now()
		time.Sleep(10 * time.Second)
		c.finish(cancel, &wg, a, b, d)
		// From 3 s after the burst's end (two steps to see it quiet, one
		// to claim) the heavy tenant gets all the light ones leave: 90/s.
		// Measured over 10 runs under the race detector: 533 to 540;
		// before a group's ended burst stopped counting, 434 to 444.
		from, to := end.Add(3*time.Second), end.Add(9*time.Second)
		got := c.count("heavy", from, to)
		t.Logf("the heavy tenant got %d in the 6 s from 3 s after the burst's end, of 540", got)
		if got < 510 {
			t.Errorf("the heavy tenant got %d in the 6 s from 3 s after the burst's end, want 540 (within 5.5%%)", got)
		}
		for _, k := range []string{"al", "dl"} {
			if n := c.count(k, from, to); n < 28 {
				t.Errorf("light tenant %s got %d in 6 s, want 30", k, n)
			}
		}
	})
}

// A node whose tenants include sparse costly ones (one cost-10 request
// every 16 s each, light over any stretch of time) holds what they ask as
// well as its heavy tenant's part: each such request is counted whole, as
// the fair level serves it, not at the level for the seconds its node
// remembers it, nor at ten a second for the second it came in. The
// upstream never sees more than its rate meanwhile.
func TestClusterSparseCostlyTenants(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, fairshare.Config{Rate: 100, Window: time.Second, Burst: 10})
		ttl := 4 * time.Second
		a, b, d := c.node(ttl), c.node(ttl), c.node(ttl)
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		send := func(u *fairshare.Upstream, k string, weight, cost int64) {
			if _, err := u.Acquire(ctx, fairshare.Customer(k), k, weight, cost, 0); err == nil {
				c.record(k, cost)
			}
		}
		// Heavy tenants of weights 10 (a), 40 (b) and 40 (d), requests of
		// cost 1; on a, 16 sparse tenants of weight 1, one a second in turn,
		// each asking 10 every 16 s: 10 a second in all.
		nodes := map[string]*fairshare.Upstream{"ah": a, "bh": b, "dh": d}
		for k, w := range map[string]int64{"ah": 10, "bh": 40, "dh": 40} {
			for range 20 {
				wg.Go(func() {
					for ctx.Err() == nil {
						send(nodes[k], k, w, 1)
					}
				})
			}
		}
		for i := range 16 {
			wg.Go(func() {
				k := fmt.Sprintf("sparse%d", i)
				tick := time.NewTimer(time.Duration(i) * time.Second)
				defer tick.Stop()
				for {
					select {
					case <-ctx.Done():
						return
					case <-tick.C:
						tick.Reset(16 * time.Second)
						wg.Go(func() { send(a, k, 1, 10) })
					}
				}
			})
		}
		start := time.Now()
		time.Sleep(10 * time.Second)
		// a's share, sampled ten times a second.
		var held float64
		for range 300 {
			time.Sleep(100 * time.Millisecond)
			held += a.Stats(0).Share / 300
		}
		c.finish(cancel, &wg, a, b, d)
		// Max-min: the sparse tenants get their 10 a second; the heavy
		// share 90 by weight: 10, 40 and 40 a second. a's share is 20.
		// Measured over 10 runs under the race detector: 19.6 to 19.9;
		// before a group that asked once counted as light, 18.0 to 18.1
		// (3 runs).
		t.Logf("a held %.2f a second on average, of 20", held)
		if held < 19.2 || held > 20.8 {
			t.Errorf("a held %.2f a second on average, want 20 (within 0.8)", held)
		}
		from, to := start.Add(10*time.Second), start.Add(40*time.Second)
		sparse := 0
		for i := range 16 {
			sparse += 10 * c.count(fmt.Sprintf("sparse%d", i), from, to)
		}
		t.Logf("the sparse tenants got %d units in 30 s, of 300", sparse)
		if sparse < 270 {
			t.Errorf("the sparse tenants got %d units in 30 s, want 300", sparse)
		}
		for _, k := range []string{"bh", "dh"} {
			got := c.count(k, from, to)
			t.Logf("%s got %d in 30 s, its share 1200", k, got)
			if math.Abs(float64(got)-1200) > 0.05*1200 {
				t.Errorf("%s got %d in 30 s, want 1200 (within 5%%)", k, got)
			}
		}
	})
}
