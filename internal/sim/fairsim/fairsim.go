// Package fairsim simulates customers sharing one upstream quota under four
// strategies, on a virtual clock, deterministically from a seed: first come
// first served, a per-customer cap, seed 004's priority queue ordered by
// each customer's use in the last second, and Sluice's fairshare.Scheduler.
//
// The workload is a family, shaped by Config: Customers customers (keys),
// a tenth idle, the rest with Poisson arrivals whose mean rates in cost
// units follow Zipf's law (the customer of rank k asks for c/k units per
// second; ranks shuffled by the seed, and again every Shift if it is set,
// so demand moves) and sum to Load times the quota. Every Bursty-th active
// customer bursts: on for 2 s on average at four times its mean rate, off
// for 6 s on average. Customers belong to tenants, each naming the number
// of keys its turn in Keys says and weighing its turn in Weights; each
// customer's requests cost its turn in Costs, and wait at most its turn in
// MaxWaits (cycled so that costs and waits mix). Every strategy sees the
// same arrivals. A request still waiting its maximum wait after it arrived
// is dropped and counts as not served; Sluice also refuses at once a
// request whose estimated fair wait exceeds it, as its Upstream does.
//
// Fairness is measured against weighted max-min fairness over tenants,
// each tenant's share split evenly among its keys, x_i = served_i /
// share_i in cost units, and Jain's index (sum x)^2 / (n sum x^2) taken
// over the tenants that offered anything (the holders of weights: with
// one key each, the customers), for two kinds of share. Moment
// by moment (Jain, WorstX): what generalised processor sharing, the fluid
// ideal of that fairness at every instant, serves each customer from the
// same arrivals with the same maximum waits (gps.go). Over the whole run
// (JainRun, WorstXRun): the capacity (Rate times Duration) water-filled
// over all a customer offered, which a bursting customer can only reach if
// given more than the fair level while it bursts, at the expense of the
// customers asking steadily. Each class of customer (light and heavy, and
// each weight, key count, cost and maximum wait in the mix) is measured
// apart as well. A light customer asks steadily under half its share in
// every Shift of demand (lightCustomers), so one that asks most of its
// run's demand in a few seconds does not count as light.
//
// With Nodes above 1, Sluice runs as a cluster sharing the upstream, as
// its nodes share one in production: a sticky load balancer sends tenant
// t's requests to node t % Nodes, and each node's Scheduler releases at the share a
// fairshare.Balancer sizes for it about once a second, through a
// fairshare.LimiterLedger on Sluice's own engine and in-memory store, all
// on the virtual clock (cluster.go). The other strategies are one queue in
// front of the upstream whatever the number of nodes.
package fairsim

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/fairshare"
)

// Config is one simulation. Zero fields take the defaults stated.
type Config struct {
	Seed      uint64
	Customers int           // default 200
	Duration  time.Duration // simulated time; default 60s
	Rate      int64         // the upstream's quota per second; default 100
	Load      float64       // offered demand over the quota; default 3
	MaxWait   time.Duration // the default of MaxWaits; default 2s
	Nodes     int           // Sluice nodes sharing the quota, 1 to 16; default 1
	// Weights are the tenants' weights, tenant t having Weights[t %
	// len]; default all 1.
	Weights []int64
	// Keys are how many customers (keys) each tenant names, tenant t
	// naming Keys[t % len]; default 1 each.
	Keys []int
	// Costs are what customers' requests cost, customer c's all costing
	// Costs[c % len]; default 1. Each at most Rate/10 (Sluice's burst).
	Costs []int64
	// MaxWaits are the customers' maximum waits, customer c waiting at
	// most MaxWaits[c / len(Costs) % len]; default MaxWait.
	MaxWaits []time.Duration
	// Shift, if not zero, moves demand: every Shift the active customers'
	// Zipf ranks are shuffled anew.
	Shift time.Duration
	// Bursty makes every Bursty-th active customer burst; default 6, -1
	// none.
	Bursty int
}

func (c Config) withDefaults() Config {
	if c.Customers == 0 {
		c.Customers = 200
	}
	if c.Duration == 0 {
		c.Duration = 60 * time.Second
	}
	if c.Rate == 0 {
		c.Rate = 100
	}
	if c.Load == 0 {
		c.Load = 3
	}
	if c.MaxWait == 0 {
		c.MaxWait = 2 * time.Second
	}
	if c.Nodes == 0 {
		c.Nodes = 1
	}
	if len(c.Weights) == 0 {
		c.Weights = []int64{1}
	}
	if len(c.Keys) == 0 {
		c.Keys = []int{1}
	}
	if len(c.Costs) == 0 {
		c.Costs = []int64{1}
	}
	if len(c.MaxWaits) == 0 {
		c.MaxWaits = []time.Duration{c.MaxWait}
	}
	if c.Bursty == 0 {
		c.Bursty = 6
	}
	return c
}

