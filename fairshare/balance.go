package fairshare

import (
	"cmp"
	"context"
	"errors"
	"math"
	"slices"
	"time"
)

// Several nodes share one upstream by splitting its rate: each node holds
// a share in a ledger all of them reach (a store), and its scheduler
// releases at that rate. A Balancer sizes one node's share, about once a
// second (Step):
//
//  1. It reads its groups' demand (Scheduler.Demands) and, with the sum the
//     other nodes published last, finds the fair level L of weighted max-min
//     fairness: the rate per unit of weight at which the groups asking less
//     than their weight times L (light) get all they ask, the others
//     (heavy) get their weight times L, and the whole is the upstream's
//     rate. It publishes its light demand, its heavy weight and what its
//     rate lacks of its light demand (Demand.Short), and reads the sums
//     over the live nodes back.
//  2. Its share is then its light demand plus its heavy weight times the
//     level the sums give. If no node has a heavy group, what is left over
//     is split evenly among the nodes, as room for new demand. A node whose
//     requests all cost g or more plans its share in whole steps of g,
//     fair on average, and publishes the heavy weight that gives it that
//     share (plan).
//  3. It claims that share in the ledger, which grants it only if the
//     shares of all nodes then sum to at most the rate (a conditional
//     write); if not, it claims what is free. A node with heavy groups
//     then takes its part of what is still free beyond what the others'
//     light groups lack (spare), until its next Step. A claim lives for
//     the ledger's TTL and each Step renews it.
//
// Between Steps a node may claim again (Reclaim, one write): to give back
// what it held for releases that have left the window (Share.Retry), or
// to take what others gave back.
//
// Never over the rate, while rebalancing too: a node that shrinks lowers
// its own rate at once, and its claim still covers what it released in
// the last Window, which counts in every window to come that holds it; its
// pacer lets no such window hold more than that or the new rate. A node
// grows its rate only once its claim is granted. So each node's releases
// in any window are at most a claim it held during that window, and the
// claims in the ledger never sum to more than the rate: no window sees
// more than the rate. A node that cannot renew its claim stops releasing
// one Window (and a margin for clock error) before the claim may lapse,
// so a node that takes the units when it does cannot overlap it either.
// The bound is by the times on the nodes' clocks, which must be the times
// their releases are stamped with (an Upstream's wall clock, see
// wallClock): it holds while the nodes' clocks agree, and through a lapse
// while they agree to within the margin.
//
// A dead node's share returns when its claim lapses, at most TTL after its
// last renewal, and the others take it at their next Step: within TTL plus
// one Interval. A new node starts with what is free, and gets its fair
// share as the others shrink: within two Intervals and a Window.
//
// Within a node, its scheduler shares its rate among its customers as on
// one node. A group whose requests reach several nodes is weighed on each
// of them: spread every group's requests evenly over the nodes (round
// robin) or send each to one node (by hash), not a mix of the two.

// Demand is what the customers of one node, or of all, ask of an upstream:
// Light is the cost units per Window of the groups asking less than the
// fair level, served in full; Heavy is the weight of the others, which
// share the rest in proportion to their weights.
type Demand struct {
	Light float64
	Heavy float64
	// Short is the cost units per Window a node's share lacks of what it
	// sized at its last step and of its light demand: what its light
	// groups wait for other nodes to give back, which no node takes as
	// spare.
	Short float64
}

// Ledger is where the nodes sharing an upstream publish their demand and
// hold their shares: a store all of them reach. LimiterLedger implements
// it over Sluice's limiter.
type Ledger interface {
	// Publish sets this node's demand and returns the sum over the live
	// nodes, this one's included, and their number.
	Publish(ctx context.Context, now time.Time, d Demand) (sum Demand, nodes int, err error)
	// Claim sets this node's share to units (1/scale cost units per
	// Window) if the shares of all nodes then sum to at most the rate, and
	// reports whether it did, and free, the units no node holds then. A
	// claim lives for TTL unless claimed again.
	Claim(ctx context.Context, now time.Time, units int64) (ok bool, free int64, err error)
	// Leave withdraws this node's demand and share at once.
	Leave(ctx context.Context, now time.Time) error
	// TTL is how long a claim or a demand lives without a renewal.
	TTL() time.Duration
}

