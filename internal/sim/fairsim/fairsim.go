// Package fairsim simulates customers sharing one upstream quota under four
// strategies, on a virtual clock, deterministically from a seed: first come
// first served, a per-customer cap, seed 004's priority queue ordered by
// each customer's use in the last second, and Sluice's fairshare.Scheduler.
//
// The workload: Customers customers, a tenth idle, the rest with Poisson
// arrivals of one unit each whose mean rates follow Zipf's law (the
// customer of rank k asks for c/k per second; ranks shuffled by the seed)
// and sum to Load times the quota. Every sixth active customer bursts: on
// for 2 s on average at four times its mean rate, off for 6 s on average.
// Every strategy sees the same arrivals. A request still waiting MaxWait
// after it arrived is dropped and counts as not served; Sluice also refuses
// at once a request whose estimated fair wait exceeds MaxWait, as its
// Upstream does.
//
// Fairness is measured against weighted max-min fairness with equal
// weights, x_i = served_i / share_i, and Jain's index (sum x)^2 / (n sum
// x^2) taken over the customers that offered anything, for two kinds of
// share. Moment by moment (Jain, WorstX): what generalised processor
// sharing, the fluid ideal of max-min fairness at every instant, serves
// each customer from the same arrivals with the same maximum wait (gps.go).
// Over the whole run (JainRun, WorstXRun): the capacity (Rate times
// Duration) water-filled over all a customer offered, which a bursting
// customer can only reach if given more than the fair level while it
// bursts, at the expense of the customers asking steadily.
//
// With Nodes above 1, Sluice runs as a cluster sharing the upstream, as
// its nodes share one in production: a sticky load balancer sends customer
// c to node c % Nodes, and each node's Scheduler releases at the share a
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
	MaxWait   time.Duration // default 2s
	Nodes     int           // Sluice nodes sharing the quota, 1 to 16; default 1
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
	}
	return nil
}

// Report is a simulation's workload and each strategy's result.
type Report struct {
	Seed       uint64   `json:"seed"`
	Customers  int      `json:"customers"`
	Idle       int      `json:"idle"`
	Bursting   int      `json:"bursting"`
	DurationS  float64  `json:"duration_s"`
	Rate       int64    `json:"rate_per_s"`
	Offered    int64    `json:"offered"`    // units that arrived
	Capacity   int64    `json:"capacity"`   // Rate times Duration
	FairShare  float64  `json:"fair_share"` // the water level: units per customer not satisfied
	Heavy      int      `json:"heavy"`      // customers that offered more than the level
	MaxWaitS   float64  `json:"max_wait_s"` // waits beyond it are dropped
	Nodes      int      `json:"nodes"`      // Sluice nodes sharing the quota
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
	Served     int64   `json:"served"`
	Refused    int64   `json:"refused"` // at arrival (429)
	Dropped    int64   `json:"dropped"` // waited past MaxWait
	LightP50ms float64 `json:"light_p50_ms"`
	LightP99ms float64 `json:"light_p99_ms"`
	HeavyP50ms float64 `json:"heavy_p50_ms"`
	HeavyP99ms float64 `json:"heavy_p99_ms"`
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

// Run simulates cfg under the four strategies.
func Run(cfg Config) (Report, error) {
	if err := cfg.Validate(); err != nil {
		return Report{}, err
	}
	cfg = cfg.withDefaults()
	w := newWorkload(cfg)
	rep := Report{
		Seed: cfg.Seed, Customers: cfg.Customers, Idle: w.idle, Bursting: w.bursting,
		DurationS: cfg.Duration.Seconds(), Rate: cfg.Rate, Offered: int64(len(w.arrivals)),
		Capacity: cfg.Rate * int64(cfg.Duration/time.Second), MaxWaitS: cfg.MaxWait.Seconds(),
		Nodes: cfg.Nodes,
	}
	offered := make([]int64, cfg.Customers)
	for _, a := range w.arrivals {
		offered[a.cust]++
	}
	shares, level := waterFill(offered, float64(rep.Capacity))
	gps := gpsShares(w.arrivals, cfg)
	rep.FairShare = level
	for _, o := range offered {
		if float64(o) > level {
			rep.Heavy++
		}
	}
	sluice, done, err := newSluiceStrategy(cfg)
	if err != nil {
		return Report{}, err
	}
	for _, s := range []strategy{newFCFS(cfg), newCapped(cfg), newPriority(cfg), sluice} {
		reqs := simulate(s, w.arrivals, cfg.Duration)
		rep.Strategies = append(rep.Strategies, measure(s.name(), cfg, reqs, offered, shares, gps))
	}
	if err := done(); err != nil {
		return Report{}, err
	}
	return rep, nil
}

// newSluiceStrategy returns Sluice on one node, or on cfg.Nodes sharing
// the upstream, and a function to call once it has run, which releases
// what it holds and returns any error its ledger met.
func newSluiceStrategy(cfg Config) (strategy, func() error, error) {
	if cfg.Nodes == 1 {
		s, err := newSluice(cfg)
		return s, func() error { return nil }, err
	}
	c, err := newCluster(cfg)
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

// workload is the arrivals of a simulation, in time order.
type workload struct {
	arrivals []request
	idle     int
	bursting int
}

func newWorkload(cfg Config) workload {
	r := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x5eed_f00d))
	n := cfg.Customers
	perm := r.Perm(n) // perm[k] is the customer of Zipf rank k+1
	idle := n / 10
	active := perm[:n-idle]
	var h float64
	for k := range active {
		h += 1 / float64(k+1)
	}
	total := cfg.Load * float64(cfg.Rate) // units per second
	var w workload
	w.idle = idle
	end := cfg.Duration.Seconds()
	for k, c := range active {
		rate := total / h / float64(k+1)
		burst := k%6 == 5
		var t float64
		if !burst {
			for t += r.ExpFloat64() / rate; t < end; t += r.ExpFloat64() / rate {
				w.arrivals = append(w.arrivals, request{cust: c, at: time.Duration(t * 1e9)})
			}
			continue
		}
		w.bursting++
		on := r.IntN(4) == 0 // on a quarter of the time
		for t < end {
			length := r.ExpFloat64() * 6
			if on {
				length = r.ExpFloat64() * 2
				for u := t + r.ExpFloat64()/(4*rate); u < t+length && u < end; u += r.ExpFloat64() / (4 * rate) {
					w.arrivals = append(w.arrivals, request{cust: c, at: time.Duration(u * 1e9)})
				}
			}
			t += length
			on = !on
		}
	}
	slices.SortStableFunc(w.arrivals, func(a, b request) int { return cmp.Compare(a.at, b.at) })
	for i := range w.arrivals {
		w.arrivals[i].id = uint64(i + 1)
	}
	return w
}