// Validate reports the first bad field of c once defaulted.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Customers < 10 || c.Customers > 100_000:
		return fmt.Errorf("fairsim: Customers %d must be 10 to 100000", c.Customers)
	case c.Duration < time.Second || c.Duration > time.Hour:
		return fmt.Errorf("fairsim: Duration %v must be 1s to 1h", c.Duration)
	case c.Rate < 1 || c.Rate > 100_000:
		return fmt.Errorf("fairsim: Rate %d must be 1 to 100000", c.Rate)
	case c.Load <= 0 || c.Load > 100:
		return fmt.Errorf("fairsim: Load %v must be in (0, 100]", c.Load)
	case c.MaxWait < 0:
		return fmt.Errorf("fairsim: MaxWait %v must not be negative", c.MaxWait)
	case c.Nodes < 1 || c.Nodes > MaxNodes:
		return fmt.Errorf("fairsim: Nodes %d must be 1 to %d", c.Nodes, MaxNodes)
	case c.Shift < 0 || c.Shift > 0 && c.Shift < 100*time.Millisecond:
		return fmt.Errorf("fairsim: Shift %v must be 0 (none) or at least 100ms", c.Shift)
	case c.Bursty < -1:
		return fmt.Errorf("fairsim: Bursty %d must be -1 (none) or at least 1", c.Bursty)
	}
	for _, w := range c.Weights {
		if w < 1 || w > fairshare.MaxWeight {
			return fmt.Errorf("fairsim: Weights: %d must be 1 to %d", w, fairshare.MaxWeight)
		}
	}
	for _, k := range c.Keys {
		if k < 1 || k > c.Customers {
			return fmt.Errorf("fairsim: Keys: %d must be 1 to Customers (%d)", k, c.Customers)
		}
	}
	for _, n := range c.Costs {
		if n < 1 || n > max(1, c.Rate/10) {
			return fmt.Errorf("fairsim: Costs: %d must be 1 to Rate/10 (%d)", n, max(1, c.Rate/10))
		}
	}
	for _, w := range c.MaxWaits {
		if w <= 0 {
			return fmt.Errorf("fairsim: MaxWaits: %v must be positive", w)
		}
	}
	return nil
}

// Report is a simulation's workload and each strategy's result.
type Report struct {
	Seed       uint64   `json:"seed"`
	Customers  int      `json:"customers"`
	Tenants    int      `json:"tenants"`
	Idle       int      `json:"idle"`
	Bursting   int      `json:"bursting"`
	DurationS  float64  `json:"duration_s"`
	Rate       int64    `json:"rate_per_s"`
	Offered    int64    `json:"offered"`    // cost units that arrived
	Capacity   int64    `json:"capacity"`   // Rate times Duration
	FairShare  float64  `json:"fair_share"` // the water level per unit of weight over the run
	Heavy      int      `json:"heavy"`      // customers that offered more than their share over the run
	MaxWaitS   float64  `json:"max_wait_s"` // the longest wait; waits beyond a request's own are dropped
	Nodes      int      `json:"nodes"`      // Sluice nodes sharing the quota
	Shape      string   `json:"shape"`      // weights, keys, costs, waits, shift and bursts, for people
	Strategies []Result `json:"strategies"`
}

// Result is one strategy's measures.
type Result struct {
	Strategy string `json:"strategy"`
	// Utilisation is the units granted over the capacity, in the aligned
	// 1 s windows in which more than the quota arrived.
	Utilisation float64 `json:"utilisation"`
	// WindowsOver counts aligned 1 s windows granting more than the quota;
	// MaxInWindow is the most units granted in any sliding 1 s.
	WindowsOver int   `json:"windows_over"`
	MaxInWindow int64 `json:"max_in_window"`
	// Jain and WorstX measure x_i against the moment-by-moment max-min
	// shares (the package doc); JainRun and WorstXRun against shares
	// water-filled over the whole run.
	Jain       float64 `json:"jain"`
	WorstX     float64 `json:"worst_x"`
	JainRun    float64 `json:"jain_run"`
	WorstXRun  float64 `json:"worst_x_run"`
	Served     int64   `json:"served"`  // requests
	Refused    int64   `json:"refused"` // at arrival (429)
	Dropped    int64   `json:"dropped"` // waited past their maximum wait
	LightP50ms float64 `json:"light_p50_ms"`
	LightP99ms float64 `json:"light_p99_ms"`
	HeavyP50ms float64 `json:"heavy_p50_ms"`
	HeavyP99ms float64 `json:"heavy_p99_ms"`
	// Classes are the measures of each class of customer.
	Classes []Class `json:"classes"`
}