// Share is a node's part of an upstream after a Step.
type Share struct {
	// Rate is the rate to release at from now, in 1/scale cost units per
	// Window (Scheduler.SetRate); Expect the rate the node is working
	// toward, which it holds once the other nodes have shrunk.
	Rate, Expect int64
	// Stop is when the node's claim may lapse, less a Window and the
	// margin: nothing may be released from then on unless a later Step
	// renews it.
	Stop time.Time
	// Nodes is the number of live nodes; Level the fair level, in cost
	// units per Window per unit of weight (+Inf: every group gets all it
	// asks).
	Nodes int
	Level float64
	// Retry, if not zero, is when a Reclaim would give back some of what
	// the node holds over its Rate, as what it released leaves the window.
	Retry time.Time
	// Short is the cost units per Window the Rate lacks of the node's
	// light demand and of Expect (Demand.Short): while it is not 0, the
	// node's light groups wait for units other nodes give back, and a
	// Reclaim may get them.
	Short float64
	// Stepped is when the node last stepped (Balancer.Step): claims to
	// grow are timed from it (NextReclaim).
	Stepped time.Time
}

// growAt are the times after its step, in tenths of the interval, at which
// a node whose Rate is under its Expect claims again, to take what other
// nodes gave back. The others shrink at their own steps, spread over the
// interval, and give back what they released only as it leaves the window
// (Share.Retry), often in two claims: one claim a quarter interval on came
// mostly too early, and what was given back after it waited, unused, for
// the node's next step. Claims at three and six tenths take more of it
// (docs/fairshare.md, "Several nodes, one quota"); the second costs one
// more write in a step in which the node stays short.
var growAt = [...]time.Duration{3, 6}

// NextReclaim returns, for a node that resized to sh at now every
// interval, how long until it should claim again before its next step
// (Balancer.Reclaim), and false if it should not: at Retry (at least a
// twentieth of the interval away) to give back what its releases no
// longer need, or, when its Rate is under its Expect, at the next of
// growAt after its step, to take what other nodes gave back (grew says
// whether a claim to grow was scheduled since the step already; it is
// then true). Upstream and the simulation both schedule by it.
func (sh Share) NextReclaim(now time.Time, interval time.Duration, grew bool) (after time.Duration, growing, ok bool) {
	if !sh.Retry.IsZero() {
		return max(sh.Retry.Sub(now), interval/20), grew, true
	}
	if sh.Rate >= sh.Expect {
		return 0, grew, false
	}
	since := time.Duration(0)
	if !sh.Stepped.IsZero() {
		since = now.Sub(sh.Stepped)
	}
	for i, at := range growAt {
		at = at * interval / 10
		if i == 0 && !grew || i > 0 && since < at {
			return max(at-since, interval/20), true, true
		}
	}
	return 0, grew, false
}

// Balancer sizes one node's share of an upstream (see above). It is not
// safe for concurrent use: one goroutine calls Step about every Interval.
type Balancer struct {
	cfg    Config
	ledger Ledger
	margin time.Duration
	sum    Demand // the sum over the nodes last read
	mine   Demand // what this node published last
	nodes  int
	held   int64     // what the ledger holds for this node, if known
	known  bool      // whether held is known
	until  time.Time // when the last granted claim lapses
	rate   int64     // the rate in effect
	// What the last Step found: the share to claim, the fair level and the
	// number of nodes.
	target    int64
	level     float64
	stepNodes int
	stepped   time.Time
	// lowered are the rates in effect before each lowering of the last
	// Window, and when each stops counting: the claim must cover them.
	lowered []lowering
	// grain is the least cost of the node's groups' requests at the last
	// Step, in cost units: the step in which they use its share. carry is
	// what the shares planned in whole grains (plan) gave the node less
	// than its fair share, summed over the Steps, within three grains
	// either way.
	grain   int64
	carry   float64
	planned float64 // the share planned last; -1: none
}

type lowering struct {
	until time.Time
	rate  int64
}

// DefaultInterval is how often an Upstream resizes its share.
const DefaultInterval = time.Second

