package fairsim

import (
	"cmp"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// Sluice keeps the window bound and the upstream busy, meets the Jain
// target of 0.99 against moment-by-moment max-min shares, and is far
// fairer than first come first served, for several seeds. Over the whole
// run, where a bursting customer is owed its minute's average while it
// bursts, it reaches about 0.96 (docs/benchmarks.md); the floor here is
// below that.
func TestSimSluiceTargets(t *testing.T) {
	for _, seed := range []uint64{0, 1, 42} {
		rep, err := Run(Config{Seed: seed, Duration: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		by := map[string]Result{}
		for _, r := range rep.Strategies {
			by[r.Strategy] = r
		}
		s, f := by["sluice"], by["fcfs"]
		if s.WindowsOver != 0 || s.MaxInWindow > rep.Rate {
			t.Errorf("seed %d: sluice granted %d in some 1s, %d aligned windows over", seed, s.MaxInWindow, s.WindowsOver)
		}
		if s.Utilisation < 0.98 {
			t.Errorf("seed %d: sluice utilisation %.3f, want >= 0.98", seed, s.Utilisation)
		}
		if s.Jain < 0.99 || s.JainRun < 0.95 {
			t.Errorf("seed %d: sluice Jain %.3f moment by moment and %.3f over the run, want >= 0.99 and 0.95", seed, s.Jain, s.JainRun)
		}
		if f.Jain > s.Jain-0.3 {
			t.Errorf("seed %d: fcfs Jain %.3f not measurably below sluice's %.3f", seed, f.Jain, s.Jain)
		}
		if f.MaxInWindow <= rep.Rate {
			t.Errorf("seed %d: fcfs's token bucket never exceeded the quota in a sliding second", seed)
		}
	}
}

func TestSimDeterministic(t *testing.T) {
	a, _ := Run(Config{Seed: 7, Duration: 5 * time.Second})
	b, _ := Run(Config{Seed: 7, Duration: 5 * time.Second})
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("seed 7 twice: %+v then %+v", a, b)
	}
}

// The fluid reference gives a light customer all it asks, splits the rest
// by tenant weight and within a tenant evenly, and drops what has not
// begun its service by its maximum wait.
func TestGPSShares(t *testing.T) {
	cfg := Config{Customers: 10, Duration: 10 * time.Second, Rate: 10, MaxWait: time.Second}.withDefaults()
	w := workload{custs: make([]customer, 10)}
	for c := range w.custs {
		w.custs[c] = customer{tenant: c, weight: 1, cost: 1, maxWait: time.Second}
	}
	for k := range 100 { // customers 0 and 1 ask 10/s, customer 2 asks 1/s
		at := time.Duration(k) * 100 * time.Millisecond
		w.arrivals = append(w.arrivals, request{cust: 0, at: at}, request{cust: 1, at: at})
		if k%10 == 0 {
			w.arrivals = append(w.arrivals, request{cust: 2, at: at})
		}
	}
	slices.SortStableFunc(w.arrivals, func(a, b request) int { return cmp.Compare(a.at, b.at) })
	got := gpsShares(w, cfg)
	if math.Abs(got[2]-10) > 0.01 {
		t.Errorf("light customer served %.2f of its 10", got[2])
	}
	for _, c := range []int{0, 1} {
		if math.Abs(got[c]-45) > 1 {
			t.Errorf("heavy customer %d served %.2f, want about 45 (half of 90)", c, got[c])
		}
	}
	if sum := got[0] + got[1] + got[2]; sum > 100.01 {
		t.Errorf("served %.2f in all, more than the capacity of 100", sum)
	}

	// Customers 0 and 1 are one tenant of weight 2, customer 2 one of
	// weight 1, all asking 10/s: the tenant of weight 2 gets two thirds,
	// split evenly between its two customers.
	w.custs[1].tenant = 0
	w.custs[0].weight, w.custs[1].weight = 2, 2
	w.arrivals = w.arrivals[:0]
	for k := range 100 {
		at := time.Duration(k) * 100 * time.Millisecond
		w.arrivals = append(w.arrivals, request{cust: 0, at: at}, request{cust: 1, at: at}, request{cust: 2, at: at})
	}
	got = gpsShares(w, cfg)
	for c, want := range []float64{100.0 / 3, 100.0 / 3, 100.0 / 3} {
		if math.Abs(got[c]-want) > 1.5 {
			t.Errorf("weights: customer %d served %.2f, want about %.1f", c, got[c], want)
		}
	}
}

// A request the fluid reference has begun by the end of the run counts
// whole, as a scheduler serves it whole: a cost-10 request arriving in the
// last second, beside a backlogged customer, is owed 10, not the part the
// fluid had served by the end.
func TestGPSSharesEndWhole(t *testing.T) {
	cfg := Config{Customers: 10, Duration: 10 * time.Second, Rate: 10, MaxWait: 20 * time.Second}.withDefaults()
	w := workload{custs: make([]customer, 10)}
	for c := range w.custs {
		w.custs[c] = customer{tenant: c, weight: 1, cost: 1, maxWait: 20 * time.Second}
	}
	w.custs[1].cost = 10
	for k := range 200 {
		w.arrivals = append(w.arrivals, request{cust: 0, at: time.Duration(k) * 50 * time.Millisecond})
	}
	w.arrivals = append(w.arrivals, request{cust: 1, at: 9500 * time.Millisecond})
	slices.SortStableFunc(w.arrivals, func(a, b request) int { return cmp.Compare(a.at, b.at) })
	if got := gpsShares(w, cfg); math.Abs(got[1]-10) > 1e-6 {
		t.Errorf("a cost-10 request begun half a second before the end is owed %.2f, want 10", got[1])
	}
}

// fill shares by tenant weight, then evenly within a tenant, giving a
// light customer what it asks.
func TestFill(t *testing.T) {
	custs := []customer{{tenant: 0, weight: 4}, {tenant: 0, weight: 4}, {tenant: 1, weight: 1}, {tenant: 2, weight: 1}}
	got, level := fill(custs, []float64{100, 1, 100, 100}, 60)
	// Tenant 0 gets 4/6 of 60 = 40: its light customer 1, the rest 39;
	// tenants 1 and 2 get 10 each.
	for c, want := range []float64{39, 1, 10, 10} {
		if math.Abs(got[c]-want) > 1e-9 {
			t.Errorf("customer %d: %.3f, want %v", c, got[c], want)
		}
	}
	if level != 10 {
		t.Errorf("level %v, want 10 per unit of weight", level)
	}
}

// Three Sluice nodes sharing the quota through their balancers, over the
// default minute on seeds 0 to 7: the window bound exactly and Jain's
// index at least 0.99 against moment-by-moment max-min on every seed; the
// upstream at least 98% used on average while demand exceeds it. A seed
// alone may fall short of 98% (97.75 to 98.5% measured): the nodes start
// together with nothing and take two or three seconds to find their
// shares, and how much that costs varies with the arrivals of those
// seconds (docs/benchmarks.md). No seed may fall under 97%.
func TestSimClusterTargets(t *testing.T) {
	var sum float64
	seeds := []uint64{0, 1, 2, 3, 4, 5, 6, 7}
	for _, seed := range seeds {
		rep, err := Run(Config{Seed: seed, Nodes: 3})
		if err != nil {
			t.Fatal(err)
		}
		s := rep.Strategies[len(rep.Strategies)-1]
		if s.Strategy != "sluice" || rep.Nodes != 3 {
			t.Fatalf("seed %d: the last strategy is %q on %d nodes, want sluice on 3", seed, s.Strategy, rep.Nodes)
		}
		if s.WindowsOver != 0 || s.MaxInWindow > rep.Rate {
			t.Errorf("seed %d: sluice on 3 nodes granted %d in some 1s, %d aligned windows over", seed, s.MaxInWindow, s.WindowsOver)
		}
		if s.Jain < 0.99 {
			t.Errorf("seed %d: sluice on 3 nodes: Jain %.3f moment by moment, want >= 0.99", seed, s.Jain)
		}
		if s.Utilisation < 0.97 {
			t.Errorf("seed %d: sluice on 3 nodes: utilisation %.3f, want >= 0.97", seed, s.Utilisation)
		}
		sum += s.Utilisation
	}
	if mean := sum / float64(len(seeds)); mean < 0.98 {
		t.Errorf("sluice on 3 nodes: utilisation %.4f on average over seeds 0 to 7, want >= 0.98", mean)
	}
}

// A cluster's run depends on the seed alone: every request ends alike,
// and so does the report.
func TestSimClusterDeterministic(t *testing.T) {
	cfg := Config{Seed: 7, Duration: 10 * time.Second, Nodes: 3}.withDefaults()
	w := newWorkload(cfg)
	var runs [2][]request
	for i := range runs {
		c, err := newCluster(cfg, w.custs)
		if err != nil {
			t.Fatal(err)
		}
		runs[i] = simulate(c, w.arrivals, cfg.Duration)
		if err := c.close(); err != nil {
			t.Fatal(err)
		}
	}
	for i := range runs[0] {
		if runs[0][i] != runs[1][i] {
			t.Fatalf("seed 7 twice on 3 nodes: request %d ended %+v, then %+v", i, runs[0][i], runs[1][i])
		}
	}
	a, _ := Run(cfg)
	b, _ := Run(cfg)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("seed 7 twice on 3 nodes: %+v then %+v", a, b)
	}
}

func TestConfigNodes(t *testing.T) {
	if n := (Config{}).withDefaults().Nodes; n != 1 {
		t.Errorf("Nodes defaults to %d, want 1", n)
	}
	for _, n := range []int{-1, MaxNodes + 1} {
		if err := (Config{Nodes: n}).Validate(); err == nil || !strings.Contains(err.Error(), "Nodes") {
			t.Errorf("Nodes %d: %v, want an error naming Nodes", n, err)
		}
	}
}

// A shaped workload (weights, a tenant of many keys, costs, short waits,
// moving demand) keeps Sluice within the quota in every window, and
// reports each class of customer apart.
func TestSimShapedWorkload(t *testing.T) {
	cfg := Config{
		Duration: 20 * time.Second, Weights: []int64{4, 2, 1}, Keys: []int{1, 1, 1, 20},
		Costs: []int64{1, 5}, MaxWaits: []time.Duration{2 * time.Second, 300 * time.Millisecond},
		Shift: 5 * time.Second,
	}
	for _, nodes := range []int{1, 3} {
		cfg.Nodes = nodes
		rep, err := Run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		s := rep.Strategies[len(rep.Strategies)-1]
		if s.WindowsOver != 0 || s.MaxInWindow > rep.Rate {
			t.Errorf("%d nodes: sluice granted %d units in some 1s, %d aligned windows over", nodes, s.MaxInWindow, s.WindowsOver)
		}
		var names []string
		for _, c := range s.Classes {
			names = append(names, c.Name)
		}
		for _, want := range []string{"light", "heavy", "weight 4", "tenant of 20 keys", "cost 5", "wait 300ms"} {
			if !slices.Contains(names, want) {
				t.Errorf("%d nodes: classes %v lack %q", nodes, names, want)
			}
		}
	}
	if err := (Config{Costs: []int64{11}}).Validate(); err == nil || !strings.Contains(err.Error(), "Costs") {
		t.Errorf("a cost over Rate/10: %v, want an error naming Costs", err)
	}
}

// Where requests are refused or dropped at short maximum waits, at four
// or five times the quota, Sluice still meets the Jain target against the
// fluid ideal on one node: the heaviest tenants are not left a few per
// cent short by tenants that come back after a miss (docs/benchmarks.md,
// the shortwait, costs3 and costly shapes; seed 1 of each was under 0.99
// with a credit of a whole unit).
func TestSimShortWaitsJain(t *testing.T) {
	for name, cfg := range map[string]Config{
		"shortwait": {MaxWaits: []time.Duration{300 * time.Millisecond}, Load: 5, Shift: 2 * time.Second},
		"costs3":    {Costs: []int64{3}, MaxWaits: []time.Duration{500 * time.Millisecond}, Shift: 10 * time.Second, Load: 4},
		"costly":    {Costs: []int64{1, 5, 10}, MaxWaits: []time.Duration{time.Second}},
	} {
		cfg.Seed = 1
		rep, err := Run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		s := rep.Strategies[len(rep.Strategies)-1]
		if s.Jain < 0.99 || s.WindowsOver != 0 || s.Utilisation < 0.98 {
			t.Errorf("%s: sluice Jain %.4f, utilisation %.3f, %d windows over; want >= 0.99, >= 0.98, 0", name, s.Jain, s.Utilisation, s.WindowsOver)
		}
	}
}

// A light customer is served within one window at the 99th percentile on
// the default workload, where a round of the rotation takes longer than
// that: the third of a Poisson cluster no longer waits a round.
func TestSimLightWithinAWindow(t *testing.T) {
	for _, seed := range []uint64{0, 1, 2} {
		rep, err := Run(Config{Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		s := rep.Strategies[len(rep.Strategies)-1]
		if s.LightP99ms > 1000 {
			t.Errorf("seed %d: light p99 %.0f ms, want within 1 s", seed, s.LightP99ms)
		}
	}
}

// A customer is light only if it asks under half its share in every
// period of moving demand: one that asks most of what it asks over the
// run in one period is heavy then, whatever its average.
func TestLightCustomersPerShift(t *testing.T) {
	cfg := Config{Customers: 10, Duration: 10 * time.Second, Rate: 10, Shift: 5 * time.Second}.withDefaults()
	custs := make([]customer, 5)
	for c := range custs {
		custs[c] = customer{tenant: c, weight: 1, cost: 1}
	}
	var reqs []request
	ask := func(c, n int, from time.Duration) {
		for i := range n {
			reqs = append(reqs, request{cust: c, at: from + time.Duration(i)*time.Millisecond})
		}
	}
	ask(0, 9, 0) // 9 in the first 5 s, none after: half its share then is 6.5
	for c := 1; c <= 3; c++ {
		ask(c, 100, 0)
		ask(c, 100, 5*time.Second)
	}
	ask(4, 2, 0) // 2 in each period
	ask(4, 2, 5*time.Second)
	got := lightCustomers(cfg, custs, reqs)
	if want := []bool{false, false, false, false, true}; !slices.Equal(got, want) {
		t.Errorf("light: %v, want %v (customer 0 light over the run, heavy in its period)", got, want)
	}
	cfg.Shift = 0
	if got := lightCustomers(cfg, custs, reqs); !got[0] || !got[4] || got[1] {
		t.Errorf("without moving demand, light over the run: %v, want customers 0 and 4", got)
	}
}