// Class is one class of customer's measures under a strategy.
type Class struct {
	Name      string `json:"name"`
	Customers int    `json:"customers"` // that offered anything
	// Got is the units the class was served over its moment-by-moment
	// shares' sum; WorstX its least x_i.
	Got    float64 `json:"got"`
	WorstX float64 `json:"worst_x"`
	// Refused and Dropped are fractions of the requests it offered.
	Refused float64 `json:"refused"`
	Dropped float64 `json:"dropped"`
	P50ms   float64 `json:"p50_ms"`
	P99ms   float64 `json:"p99_ms"`
}

// request is one arrival; every strategy gets its own copy.
type request struct {
	id      uint64
	cust    int
	at      time.Duration
	granted time.Duration
	state   uint8 // waiting, served, refused or dropped
}

const (
	waiting = iota
	served
	refused
	dropped
)

// strategy decides which waiting requests go to the upstream.
type strategy interface {
	name() string
	// arrive offers r at now; the strategy sets r.state to refused or
	// keeps it.
	arrive(now time.Duration, r *request)
	// next grants what may go at now, marks expired requests dropped, and
	// returns when to call again (negative: on the next arrival).
	next(now time.Duration) (grants []*request, wake time.Duration)
}

// customer is who a customer is and how it asks.
type customer struct {
	tenant  int
	weight  int64 // its tenant's
	cost    int64
	maxWait time.Duration
	bursts  bool
}

// Run simulates cfg under the four strategies.
func Run(cfg Config) (Report, error) {
	if err := cfg.Validate(); err != nil {
		return Report{}, err
	}
	cfg = cfg.withDefaults()
	w := newWorkload(cfg)
	rep := Report{
		Seed: cfg.Seed, Customers: cfg.Customers, Tenants: w.tenants, Idle: w.idle, Bursting: w.bursting,
		DurationS: cfg.Duration.Seconds(), Rate: cfg.Rate,
		Capacity: cfg.Rate * int64(cfg.Duration/time.Second), MaxWaitS: slices.Max(cfg.MaxWaits).Seconds(),
		Nodes: cfg.Nodes, Shape: shape(cfg),
	}
	offered := make([]float64, cfg.Customers)
	for _, a := range w.arrivals {
		offered[a.cust] += float64(w.custs[a.cust].cost)
		rep.Offered += w.custs[a.cust].cost
	}
	shares, level := fill(w.custs, offered, float64(rep.Capacity))
	gps := gpsShares(w, cfg)
	rep.FairShare = level
	for c, o := range offered {
		if o > shares[c]+1e-9 {
			rep.Heavy++
		}
	}
	sluice, done, err := newSluiceStrategy(cfg, w.custs)
	if err != nil {
		return Report{}, err
	}
	for _, s := range []strategy{newFCFS(cfg, w.custs), newCapped(cfg, w.custs), newPriority(cfg, w.custs), sluice} {
		reqs := simulate(s, w.arrivals, cfg.Duration)
		rep.Strategies = append(rep.Strategies, measure(s.name(), cfg, w.custs, reqs, offered, shares, level, gps))
	}
	if err := done(); err != nil {
		return Report{}, err
	}
	return rep, nil
}

// shape describes cfg's workload family in a line.
func shape(cfg Config) string {
	join := func(n int, at func(int) string) string {
		parts := make([]string, n)
		for i := range parts {
			parts[i] = at(i)
		}
		return strings.Join(parts, "/")
	}
	shift := "none"
	if cfg.Shift > 0 {
		shift = cfg.Shift.String()
	}
	bursty := "none"
	if cfg.Bursty > 0 {
		bursty = fmt.Sprintf("1 in %d", cfg.Bursty)
	}
	return fmt.Sprintf("load %gx; weights %s; keys %s; costs %s; max waits %s; demand shifts %s; bursting %s",
		cfg.Load,
		join(len(cfg.Weights), func(i int) string { return fmt.Sprint(cfg.Weights[i]) }),
		join(len(cfg.Keys), func(i int) string { return fmt.Sprint(cfg.Keys[i]) }),
		join(len(cfg.Costs), func(i int) string { return fmt.Sprint(cfg.Costs[i]) }),
		join(len(cfg.MaxWaits), func(i int) string { return cfg.MaxWaits[i].String() }),
		shift, bursty)
}