// DefaultTTL returns the life of a claim for an upstream of window, resized
// every DefaultInterval: a Window and three Intervals, so that a node
// keeps releasing through two failed renewals (it stops a Window and the
// margin before its claim may lapse), and a dead node's share returns
// within the TTL and an Interval: 5 s for a 1 s window.
func DefaultTTL(window time.Duration) time.Duration {
	return window + 3*DefaultInterval
}

// DefaultMargin is the clock error between nodes a Balancer allows for.
const DefaultMargin = 100 * time.Millisecond

// NewBalancer returns a Balancer for an upstream of cfg whose nodes share
// ledger, allowing margin of clock error between them (0: DefaultMargin).
// Its node holds nothing until its first Step.
func NewBalancer(cfg Config, ledger Ledger, margin time.Duration) (*Balancer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if margin <= 0 {
		margin = DefaultMargin
	}
	if ttl := ledger.TTL(); ttl <= cfg.Window+margin {
		return nil, errors.New("fairshare: the ledger's TTL must exceed the Window and the margin")
	}
	return &Balancer{cfg: cfg, ledger: ledger, margin: margin, planned: -1}, nil
}

// Released is what a node released in the Window up to At, in the units
// of Scheduler.SetRate, and when that will have fallen to the rate it was
// asked about, if nothing more goes: Falls, At if it has.
type Released struct {
	At    time.Time
	Units int64
	Falls time.Time
}

// Step publishes the node's demand, sizes its share and claims it, at now
// (taken before the ledger is called), and returns the rate to release at.
// Ledger errors are returned with a share that is still safe to use: a
// rate never above what the node holds, and a Stop before its claim may
// lapse.
//
// A lower rate must take effect before the ledger hears of it: lower is
// called before the claim with the share to apply at once, whose Rate is
// below the rate in effect when the rate falls and the rate in effect
// otherwise. It returns what the node released in the Window up to the
// moment that took effect (Scheduler.Released, about Share.Rate): the
// claim must cover it, since what went out counts in the windows to come,
// until Falls, from which a Reclaim can give back the rest (Share.Retry).
// Nil: the node is taken to have released at the highest rate in effect
// in the last Window.
func (b *Balancer) Step(ctx context.Context, now time.Time, mine []GroupDemand, lower func(Share) Released) (Share, error) {
	others := Demand{Light: max(b.sum.Light-b.mine.Light, 0), Heavy: max(b.sum.Heavy-b.mine.Heavy, 0)}
	level := FairLevel(float64(b.cfg.Rate), others, mine)
	my := split(mine, level)
	b.grain = grain(mine)
	my.Heavy = b.plan(my, others)
	my.Short = b.short()
	sum, nodes, perr := b.ledger.Publish(ctx, now, my)
	if perr == nil {
		b.sum, b.mine, b.nodes = sum, my, nodes
	} else {
		sum, nodes = Demand{Light: others.Light + my.Light, Heavy: others.Heavy + my.Heavy}, max(b.nodes, 1)
	}
	b.target = b.sizeShare(my, sum, nodes)
	b.level = level
	if sum.Heavy > 0 && sum.Light < float64(b.cfg.Rate) {
		b.level = (float64(b.cfg.Rate) - sum.Light) / sum.Heavy
	}
	b.stepNodes = nodes
	b.stepped = now
	sh, cerr := b.claim(ctx, now, lower)
	return sh, errors.Join(perr, cerr)
}

// Reclaim claims the share the last Step sized again, at now, without
// publishing the node's demand: one write to the ledger. A node calls it
// at Share.Retry, when what it released no longer needs the claim it
// holds, and may call it when its Rate is under its Expect, to take what
// other nodes gave back since. lower is as for Step.
func (b *Balancer) Reclaim(ctx context.Context, now time.Time, lower func(Share) Released) (Share, error) {
	return b.claim(ctx, now, lower)
}