// waterFill returns each customer's max-min fair share of capacity given
// what it offered, and the water level: the share of every customer that
// offered more.
func waterFill(offered []int64, capacity float64) ([]float64, float64) {
	idx := make([]int, len(offered))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(offered[a], offered[b]) })
	shares := make([]float64, len(offered))
	left := capacity
	level := math.Inf(1)
	for j, i := range idx {
		n := float64(len(idx) - j)
		if d := float64(offered[i]); d*n <= left {
			shares[i] = d
			left -= d
			continue
		}
		level = left / n
		for _, i := range idx[j:] {
			shares[i] = level
		}
		break
	}
	return shares, level
}

// jain returns Jain's index over x_i = served_i / shares_i of the
// customers that offered anything, and the least x_i.
func jain(served, offered []int64, shares []float64) (index, worst float64) {
	var sum, sq float64
	n := 0
	worst = math.Inf(1)
	for i, s := range shares {
		if offered[i] == 0 || s == 0 {
			continue
		}
		x := float64(served[i]) / s
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

func measure(name string, cfg Config, reqs []request, offered []int64, shares, gps []float64) Result {
	res := Result{Strategy: name}
	secs := int(cfg.Duration / time.Second)
	arrived := make([]int64, secs+1)
	granted := make([]int64, secs+1)
	servedBy := make([]int64, len(offered))
	var times []time.Duration
	var light, heavy []time.Duration
	for _, r := range reqs {
		arrived[r.at/time.Second]++
		switch r.state {
		case served:
			res.Served++
			granted[r.granted/time.Second]++
			servedBy[r.cust]++
			times = append(times, r.granted)
			if float64(offered[r.cust]) <= shares[r.cust] {
				light = append(light, r.granted-r.at)
			} else {
				heavy = append(heavy, r.granted-r.at)
			}
		case refused:
			res.Refused++
		default: // dropped, or still waiting at the end
			res.Dropped++
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
	slices.Sort(times)
	for i, lo := 0, 0; i < len(times); i++ {
		for times[i]-times[lo] >= time.Second {
			lo++
		}
		res.MaxInWindow = max(res.MaxInWindow, int64(i-lo+1))
	}
	res.Jain, res.WorstX = jain(servedBy, offered, gps)
	res.JainRun, res.WorstXRun = jain(servedBy, offered, shares)
	res.LightP50ms, res.LightP99ms = percentiles(light)
	res.HeavyP50ms, res.HeavyP99ms = percentiles(heavy)
	return res
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

// readyAt returns when one unit may go, at or after now.
func (b *bucket) readyAt(now time.Duration) time.Duration {
	return max(now, b.tat+b.t-b.tau)
}

func (b *bucket) take(now time.Duration) {
	b.tat = max(b.tat, now) + b.t
}

// fcfs is one global queue in arrival order behind the bucket.
type fcfs struct {
	label   string
	maxWait time.Duration
	b       bucket
	q       []*request
}

func newFCFS(cfg Config) *fcfs {
	return &fcfs{label: "fcfs", maxWait: cfg.MaxWait, b: newBucket(cfg.Rate, time.Second, cfg.Rate)}
}

func (s *fcfs) name() string { return s.label }

func (s *fcfs) arrive(now time.Duration, r *request) { s.q = append(s.q, r) }

func (s *fcfs) next(now time.Duration) ([]*request, time.Duration) {
	var grants []*request
	for len(s.q) > 0 {
		r := s.q[0]
		if now-r.at > s.maxWait {
			r.state = dropped
			s.q = s.q[1:]
			continue
		}
		if at := s.b.readyAt(now); at > now {
			return grants, at
		}
		s.b.take(now)
		grants = append(grants, r)
		s.q = s.q[1:]
	}
	return grants, -1
}

// capped is FCFS with a cap per customer: each customer's own bucket of
// one unit refilled at Rate/Customers per second refuses at arrival (429)
// what exceeds it.
type capped struct {
	fcfs
	own []bucket
}

func newCapped(cfg Config) *capped {
	s := &capped{fcfs: *newFCFS(cfg), own: make([]bucket, cfg.Customers)}
	s.label = "cap"
	for i := range s.own {
		s.own[i] = newBucket(cfg.Rate, time.Second*time.Duration(cfg.Customers), 1)
	}
	return s
}

func (s *capped) arrive(now time.Duration, r *request) {
	b := &s.own[r.cust]
	if b.readyAt(now) > now {
		r.state = refused
		return
	}
	b.take(now)
	s.q = append(s.q, r)
}

// priority is seed 004's proposal: the waiting request of the customer
// with the least use in the last second goes first (ties: earliest
// arrival), behind the bucket.
type priority struct {
	maxWait time.Duration
	b       bucket
	queues  [][]*request
	used    [][]time.Duration // each customer's grants in the last second
}

func newPriority(cfg Config) *priority {
	return &priority{
		maxWait: cfg.MaxWait,
		b:       newBucket(cfg.Rate, time.Second, cfg.Rate),
		queues:  make([][]*request, cfg.Customers),
		used:    make([][]time.Duration, cfg.Customers),
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
			for len(q) > 0 && now-q[0].at > s.maxWait {
				q[0].state = dropped
				q = q[1:]
			}
			s.queues[c] = q
			u := s.used[c]
			for len(u) > 0 && now-u[0] >= time.Second {
				u = u[1:]
			}
			s.used[c] = u
			if len(q) == 0 {
				continue
			}
			if best < 0 || len(u) < len(s.used[best]) || len(u) == len(s.used[best]) && q[0].at < s.queues[best][0].at {
				best = c
			}
		}
		if best < 0 {
			return grants, -1
		}
		if at := s.b.readyAt(now); at > now {
			return grants, at
		}
		s.b.take(now)
		grants = append(grants, s.queues[best][0])
		s.queues[best] = s.queues[best][1:]
		s.used[best] = append(s.used[best], now)
	}
}

// sluice is the fairshare.Scheduler, refusing at arrival a request whose
// estimated wait exceeds MaxWait and withdrawing one that waits longer.
type sluice struct {
	maxWait time.Duration
	s       *fairshare.Scheduler
	byID    map[uint64]*request
	waiting []*request // in arrival order, so in deadline order
}

var epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// schedulerConfig is the configuration of every Sluice node's scheduler,
// and of the upstream the nodes of a cluster share.
func schedulerConfig(cfg Config) fairshare.Config {
	return fairshare.Config{Rate: cfg.Rate, Window: time.Second, MaxQueue: 10_000}
}

func newSluice(cfg Config) (*sluice, error) {
	s, err := fairshare.NewScheduler(schedulerConfig(cfg))
	if err != nil {
		return nil, err
	}
	return &sluice{maxWait: cfg.MaxWait, s: s, byID: make(map[uint64]*request)}, nil
}

func (s *sluice) name() string { return "sluice" }

func (s *sluice) arrive(now time.Duration, r *request) {
	c := fairshare.Customer(fmt.Sprint(r.cust))
	if err := s.s.Admit(epoch.Add(now), fairshare.Request{ID: r.id, Customer: c, Weight: 1, Cost: 1}, s.maxWait); err != nil {
		r.state = refused
		return
	}
	s.byID[r.id] = r
	s.waiting = append(s.waiting, r)
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

// expire withdraws the requests that waited longer than MaxWait, and marks
// them dropped.
func (s *sluice) expire(now time.Duration) {
	for len(s.waiting) > 0 && now-s.waiting[0].at > s.maxWait {
		r := s.waiting[0]
		s.waiting = s.waiting[1:]
		if s.s.Cancel(r.id) {
			r.state = dropped
			delete(s.byID, r.id)
		}
	}
}