// newSluiceStrategy returns Sluice on one node, or on cfg.Nodes sharing
// the upstream, and a function to call once it has run, which releases
// what it holds and returns any error its ledger met.
func newSluiceStrategy(cfg Config, custs []customer) (strategy, func() error, error) {
	if cfg.Nodes == 1 {
		s, err := newSluice(cfg, custs)
		return s, func() error { return nil }, err
	}
	c, err := newCluster(cfg, custs)
	if err != nil {
		return nil, nil, err
	}
	return c, c.close, nil
}

// simulate runs the arrivals through s until end, on a virtual clock that
// jumps from event to event.
func simulate(s strategy, arrivals []request, end time.Duration) []request {
	reqs := slices.Clone(arrivals)
	i, wake := 0, time.Duration(-1)
	for {
		now := time.Duration(math.MaxInt64)
		if i < len(reqs) {
			now = reqs[i].at
		}
		if wake >= 0 && wake < now {
			now = wake
		}
		if now >= end {
			return reqs
		}
		for ; i < len(reqs) && reqs[i].at <= now; i++ {
			s.arrive(now, &reqs[i])
		}
		var grants []*request
		grants, wake = s.next(now)
		for _, r := range grants {
			r.state, r.granted = served, now
		}
	}
}

// workload is the customers and arrivals of a simulation, in time order.
type workload struct {
	custs    []customer
	arrivals []request
	tenants  int
	idle     int
	bursting int
}

func newWorkload(cfg Config) workload {
	r := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x5eed_f00d))
	n := cfg.Customers
	var w workload
	for c := 0; c < n; w.tenants++ {
		for range min(cfg.Keys[w.tenants%len(cfg.Keys)], n-c) {
			w.custs = append(w.custs, customer{
				tenant:  w.tenants,
				weight:  cfg.Weights[w.tenants%len(cfg.Weights)],
				cost:    cfg.Costs[c%len(cfg.Costs)],
				maxWait: cfg.MaxWaits[c/len(cfg.Costs)%len(cfg.MaxWaits)],
			})
			c++
		}
	}
	perm := r.Perm(n) // perm[k] is the customer of Zipf rank k+1
	idle := n / 10
	active := perm[:n-idle]
	var h float64
	for k := range active {
		h += 1 / float64(k+1)
	}
	total := cfg.Load * float64(cfg.Rate) // units per second
	w.idle = idle
	end := cfg.Duration.Seconds()
	// rank[p][c] is customer c's Zipf rank, from 0, in the p-th Shift.
	period := end
	if cfg.Shift > 0 {
		period = cfg.Shift.Seconds()
	}
	rank := make([][]int, int(math.Ceil(end/period)))
	for p := range rank {
		rank[p] = make([]int, n)
		order := active
		if p > 0 {
			order = make([]int, len(active))
			for i, j := range r.Perm(len(active)) {
				order[i] = active[j]
			}
		}
		for k, c := range order {
			rank[p][c] = k
		}
	}
	// rate returns c's requests per second at t.
	rate := func(c int, t float64) float64 {
		k := rank[min(int(t/period), len(rank)-1)][c]
		return total / h / float64(k+1) / float64(w.custs[c].cost)
	}
	// poisson adds c's arrivals from t to until at mult times its rate.
	poisson := func(c int, t, until, mult float64) {
		for t < until {
			stop := min(until, (math.Floor(t/period)+1)*period)
			for t += r.ExpFloat64() / (mult * rate(c, t)); t < stop; t += r.ExpFloat64() / (mult * rate(c, t)) {
				w.arrivals = append(w.arrivals, request{cust: c, at: time.Duration(t * 1e9)})
			}
			t = stop
		}
	}
	for k, c := range active {
		if cfg.Bursty < 1 || k%cfg.Bursty != cfg.Bursty-1 {
			poisson(c, 0, end, 1)
			continue
		}
		w.bursting++
		w.custs[c].bursts = true
		on := r.IntN(4) == 0 // on a quarter of the time
		for t := 0.0; t < end; on = !on {
			length := r.ExpFloat64() * 6
			if on {
				length = r.ExpFloat64() * 2
				poisson(c, t, min(t+length, end), 4)
			}
			t += length
		}
	}
	slices.SortStableFunc(w.arrivals, func(a, b request) int { return cmp.Compare(a.at, b.at) })
	for i := range w.arrivals {
		w.arrivals[i].id = uint64(i + 1)
	}
	return w
}