// claim claims the target at now (see Step).
func (b *Balancer) claim(ctx context.Context, now time.Time, lower func(Share) Released) (Share, error) {
	target := b.target
	before := b.held
	if !b.known {
		before = 0
	}
	if !b.until.IsZero() && !now.Before(b.until) {
		// The claim lapsed: the ledger holds nothing for this node, which
		// has released nothing since a Window before (Stop).
		b.known, b.rate, b.lowered, b.until = false, 0, nil, time.Time{}
	}
	r := Released{At: now, Units: math.MaxInt64}
	if lower != nil {
		r = lower(Share{Rate: min(target, b.rate), Expect: target, Stop: b.stop(), Nodes: b.stepNodes, Level: b.level})
	}
	if target < b.rate {
		b.setRate(r.At, target)
	}
	hold := b.mustHold(now, r.Units)
	want := max(target, hold)
	ok, free, err := b.ledger.Claim(ctx, now, want)
	if err == nil && !ok {
		// Take what is free. Denied, the claim asked more than it holds
		// and the free units, so target is above what it must hold.
		want = free
		if b.known {
			want += b.held
		}
		want = max(b.usable(min(want, target)), hold)
		ok, _, err = b.ledger.Claim(ctx, now, want)
	}
	if err == nil && ok && want == target && want >= before {
		// Not after a claim that gave units back: those are for the
		// nodes waiting for them.
		var extra int64
		if extra, err = b.spare(ctx, now, want, free); extra > 0 {
			want += extra
			target += extra
		}
	}
	switch {
	case err != nil:
		b.known = false // the claim may or may not have landed
	case ok:
		b.held, b.known, b.until = want, true, now.Add(b.ledger.TTL())
		b.setRate(now, min(target, want))
	}
	sh := Share{Rate: b.rate, Expect: target, Nodes: b.stepNodes, Level: b.level, Short: b.short(), Stepped: b.stepped}
	if err == nil && ok && want > b.rate && r.Falls.After(r.At) {
		sh.Retry = r.Falls
		if half := r.Falls.Sub(r.At) / 2; want-b.rate > 2*b.cfg.scale() && half >= b.cfg.Window/20 {
			// Give back a large excess in two claims, the first when about
			// half of it has left the window (if releases were paced
			// evenly; if not, that claim gives back less): the other
			// nodes get the units it frees sooner.
			sh.Retry = r.At.Add(half)
		}
	}
	if sh.Stop = b.stop(); sh.Stop.IsZero() {
		sh.Rate, sh.Stop = 0, now
	}
	return sh, err
}

// spare claims, beyond the node's share of held units, its part of free,
// the units no node holds, less what the other nodes lack of their shares
// (Demand.Short), and returns what it got: a part in proportion to its
// heavy weight, in whole units, if it has heavy groups. Units are
// free when a node shrank, or the shares rounded down, since the others
// sized theirs; without this they would go unused until the others' next
// steps. The node gives them back at its next step if its share is then
// smaller. One more write, when a whole unit is free.
func (b *Balancer) spare(ctx context.Context, now time.Time, held, free int64) (int64, error) {
	if b.mine.Heavy <= 0 || b.sum.Heavy <= 0 {
		return 0, nil
	}
	sc := b.cfg.scale()
	// What the other nodes lack of their shares is theirs to take back.
	spare := float64(free/sc) - max(b.sum.Short-b.mine.Short, 0)
	g := max(b.grain, 1) // whole grains: a part of one would go unused
	extra := int64(max(spare, 0)*min(b.mine.Heavy/b.sum.Heavy, 1)) / g * g * sc
	if extra <= 0 {
		return 0, nil
	}
	ok, _, err := b.ledger.Claim(ctx, now, held+extra)
	if err != nil || !ok {
		return 0, err
	}
	return extra, nil
}

// short returns the cost units per Window the node's rate lacks of the
// share it sized and of its light demand: what its light groups, served
// first, wait for other nodes to give back. A node short for its heavy
// groups alone takes its part of what is spare like any other.
func (b *Balancer) short() float64 {
	sc := float64(b.cfg.scale())
	if b.planned >= 0 {
		// The others sized their shares to leave this node its plan.
		return max(float64(b.target-b.rate)/sc, 0)
	}
	return max(min(float64(b.target-b.rate)/sc, b.mine.Light-float64(b.rate)/sc), 0)
}

// stop returns when the node must stop releasing, a Window and the margin
// before its claim may lapse; zero if it holds none.
func (b *Balancer) stop() time.Time {
	if b.until.IsZero() {
		return time.Time{}
	}
	return b.until.Add(-b.cfg.Window - b.margin)
}