// fill returns each customer's share of capacity by weighted max-min
// fairness over tenants, each tenant's part split max-min among its
// customers, given what each asks for, and the water level: the share per
// unit of weight of every tenant not satisfied (+Inf if all are).
func fill(custs []customer, ask []float64, capacity float64) ([]float64, float64) {
	type tenant struct {
		weight  float64
		ask     float64
		members []int
	}
	byID := map[int]*tenant{}
	var ts []*tenant
	for c, a := range ask {
		if a <= 0 {
			continue
		}
		t := byID[custs[c].tenant]
		if t == nil {
			t = &tenant{weight: float64(custs[c].weight)}
			byID[custs[c].tenant] = t
			ts = append(ts, t)
		}
		t.ask += a
		t.members = append(t.members, c)
	}
	parts := make([]float64, len(ts))
	asks := make([]float64, len(ts))
	weights := make([]float64, len(ts))
	for i, t := range ts {
		asks[i], weights[i] = t.ask, t.weight
	}
	level := waterFill(asks, weights, capacity, parts)
	shares := make([]float64, len(ask))
	var mine, ones, part []float64
	for i, t := range ts {
		mine, ones = mine[:0], ones[:0]
		for _, c := range t.members {
			mine = append(mine, ask[c])
			ones = append(ones, 1)
		}
		part = append(part[:0], make([]float64, len(mine))...)
		waterFill(mine, ones, parts[i], part)
		for j, c := range t.members {
			shares[c] = part[j]
		}
	}
	return shares, level
}

// waterFill sets got[i] = min(ask[i], L*weight[i]) with L the level at
// which they sum to capacity, or to all asked if that is less, and
// returns L (+Inf if every ask fits).
func waterFill(ask, weight []float64, capacity float64, got []float64) float64 {
	idx := make([]int, len(ask))
	var wsum float64
	for i := range idx {
		idx[i] = i
		wsum += weight[i]
	}
	slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(ask[a]/weight[a], ask[b]/weight[b]) })
	left := capacity
	for j, i := range idx {
		if ask[i]*wsum <= left*weight[i] {
			got[i] = ask[i]
			left -= ask[i]
			wsum -= weight[i]
			continue
		}
		level := left / wsum
		for _, i := range idx[j:] {
			got[i] = level * weight[i]
		}
		return level
	}
	return math.Inf(1)
}

// byTenant returns the sums of v over each tenant's customers.
func byTenant(custs []customer, v []float64) []float64 {
	out := make([]float64, custs[len(custs)-1].tenant+1)
	for c, x := range v {
		out[custs[c].tenant] += x
	}
	return out
}

// jain returns Jain's index over x_i = served_i / shares_i of the
// customers that offered anything, and the least x_i.
func jain(served, offered, shares []float64) (index, worst float64) {
	var sum, sq float64
	n := 0
	worst = math.Inf(1)
	for i, s := range shares {
		if offered[i] == 0 || s == 0 {
			continue
		}
		x := served[i] / s
		sum += x
		sq += x * x
		n++
		worst = min(worst, x)
	}
	if n > 0 && sq > 0 {
		index = sum * sum / (float64(n) * sq)
	}
	return index, worst
}