// Leave withdraws the node's demand and share, at least a Window after its
// last release (the caller waits for that): the end of a graceful stop.
func (b *Balancer) Leave(ctx context.Context, now time.Time) error {
	b.setRate(now, 0)
	b.known, b.held, b.until = false, 0, time.Time{}
	return b.ledger.Leave(ctx, now)
}

// setRate makes rate the rate in effect at now, and remembers a higher
// one it replaces for a Window.
func (b *Balancer) setRate(now time.Time, rate int64) {
	if rate < b.rate {
		b.lowered = append(b.lowered, lowering{now.Add(b.cfg.Window), b.rate})
	}
	b.rate = rate
}

// mustHold returns the least the node's claim must be at now, given what
// it released in the last Window: the rate in effect, or what it
// released if more, which is at most the highest rate in effect during
// the last Window. What went out counts in every window to come that
// holds it, and the pacer lets no window that holds a release of the
// past hold more than it did or the rate (see pacer).
func (b *Balancer) mustHold(now time.Time, released int64) int64 {
	b.lowered = slices.DeleteFunc(b.lowered, func(l lowering) bool { return !now.Before(l.until) })
	h := int64(0)
	for _, l := range b.lowered {
		h = max(h, l.rate)
	}
	return max(b.rate, min(h, released))
}

// sizeShare returns the node's fair share, in scaled units, given its
// demand and the sum over the nodes.
func (b *Balancer) sizeShare(my, sum Demand, nodes int) int64 {
	r := float64(b.cfg.Rate)
	var t float64
	switch {
	case sum.Light >= r:
		// The light demands alone fill the upstream (a stale sum): shrink
		// them alike.
		t = my.Light * r / sum.Light
	case sum.Heavy > 0:
		t = my.Light + my.Heavy*(r-sum.Light)/sum.Heavy
		if g := float64(b.grain); g > 1 {
			t = g * math.Round(t/g) // as planned, unless the others moved
		}
	default:
		t = my.Light + (r-sum.Light)/float64(max(nodes, 1))
	}
	// Whole cost units: a node's releases in a window are whole units,
	// so a share of 14.8 sends 14 in every window, and the nodes' shares
	// must be whole to sum to the rate when the upstream is busy. A node
	// with heavy groups rounds up: the shares then sum to the rate or
	// over it, and the last node to claim takes what is left, at most a
	// unit short per other node. Rounded to the nearest, they summed under
	// the rate half the time, by up to half a unit per node, which nobody
	// used: a part of one unit is under the whole one a spare claim takes.
	// So does a node without heavy groups while other nodes have some: its
	// light groups ask about their average, and with a share rounded down
	// from it their Poisson arrivals waited through a step at times,
	// counted as heavy (Scheduler.Demands), and moved units between the
	// nodes for nothing (on the simulator's many-key shape on three nodes,
	// rounding up took the light customers' 99th percentile wait from 1.22
	// to 1.11 s, mean of seeds 0 to 15). While another node is short
	// (Demand.Short: a node planning in whole grains, or light groups
	// waiting), a node rounds to the nearest, leaving that node the units
	// it waits for; so does a node when no node has heavy groups, as the
	// rest is split evenly.
	sc := b.cfg.scale()
	if sum.Heavy > 0 && sum.Light < r && sum.Short-my.Short < 0.5 {
		return min(max(int64(math.Ceil(t-1e-9))*sc, 0), b.cfg.Rate*sc)
	}
	return min(max(int64(math.Round(t))*sc, 0), b.cfg.Rate*sc)
}