func measure(name string, cfg Config, custs []customer, reqs []request, offered, shares []float64, level float64, gps []float64) Result {
	res := Result{Strategy: name}
	secs := int(cfg.Duration / time.Second)
	arrived := make([]int64, secs+1)
	granted := make([]int64, secs+1)
	servedBy := make([]float64, len(offered))
	type grant struct {
		at   time.Duration
		cost int64
	}
	var grants []grant
	var light, heavy []time.Duration
	// Light: a steady customer asking, in every Shift of demand (the run,
	// if demand does not move), under half the share it would have if
	// heavy then (lightCustomers); heavy: asking more than its share over
	// the run.
	lights := lightCustomers(cfg, custs, reqs)
	isLight := func(c int) bool { return lights[c] }
	isHeavy := func(c int) bool { return offered[c] > shares[c]+1e-9 }
	classes := classesOf(cfg, custs, isLight, isHeavy)
	for _, r := range reqs {
		cost := custs[r.cust].cost
		arrived[r.at/time.Second] += cost
		for _, k := range classes.of[r.cust] {
			classes.list[k].offered++
		}
		switch r.state {
		case served:
			res.Served++
			granted[r.granted/time.Second] += cost
			servedBy[r.cust] += float64(cost)
			grants = append(grants, grant{r.granted, cost})
			if isLight(r.cust) {
				light = append(light, r.granted-r.at)
			} else if isHeavy(r.cust) {
				heavy = append(heavy, r.granted-r.at)
			}
			for _, k := range classes.of[r.cust] {
				classes.list[k].waits = append(classes.list[k].waits, r.granted-r.at)
			}
		case refused:
			res.Refused++
			for _, k := range classes.of[r.cust] {
				classes.list[k].refused++
			}
		default: // dropped, or still waiting at the end
			res.Dropped++
			for _, k := range classes.of[r.cust] {
				classes.list[k].dropped++
			}
		}
	}
	var busy, used int64
	for k := range secs {
		if granted[k] > cfg.Rate {
			res.WindowsOver++
		}
		if arrived[k] > cfg.Rate {
			busy++
			used += granted[k]
		}
	}
	if busy > 0 {
		res.Utilisation = float64(used) / float64(busy*cfg.Rate)
	}
	slices.SortFunc(grants, func(a, b grant) int { return cmp.Compare(a.at, b.at) })
	var inWindow int64
	for i, lo := 0, 0; i < len(grants); i++ {
		inWindow += grants[i].cost
		for grants[i].at-grants[lo].at >= time.Second {
			inWindow -= grants[lo].cost
			lo++
		}
		res.MaxInWindow = max(res.MaxInWindow, inWindow)
	}
	res.Jain, res.WorstX = jain(byTenant(custs, servedBy), byTenant(custs, offered), byTenant(custs, gps))
	res.JainRun, res.WorstXRun = jain(byTenant(custs, servedBy), byTenant(custs, offered), byTenant(custs, shares))
	res.LightP50ms, res.LightP99ms = percentiles(light)
	res.HeavyP50ms, res.HeavyP99ms = percentiles(heavy)
	for k, cl := range classes.list {
		out := Class{Name: cl.name, WorstX: math.Inf(1)}
		var got, owed float64
		for c, ks := range classes.of {
			if offered[c] == 0 || gps[c] == 0 || !slices.Contains(ks, k) {
				continue
			}
			out.Customers++
			got += servedBy[c]
			owed += gps[c]
			out.WorstX = min(out.WorstX, servedBy[c]/gps[c])
		}
		if out.Customers == 0 {
			continue
		}
		out.Got = got / owed
		if cl.offered > 0 {
			out.Refused = float64(cl.refused) / float64(cl.offered)
			out.Dropped = float64(cl.dropped) / float64(cl.offered)
		}
		out.P50ms, out.P99ms = percentiles(cl.waits)
		res.Classes = append(res.Classes, out)
	}
	// Light and heavy first, then the rest by name, whatever the order
	// the customers came in.
	rank := map[string]int{"light": 0, "middle": 1, "heavy": 2}
	order := func(n string) int {
		if r, ok := rank[n]; ok {
			return r
		}
		return 3
	}
	slices.SortFunc(res.Classes, func(a, b Class) int {
		return cmp.Or(cmp.Compare(order(a.Name), order(b.Name)), cmp.Compare(a.Name, b.Name))
	})
	return res
}

// lightCustomers reports which customers are light: steady (not
// bursting) and asking, in every period of cfg.Shift in which they ask
// anything (the whole run if demand does not move), at most half the
// share they would have if heavy in it, their tenant's part at that
// period's water level split evenly over its keys. Demand that moves
// makes a customer light over the run heavy for a period, and its
// requests then wait as a heavy customer's do.
func lightCustomers(cfg Config, custs []customer, reqs []request) []bool {
	period := cfg.Duration
	if cfg.Shift > 0 {
		period = cfg.Shift
	}
	n := int((cfg.Duration + period - 1) / period)
	asked := make([][]float64, n)
	for p := range asked {
		asked[p] = make([]float64, len(custs))
	}
	for _, r := range reqs {
		asked[min(int(r.at/period), n-1)][r.cust] += float64(custs[r.cust].cost)
	}
	keys := map[int]float64{}
	for _, cu := range custs {
		keys[cu.tenant]++
	}
	light := make([]bool, len(custs))
	for c, cu := range custs {
		light[c] = !cu.bursts
	}
	for p, a := range asked {
		d := min(period, cfg.Duration-time.Duration(p)*period)
		_, level := fill(custs, a, float64(cfg.Rate)*d.Seconds())
		for c, cu := range custs {
			if a[c] > 0.5*level*float64(cu.weight)/keys[cu.tenant] {
				light[c] = false
			}
		}
	}
	return light
}

// classSet is the classes of customer a workload has, and the classes
// each customer is in.
type classSet struct {
	list []*classAcc
	of   [][]int // of[c]: indices in list
}

type classAcc struct {
	name                      string
	offered, refused, dropped int64
	waits                     []time.Duration
}

// classesOf returns the classes of cfg's customers: light, heavy and the
// rest (near their share, or bursting), and each weight, key count, cost
// and maximum wait when the mix has more than one.
func classesOf(cfg Config, custs []customer, isLight, isHeavy func(int) bool) classSet {
	cs := classSet{of: make([][]int, len(custs))}
	index := map[string]int{}
	add := func(c int, name string) {
		k, ok := index[name]
		if !ok {
			k = len(cs.list)
			index[name] = k
			cs.list = append(cs.list, &classAcc{name: name})
		}
		cs.of[c] = append(cs.of[c], k)
	}
	keys := map[int]int{} // customers per tenant
	for _, cu := range custs {
		keys[cu.tenant]++
	}
	distinct := func(n int, at func(int) string) bool {
		seen := map[string]bool{}
		for i := range n {
			seen[at(i)] = true
		}
		return len(seen) > 1
	}
	byWeight := distinct(len(cfg.Weights), func(i int) string { return fmt.Sprint(cfg.Weights[i]) })
	byKeys := distinct(len(cfg.Keys), func(i int) string { return fmt.Sprint(cfg.Keys[i]) })
	byCost := distinct(len(cfg.Costs), func(i int) string { return fmt.Sprint(cfg.Costs[i]) })
	byWait := distinct(len(cfg.MaxWaits), func(i int) string { return cfg.MaxWaits[i].String() })
	for c, cu := range custs {
		switch {
		case isLight(c):
			add(c, "light")
		case isHeavy(c):
			add(c, "heavy")
		default:
			add(c, "middle")
		}
		if byWeight {
			add(c, fmt.Sprintf("weight %d", cu.weight))
		}
		if byKeys {
			add(c, fmt.Sprintf("tenant of %d keys", keys[cu.tenant]))
		}
		if byCost {
			add(c, fmt.Sprintf("cost %d", cu.cost))
		}
		if byWait {
			add(c, fmt.Sprintf("wait %v", cu.maxWait))
		}
	}
	return cs
}

// percentiles returns the 50th and 99th percentiles of d in milliseconds.
func percentiles(d []time.Duration) (p50, p99 float64) {
	if len(d) == 0 {
		return 0, 0
	}
	slices.Sort(d)
	at := func(p float64) float64 {
		return float64(d[int(p*float64(len(d)-1))]) / 1e6
	}
	return at(0.50), at(0.99)
}

// bucket is the token bucket the naive strategies put in front of the
// upstream: Rate tokens, refilled at Rate per second. It admits up to
// twice the quota in a sliding second.
type bucket struct {
	t, tau, tat time.Duration
}

func newBucket(rate int64, per time.Duration, burst int64) bucket {
	t := per / time.Duration(rate)
	return bucket{t: t, tau: time.Duration(burst) * t}
}

// readyAt returns when n units may go, at or after now.
func (b *bucket) readyAt(now time.Duration, n int64) time.Duration {
	return max(now, b.tat+time.Duration(n)*b.t-b.tau)
}

func (b *bucket) take(now time.Duration, n int64) {
	b.tat = max(b.tat, now) + time.Duration(n)*b.t
}

// fcfs is one global queue in arrival order behind the bucket.
type fcfs struct {
	label string
	custs []customer
	b     bucket
	q     []*request
}

func newFCFS(cfg Config, custs []customer) *fcfs {
	return &fcfs{label: "fcfs", custs: custs, b: newBucket(cfg.Rate, time.Second, cfg.Rate)}
}

func (s *fcfs) name() string { return s.label }

func (s *fcfs) arrive(now time.Duration, r *request) { s.q = append(s.q, r) }

func (s *fcfs) next(now time.Duration) ([]*request, time.Duration) {
	var grants []*request
	for len(s.q) > 0 {
		r := s.q[0]
		cu := s.custs[r.cust]
		if now-r.at > cu.maxWait {
			r.state = dropped
			s.q = s.q[1:]
			continue
		}
		if at := s.b.readyAt(now, cu.cost); at > now {
			return grants, at
		}
		s.b.take(now, cu.cost)
		grants = append(grants, r)
		s.q = s.q[1:]
	}
	return grants, -1
}

// capped is FCFS with a cap per customer: each customer's own bucket,
// refilled at Rate/Customers units per second and as deep as its costliest
// request, refuses at arrival (429) what exceeds it.
type capped struct {
	fcfs
	own []bucket
}

func newCapped(cfg Config, custs []customer) *capped {
	s := &capped{fcfs: *newFCFS(cfg, custs), own: make([]bucket, cfg.Customers)}
	s.label = "cap"
	for i := range s.own {
		s.own[i] = newBucket(cfg.Rate, time.Second*time.Duration(cfg.Customers), custs[i].cost)
	}
	return s
}

func (s *capped) arrive(now time.Duration, r *request) {
	b := &s.own[r.cust]
	cost := s.custs[r.cust].cost
	if b.readyAt(now, cost) > now {
		r.state = refused
		return
	}
	b.take(now, cost)
	s.q = append(s.q, r)
}

// priority is seed 004's proposal: the waiting request of the customer
// with the least use (in cost units) in the last second goes first (ties:
// earliest arrival), behind the bucket.
type priority struct {
	custs  []customer
	b      bucket
	queues [][]*request
	used   [][]grantAt // each customer's grants in the last second
	sums   []int64     // the units of used
}