// plan returns the heavy weight the node publishes, given its demand my
// and the others' sum: its heavy groups' weight, unless its groups use
// the share in steps of more than one cost unit (grain, the least cost
// they ask for). A share between two whole grains leaves the part over
// the lower one unused (a node of cost-10 requests sends 20 in every
// window of a share of 25), so such a node plans its share in whole
// grains, the nearer one to its fair share and the carry (so that over
// the Steps it gets its fair share), and publishes the heavy weight that
// gives it that share at the level the sums give: the other nodes then
// size theirs to leave it, and use what it leaves.
func (b *Balancer) plan(my, others Demand) float64 {
	r, g := float64(b.cfg.Rate), float64(b.grain)
	free := r - others.Light - my.Light // what the heavy groups share
	if b.grain <= 1 || my.Heavy <= 0 || others.Heavy <= 0 || free < g {
		b.carry, b.planned = 0, -1
		return my.Heavy
	}
	fair := my.Light + my.Heavy*free/(others.Heavy+my.Heavy)
	// Keep the share planned last while the carry stays within two
	// grains: every change of plan moves units between nodes, which
	// takes them a second or two, so the node changes it every few Steps
	// rather than at each.
	share := b.planned
	if share < 0 || math.Abs(fair-share) >= g {
		share = g * math.Round(fair/g)
	}
	switch c := b.carry + fair - share; {
	case c > 2*g:
		share += g
	case c < -2*g:
		share -= g
	}
	share = min(max(share, g*math.Ceil(my.Light/g)), g*math.Floor((r-others.Light)/g))
	b.carry = max(min(b.carry+fair-share, 3*g), -3*g)
	b.planned = share
	units := share - my.Light // the heavy groups' part
	if free-units < 1e-9 || units < 0 {
		return my.Heavy
	}
	return units * others.Heavy / (free - units)
}

// grain returns the least cost of the groups' requests, 1 if one's is
// unknown.
func grain(groups []GroupDemand) int64 {
	g := int64(0)
	for _, d := range groups {
		if d.Cost < 1 {
			return 1
		}
		if g == 0 || d.Cost < g {
			g = d.Cost
		}
	}
	return max(g, 1)
}

// usable returns the most of units, in the ledger's units, that the
// node's groups can use: all of them, or on a node whose requests all
// cost a grain or more, whole grains.
func (b *Balancer) usable(units int64) int64 {
	g := max(b.grain, 1) * b.cfg.scale()
	return units / g * g
}

// FairLevel returns the fair level L of weighted max-min fairness for a
// node: the rate per unit of weight at which others.Light +
// others.Heavy*L + sum over its groups of min(rate_g, weight_g*L) is the
// upstream's rate, or +Inf if every group gets all it asks.
func FairLevel(rate float64, others Demand, mine []GroupDemand) float64 {
	gs := slices.Clone(mine)
	slices.SortFunc(gs, func(a, b GroupDemand) int {
		return cmp.Compare(perWeight(a), perWeight(b))
	})
	light, heavy := others.Light, others.Heavy
	for _, g := range gs {
		heavy += float64(g.Weight)
	}
	for _, g := range gs {
		if l := (rate - light) / heavy; l <= perWeight(g) {
			return max(l, 0)
		}
		light += g.Rate
		heavy -= float64(g.Weight)
	}
	if heavy > 1e-9 {
		return max((rate-light)/heavy, 0)
	}
	if light > rate {
		return 0 // the light demands alone are over the rate: none gets all
	}
	return math.Inf(1)
}

// perWeight returns g's demand per unit of weight: +Inf if it is
// backlogged, which makes it heavy at any level, 0 if it asked one request
// (GroupDemand.Once), which makes it light at any level.
//
// A group that asked one request, of cost c, in the node's memory of
// demand (a customer sending a costly request every few tens of seconds)
// asks c over that memory: its rate is c over it, and it is light. Its
// rate over the run is lower still, so max-min fairness serves it whole,
// as the fluid ideal does (a request begun is owed whole). Taken for heavy
// when c over the memory is above the level, it was given its weight
// times the level for the memory's steps, less than c, and the request,
// which goes at once, was paid for by its node's other groups.
func perWeight(g GroupDemand) float64 {
	switch {
	case g.Once:
		return 0
	case g.Backlogged:
		return math.Inf(1)
	}
	return g.Rate / float64(g.Weight)
}

// split returns the light demand and the heavy weight of groups at level.
func split(groups []GroupDemand, level float64) Demand {
	var d Demand
	for _, g := range groups {
		if g.Once || !g.Backlogged && g.Rate <= float64(g.Weight)*level {
			d.Light += g.Rate
		} else {
			d.Heavy += float64(g.Weight)
		}
	}
	return d
}