type grantAt struct {
	at   time.Duration
	cost int64
}

func newPriority(cfg Config, custs []customer) *priority {
	return &priority{
		custs:  custs,
		b:      newBucket(cfg.Rate, time.Second, cfg.Rate),
		queues: make([][]*request, cfg.Customers),
		used:   make([][]grantAt, cfg.Customers),
		sums:   make([]int64, cfg.Customers),
	}
}

func (s *priority) name() string { return "priority" }

func (s *priority) arrive(now time.Duration, r *request) {
	s.queues[r.cust] = append(s.queues[r.cust], r)
}

func (s *priority) next(now time.Duration) ([]*request, time.Duration) {
	var grants []*request
	for {
		best := -1
		for c, q := range s.queues {
			for len(q) > 0 && now-q[0].at > s.custs[c].maxWait {
				q[0].state = dropped
				q = q[1:]
			}
			s.queues[c] = q
			u := s.used[c]
			for len(u) > 0 && now-u[0].at >= time.Second {
				s.sums[c] -= u[0].cost
				u = u[1:]
			}
			s.used[c] = u
			if len(q) == 0 {
				continue
			}
			if best < 0 || s.sums[c] < s.sums[best] || s.sums[c] == s.sums[best] && q[0].at < s.queues[best][0].at {
				best = c
			}
		}
		if best < 0 {
			return grants, -1
		}
		cost := s.custs[best].cost
		if at := s.b.readyAt(now, cost); at > now {
			return grants, at
		}
		s.b.take(now, cost)
		grants = append(grants, s.queues[best][0])
		s.queues[best] = s.queues[best][1:]
		s.used[best] = append(s.used[best], grantAt{now, cost})
		s.sums[best] += cost
	}
}

// sluice is the fairshare.Scheduler, refusing at arrival a request whose
// estimated wait exceeds its maximum wait and withdrawing one that waits
// longer. A customer's tenant is its group, of the tenant's weight.
type sluice struct {
	custs []customer
	s     *fairshare.Scheduler
	byID  map[uint64]*request
	// waiting holds the requests waiting, a queue for each maximum wait
	// in arrival order, so in deadline order; waits lists the maximum
	// waits in order.
	waiting map[time.Duration][]*request
	waits   []time.Duration
}

var epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// schedulerConfig is the configuration of every Sluice node's scheduler,
// and of the upstream the nodes of a cluster share.
func schedulerConfig(cfg Config) fairshare.Config {
	return fairshare.Config{Rate: cfg.Rate, Window: time.Second, MaxQueue: 10_000}
}

func newSluice(cfg Config, custs []customer) (*sluice, error) {
	s, err := fairshare.NewScheduler(schedulerConfig(cfg))
	if err != nil {
		return nil, err
	}
	waits := slices.Clone(cfg.MaxWaits)
	slices.Sort(waits)
	return &sluice{custs: custs, s: s, byID: make(map[uint64]*request), waiting: make(map[time.Duration][]*request), waits: slices.Compact(waits)}, nil
}

func (s *sluice) name() string { return "sluice" }

func (s *sluice) arrive(now time.Duration, r *request) {
	cu := s.custs[r.cust]
	req := fairshare.Request{
		ID: r.id, Customer: fairshare.Customer(fmt.Sprint(r.cust)), Group: fmt.Sprint("t", cu.tenant),
		Weight: cu.weight, Cost: cu.cost,
	}
	if err := s.s.Admit(epoch.Add(now), req, cu.maxWait); err != nil {
		r.state = refused
		return
	}
	s.byID[r.id] = r
	s.waiting[cu.maxWait] = append(s.waiting[cu.maxWait], r)
}

func (s *sluice) next(now time.Duration) ([]*request, time.Duration) {
	s.expire(now)
	gs, wake := s.s.Next(epoch.Add(now))
	grants := make([]*request, 0, len(gs))
	for _, g := range gs {
		grants = append(grants, s.byID[g.ID])
		delete(s.byID, g.ID)
	}
	if wake.IsZero() {
		return grants, -1
	}
	return grants, wake.Sub(epoch)
}

// expire withdraws the requests that waited longer than their maximum
// wait, and marks them dropped.
func (s *sluice) expire(now time.Duration) {
	for _, w := range s.waits {
		q := s.waiting[w]
		for len(q) > 0 && now-q[0].at > w {
			r := q[0]
			q = q[1:]
			if s.s.Cancel(r.id) {
				r.state = dropped
				delete(s.byID, r.id)
			}
		}
		s.waiting[w] = q
	}
}
