package dynamostore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sluicehq/sluice"
)

// Multi-region mode (Options.Region): the table is a DynamoDB global
// table, replicated between regions with a lag, each item's last writer
// winning, and conditions checked against the local replica only. So no
// item is written by two regions:
//
//   - Every counter is one item per (key, region), written only by its
//     region's nodes (sluice.Key.Region), with the exact machinery of one
//     region: the conditions hold among the region's nodes.
//   - A policy of ScopeRegional counts in each region apart, with its
//     limit in each.
//   - A policy of ScopeGlobal splits its limit into allotments, one per
//     region, and each region decides against its own (escrow): no
//     decision waits on another region. Each region starts with an even
//     split (base). For fixed and sliding windows the regions rebalance
//     by demand (below); token buckets, quotas and concurrency keep the
//     even split.
//
// Rebalancing: each region has one allotment item per key (pk: the key's
// counter pk without a region, sk: "a#" and the region), written only by
// that region's nodes, conditioned on its version. It holds the region's
// demand (hits asked per window) and the units it gave each other region:
// an effective total and a pending part that takes effect at a window's
// start (from). A region's allotment in a window is its base, less what
// it gave, plus what the others gave it, counting pending gifts from
// their window on. A node reads all regions' items of a key (one Query of
// the local replica) at most once per Rebalance while it decides on the
// key, publishes its region's demand and recent demand (the most it
// measured in the last recentDemand periods), and gives away what its
// region holds over its fair part of the limit (its demand's share, and a
// floor of a tenth of its base but no more than its demand, so a region
// without demand has none; but a region whose demand fell under half its
// recent demand, and whose demand has come back before (a node saw it
// fall under a quarter of its peak and return to half of that within
// recentDemand periods, in the last recentDemand: observe),
// keeps its base, or that recent demand if less, so that demand moving
// between regions faster than units can follow finds the even split
// where it returns, while demand that moved once, or moves slower, has
// the units follow it at once) to the regions under theirs, in
// proportion to what they lack, in whole units (fairParts). A node's demand is measured from its second
// refresh of a key, a quarter period after the first; until then it
// publishes none and gives nothing. A region that lacks calls, through
// its inbox (callIdle), every region that holds units over its fair part
// and whose nodes are not looking at the key (a region that never sees
// the key's traffic): their nodes read their inbox every Rebalance and
// look at the keys called for ten minutes, giving their units away.
//
// Why it never admits more than the limit across regions: a gift is
// pending until a window that starts at least giftDelay (two Rebalance
// periods) after its write's deadline, by which time every node
// of the giving region has read
// it (a node reads its region's item before deciding on a key whenever
// its copy is older than Rebalance), so from that window on the giver
// counts its allotment without the gift (how much a region gives, and
// to whom, its fair parts, does not enter the argument). The receiver counts the gift only
// once it sees it, from the same window on, or later if replication lags:
// in every window, the allotments as each region counts them sum to at
// most the limit, and each region admits at most its own. A region cut
// off keeps deciding against its allotment and gives nothing the others
// can see; what it gave before the cut is gone from it and reaches the
// others when it heals.
//
// The argument assumes: the clocks of a region's nodes agree within a
// Rebalance period (giftDelay less a period; none would do with exact
// clocks); an allotment write that commits does so by its deadline
// (writeTimeout after it starts; a request abandoned then but applied by
// DynamoDB later eats into the margin the clocks have); and a node that
// cannot read
// the items decides against its copy only while the copy still holds
// every gift that can take effect (fallback), and otherwise against
// nothing, never against the whole limit whatever the fail mode. It
// assumes nothing of the replication lag.

// The timings of a rebalance, from the period P (Options.Rebalance, the
// most a deciding node's copy of a key's items ages):
//
//   - readTimeout bounds a read of the items (or of the inbox): P/2, but
//     at least 250 ms, so that a store slower than half a short period
//     still answers (the read's length does not enter the argument);
//   - writeTimeout bounds the write of this region's item, from its start:
//     P/2;
//   - giftDelay is how long after its write's deadline a gift takes
//     effect (from the next window's start): 2P. The margin for the
//     clocks of a region's nodes, and for a write DynamoDB applies after
//     the node abandoned it, is giftDelay - P; a node whose reads fail
//     decides on its copy for giftDelay - P/2 after the copy's read;
//   - aliveEvery is how often, at least, a node looking at a key rewrites
//     its region's item, unchanged, to show it looks: 2P, but at least 2 s;
//   - rateSpan is the time constant of a node's demand, measured at each
//     refresh: P, but at least a second, so that a short period does not
//     publish the noise of a fraction of a second (each change over a
//     tenth is a write).
func (s *Store) readTimeout() time.Duration  { return max(s.rebalance/2, 250*time.Millisecond) }
func (s *Store) writeTimeout() time.Duration { return s.rebalance / 2 }
func (s *Store) giftDelay() time.Duration    { return 2 * s.rebalance }
func (s *Store) aliveEvery() time.Duration   { return max(2*s.rebalance, 2*time.Second) }
func (s *Store) rateSpan() time.Duration     { return max(s.rebalance, time.Second) }

// allotmentTTL is how long an allotment item lives unwritten: it is
// rewritten at least every few Rebalance periods while its key is decided
// on anywhere.
const allotmentTTL = 7 * 24 * time.Hour

// allotments are a node's copies of the allotment items of the keys it
// decides on, by the key's base pk, at most Options.CacheKeys of them.
type allotments struct {
	mu sync.Mutex
	m  map[string]*allotment
	// inboxNext is where the next read of this region's inbox starts (the
	// last read's LastEvaluatedKey); nil: from its start. Only
	// idleRefresh uses it.
	inboxNext map[string]types.AttributeValue
}

type allotment struct {
	// lock is held while the copy is read or refreshed: a one-slot
	// channel, taken with the decision's context, so that a wait behind a
	// slow refresh ends at the decision's deadline.
	lock      chan struct{}
	refreshed time.Time // when the last read of the items began (wall clock); zero: never
	items     map[string]*regionItem
	asked     int64 // hits asked here since since
	since     time.Time
	lastAsked time.Time // the last decision that asked hits
	rate      float64   // this node's demand, hits per window
	peak      float64   // its most within the last recentDemand (from peakAt)
	peakAt    time.Time
	policy    *sluice.Policy // the policy of the last decision, for the idle refresh
	decided   time.Time      // the last decision, or the last call from the inbox
	// fell is when this node's demand fell under a quarter of its peak (fellFrom),
	// zero while it has not; back is when it last came back to half of
	// fellFrom within recentDemand of falling.
	fell, back time.Time
	fellFrom   float64
	called     map[string]time.Time // when this node last wrote to each region's inbox for the key
}

// regionItem is one region's allotment item.
type regionItem struct {
	v     int64              // version; 0: no item
	lim   int64              // the limit the gifts were made under
	rates map[string]float64 // each node's demand, hits per window, by node id
	peaks map[string]float64 // each node's most demand within recentDemand
	seen  map[string]int64   // when each node last wrote its rate, epoch ns
	backs map[string]int64   // when each node's demand last came back (allotment.back), epoch ns
	total map[string]int64   // effective gifts, by region given to
	pend  map[string]int64   // pending gifts
	from  map[string]int64   // when each pending gift takes effect, epoch ns
	wrote int64              // when it was last written, epoch ns
}

// rate returns the region's demand: the sum of its nodes' rates written
// within the last nodeGone (a node gone stops counting). The horizon is
// long so that a replica a few seconds behind still counts them.
func (it *regionItem) rate(now int64) float64 {
	if it == nil {
		return 0
	}
	return it.live(it.rates, now)
}

// live sums per node's values of the nodes seen within the last nodeGone.
func (it *regionItem) live(per map[string]float64, now int64) float64 {
	var r float64
	for n, x := range per {
		if now-it.seen[n] < int64(nodeGone) {
			r += x
		}
	}
	return r
}

// peak returns the region's recent demand: the sum of its nodes' peaks
// (the most each measured within the last recentDemand), counted as rate
// counts their rates.
func (it *regionItem) peak(now int64) float64 {
	if it == nil {
		return 0
	}
	return it.live(it.peaks, now)
}

// returns reports whether the region's demand comes back: whether one of
// its nodes, counted as rate counts them, saw its demand come back within
// recentDemand of falling, in the last within nanoseconds.
func (it *regionItem) returns(now, within int64) bool {
	if it == nil {
		return false
	}
	for n, at := range it.backs {
		if now-it.seen[n] < int64(nodeGone) && at > 0 && now-at < within {
			return true
		}
	}
	return false
}

// recentDemand, in Rebalance periods, is how long a region keeps a floor
// of its even part (or of the demand it had, if less) after its demand
// fell: demand that comes back within it finds its units still there.
// Units given to a region take about two lags and a few periods to
// arrive (2-3 s at 1 s lag and the default period; 7.5 s is recentDemand
// then), so demand that moves between
// regions faster than that would otherwise find, in each region it
// reaches, the units given away while it was elsewhere, and the units
// given to it arriving as it leaves. A region idle for longer gives its
// part to the regions with demand. The floor is kept only by a region
// whose demand has come back within recentDemand of falling before (in
// the last recentDemand periods): a one-off move, or one slower than
// that, leaves at once demand that never returned, and its units follow
// it as soon as its fall is measured.
const recentDemand = 30

// nodeGone is how long after its last write a node's demand stops
// counting in its region's: it writes every few Rebalance periods while
// it decides on the key, and the replicas of other regions see it a
// replication lag later.
const nodeGone = time.Minute

// gave returns what the region's item gives to, in the window starting
// at w.
func (it *regionItem) gave(to string, w, limit int64) int64 {
	if it == nil || it.lim != limit {
		return 0 // gifts made under another limit count for nothing
	}
	g := it.total[to]
	if it.from[to] <= w {
		g += it.pend[to]
	}
	return g
}

// baseShare returns region i's even part of limit among n regions: limit/n,
// the remainder going to the first regions.
func baseShare(limit int64, i, n int) int64 {
	b := limit / int64(n)
	if int64(i) < limit%int64(n) {
		b++
	}
	return b
}

// allotted returns region r's allotment in the window starting at w, as
// the items say, for a limit.
func (s *Store) allotted(items map[string]*regionItem, r string, limit, w int64) int64 {
	i := slices.Index(s.regions, r)
	a := baseShare(limit, i, len(s.regions))
	for _, x := range s.regions {
		if x == r {
			for _, to := range s.regions {
				if to != r {
					a -= items[r].gave(to, w, limit)
				}
			}
			continue
		}
		if it := items[x]; it != nil && w-it.wrote < int64(allotmentTTL-24*time.Hour) {
			// Not from an item near its TTL: its deletion, reaching this
			// region late, must not leave it counting what its giver
			// counts back.
			a += it.gave(r, w, limit)
		}
	}
	return max(a, 0)
}

// rebalanced reports whether policies of algorithm a rebalance their
// allotments; the others keep the even split.
func rebalanced(a sluice.Algorithm) bool {
	return a == sluice.FixedWindow || a == sluice.SlidingWindow
}

// regional returns op as this region decides it: its counter this
// region's, its limit the region's allotment if the policy's scope is
// global. The policy is a copy when changed.
func (s *Store) regional(ctx context.Context, now int64, op sluice.Op) (sluice.Op, error) {
	op.Key.Region = s.region
	p := op.Policy
	if p.Scope == sluice.ScopeRegional || op.Key.Algorithm == sluice.PenaltyBox {
		return op, nil // penalty boxes are each region's own
	}
	q := *p
	op.Policy = &q
	i := slices.Index(s.regions, s.region)
	if !rebalanced(p.Algorithm) {
		q.Limit = max(baseShare(p.Limit, i, len(s.regions)), 1)
		if q.Burst != 0 {
			q.Burst = max(q.Burst*q.Limit/p.Limit, 1)
		}
		return op, nil
	}
	base := op.Key
	base.Region = ""
	a, err := s.allotment(ctx, now, counterPK(&base), p, op.Hits)
	if err != nil {
		return op, err
	}
	q.Limit = a
	return op, nil
}

// allotment returns this region's allotment of the key at now, reading
// the key's allotment items and rebalancing if its copy is older than
// Rebalance (by the wall clock: other nodes' gifts take effect by it), and
// counts hits as asked here.
func (s *Store) allotment(ctx context.Context, now int64, pk string, p *sluice.Policy, hits int64) (int64, error) {
	s.allots.mu.Lock()
	if s.allots.m == nil {
		s.allots.m = map[string]*allotment{}
	}
	e := s.allots.m[pk]
	if e == nil {
		if len(s.allots.m) >= s.maxAllots {
			s.dropAllotment()
		}
		e = &allotment{lock: make(chan struct{}, 1)}
		s.allots.m[pk] = e
	}
	s.allots.mu.Unlock()

	select {
	case e.lock <- struct{}{}:
	case <-ctx.Done():
		return 0, unavailable("allotment", ctx.Err())
	}
	defer func() { <-e.lock }()
	wall := time.Now()
	e.asked += hits
	e.policy, e.decided = p, wall
	if hits > 0 {
		e.lastAsked = wall
	}
	w := int64(p.Window)
	start := now - ((now%w)+w)%w
	if e.refreshed.IsZero() || wall.Sub(e.refreshed) >= s.rebalance {
		if err := s.refresh(ctx, now, wall, pk, p, e); err != nil {
			// The items could not be read: decide against the allotment
			// the copy vouches for, never against the whole limit.
			s.stats.allotmentFallbacks.Add(1)
			return s.fallback(e, p.Limit, start), nil
		}
	}
	return s.allotted(e.items, s.region, p.Limit, start), nil
}

// fallback returns the region's allotment in the window starting at start
// when its items cannot be read: what the copy counts, if the copy still
// holds for that window, and otherwise nothing.
//
// A copy read at wall time T holds every gift of this region written
// before T; one written after takes effect from a window starting at
// least giftDelay after its write's deadline, which is after T (the
// write commits by its deadline): so for a window starting before T plus
// giftDelay less half a period (left for the clocks of the region's
// nodes), the copy counts at least all that the region gave, and its
// gifts received only ever grow. Past that a node that cannot read cannot know what the
// region's other nodes gave, and vouches for nothing: the key is denied
// here until a read succeeds, and the other regions keep theirs.
func (s *Store) fallback(e *allotment, limit, start int64) int64 {
	if e.items == nil || start >= e.refreshed.UnixNano()+int64(s.giftDelay()-s.rebalance/2) {
		return 0
	}
	return s.allotted(e.items, s.region, limit, start)
}

// idleRefresh refreshes the copies of keys this node decided on (or was
// called about) in the last ten minutes but not in the last Rebalance
// (at most 256 a period): every period those decided on within the last
// recentDemand periods, whose demand has just left and whose units should
// follow it; the others once a second, for the store's cost. A region
// whose traffic stopped so still publishes its falling demand and gives
// its units to the regions that now have it. It returns when the store
// is closed.
func (s *Store) idleRefresh() {
	t := time.NewTicker(s.rebalance)
	defer t.Stop()
	for {
		select {
		case <-s.closed:
			return
		case <-t.C:
		}
		s.readInbox()
		wall := time.Now()
		type job struct {
			pk string
			e  *allotment
		}
		var jobs []job
		s.allots.mu.Lock()
		for pk, e := range s.allots.m {
			if len(jobs) == 256 {
				break
			}
			select {
			case e.lock <- struct{}{}:
				if e.policy != nil && wall.Sub(e.refreshed) >= s.idleAge(wall.Sub(e.decided))*9/10 && wall.Sub(e.decided) < inboxHeeded {
					jobs = append(jobs, job{pk, e})
					continue // still held: released once refreshed
				}
				<-e.lock
			default:
			}
		}
		s.allots.mu.Unlock()
		for _, j := range jobs {
			// A failed refresh leaves the copy as it was: the next decision
			// or tick reads again, and a decision meanwhile falls back on
			// the copy (fallback).
			_ = s.refresh(s.bg, time.Now().UnixNano(), time.Now(), j.pk, j.e.policy, j.e)
			<-j.e.lock
		}
	}
}

// idleAge is how old the idle refresh lets the copy of a key grow that
// was last decided on (or called about) idle ago.
func (s *Store) idleAge(idle time.Duration) time.Duration {
	if idle < recentDemand*s.rebalance {
		return s.rebalance
	}
	return max(s.rebalance, time.Second)
}

// dropAllotment forgets one copy not in use, to make room: its items stay
// in the table, and are read again when needed. The caller holds
// s.allots.mu.
func (s *Store) dropAllotment() {
	for k, e := range s.allots.m { // a map's order is random
		select {
		case e.lock <- struct{}{}:
			delete(s.allots.m, k)
			<-e.lock
			return
		default:
		}
	}
}

// refresh reads the key's allotment items, publishes this node's demand
// and gives away what the region holds over its fair part. e.lock is held;
// wall is when the read begins. The read has readTimeout, the write
// writeTimeout from its start: a gift takes effect from a window that
// starts at least giftDelay (two Rebalance periods) after the write's
// deadline, by which time every node of the region has read
// it (each reads the items at least once a Rebalance while it decides on
// the key, and decides on nothing older).
func (s *Store) refresh(ctx context.Context, now int64, wall time.Time, pk string, p *sluice.Policy, e *allotment) error {
	rctx, cancel := context.WithTimeout(ctx, s.readTimeout())
	items, err := s.readAllotments(rctx, pk)
	cancel()
	if err != nil {
		return err
	}
	// A node's rate is measured from its second refresh of the key on.
	// Before that, if it has decided on the key, its traffic has just
	// begun and its rate is not known: it publishes none and gives nothing
	// (publishing 0 would give away the units its traffic is about to
	// need). A key it has not decided on (an idle refresh, a call from the
	// inbox) has a rate of 0 here, known.
	unknown := e.since.IsZero() && e.asked > 0
	if !e.since.IsZero() {
		e.observe(nextRate(e.rate, e.asked, wall.Sub(e.since), wall.Sub(e.lastAsked), p.Window, s.rateSpan()), wall, recentDemand*s.rebalance)
	}
	e.asked, e.since, e.refreshed, e.items = 0, wall, wall, items
	if unknown {
		// Measure the rate over a quarter period, not a whole one: the
		// sooner it is published, the sooner the units follow it. The
		// copy's age for the next refresh is what makes it due, and a
		// younger copy is only safer.
		e.refreshed = wall.Add(-s.rebalance * 3 / 4)
	}

	mine := items[s.region]
	if mine == nil {
		mine = &regionItem{lim: p.Limit}
	}
	next := *mine
	next.total, next.pend, next.from = cloneMap(mine.total), cloneMap(mine.pend), cloneMap(mine.from)
	next.rates, next.seen, next.peaks = cloneMap(mine.rates), cloneMap(mine.seen), cloneMap(mine.peaks)
	next.backs = cloneMap(mine.backs)
	changed := mine.v == 0
	if mine.lim != p.Limit {
		// The limit changed: the gifts made under the old one count for
		// nothing, here and in every region that has the new limit.
		next.lim, next.total, next.pend, next.from = p.Limit, map[string]int64{}, map[string]int64{}, map[string]int64{}
		changed = true
	}
	if !unknown {
		was, wasPeak := mine.rates[s.node], mine.peaks[s.node]
		next.rates[s.node], next.peaks[s.node], next.seen[s.node] = e.rate, e.peak, wall.UnixNano()
		if !e.back.IsZero() {
			next.backs[s.node] = e.back.UnixNano()
		}
		changed = changed || wall.UnixNano()-mine.seen[s.node] > int64(s.aliveEvery()) ||
			next.backs[s.node] != mine.backs[s.node] ||
			moved(was, e.rate, p.Limit) || moved(wasPeak, e.peak, p.Limit)
	}
	for n, at := range next.seen {
		if wall.UnixNano()-at > int64(time.Hour) {
			delete(next.rates, n) // a node long gone
			delete(next.peaks, n)
			delete(next.seen, n)
			delete(next.backs, n)
		}
	}

	// The window from which a gift written now may take effect: giftDelay
	// after the write's deadline.
	ctx, cancel = context.WithTimeout(ctx, s.writeTimeout())
	defer cancel()
	w := int64(p.Window)
	at := time.Now().UnixNano() + int64(s.writeTimeout()) + int64(s.giftDelay())
	from := at - ((at%w)+w)%w
	if from < at {
		from += w
	}
	if !unknown {
		fair := s.fairParts(items, &next, p.Limit, wall.UnixNano())
		if addGifts(&next, s.gifts(items, fair, p.Limit, from), from, now) {
			changed = true
		}
		s.callIdle(ctx, pk, p, e, items, fair, wall)
	}
	if !changed {
		return nil
	}
	next.wrote = wall.UnixNano()
	if err := s.writeAllotment(ctx, pk, mine.v, &next); err != nil {
		// Raced by another node of the region, or the write failed: decide
		// from the items as read, and try again at the next decision.
		s.stats.allotmentWrites.Add(1)
		e.refreshed = time.Time{}
		return nil
	}
	next.v = mine.v + 1
	items[s.region] = &next
	return nil
}

// observe records the node's demand r, measured at wall: its rate, its
// peak within recent, and whether the demand comes back: it fell under a
// quarter of its peak, and rose again to half of that within recent. Two
// timestamps and a rate a key, published as one per node. A quarter, not
// a half: demand that arrives as one burst a window, measured every
// period, swings by half and more about its average, and must not pass
// for demand that leaves and returns (it would keep its region's even
// part from the region that needs it); demand that moves to another
// region falls to nothing.
func (e *allotment) observe(r float64, wall time.Time, recent time.Duration) {
	e.rate = r
	if r >= e.peak || wall.Sub(e.peakAt) > recent {
		e.peak, e.peakAt = r, wall
	}
	switch {
	case e.fell.IsZero() && r < e.peak/4:
		e.fell, e.fellFrom = wall, e.peak
	case !e.fell.IsZero() && r > 0 && r >= e.fellFrom/2:
		if wall.Sub(e.fell) < recent {
			e.back = wall
		}
		e.fell = time.Time{}
	}
}

// nextRate returns a node's demand, in hits per window, after it asked
// asked hits in the last dt (idle since its last), its demand having been
// rate: the average over about span (a window at least), unless what was
// asked is further from the average than chance puts it (three standard
// deviations of a Poisson count, and two hits), when the demand moved and
// the rate follows it at once. A node that has asked nothing for two
// spans has none: not one, which demand arriving in one burst a window
// would pass between its bursts.
func nextRate(rate float64, asked int64, dt, idle, window, span time.Duration) float64 {
	dt = max(dt, time.Millisecond)
	span = max(span, window)
	r := float64(asked) * float64(window) / float64(dt)
	expect := rate * float64(dt) / float64(window)
	switch {
	case asked == 0 && idle >= 2*span:
		return 0
	case rate > 0 && math.Abs(float64(asked)-expect) <= 3*math.Sqrt(expect)+2:
		return rate + (r-rate)*(1-math.Exp(-float64(dt)/float64(span)))
	}
	return r
}

// moved reports whether a demand, in hits per window, moved from was to
// now by enough to publish: by more than a tenth, a hundredth of the
// limit, and twice the noise of a Poisson count of was (its square
// root), so that a steady demand measured every period is not written
// every period.
func moved(was, now float64, limit int64) bool {
	return math.Abs(now-was) > max(was/10, float64(limit)/100, 2*math.Sqrt(was))
}

// addGifts adds gifts, taking effect from the window starting at from, to
// the item it, at now, and reports whether it added any. A region with a
// gift still pending gets no other until it takes effect: a second one
// would move the first's window, from which a lagging replica counts it.
// A pending gift that took effect is folded into the total first. So, for
// every window, what an item gives only grows from one version to the
// next, and a replica that lags counts less given, never more.
func addGifts(it *regionItem, gifts map[string]int64, from, now int64) bool {
	added := false
	for to, x := range gifts {
		if x <= 0 || it.from[to] > now {
			continue
		}
		it.total[to] += it.pend[to]
		it.pend[to], it.from[to] = x, from
		added = true
	}
	return added
}

// fairParts returns each region's fair part of limit, in the order of
// s.regions, their demands and recent demands (peaks) being in items and
// this region's in mine. Each region has a floor: a tenth of its even
// part (base), but no more than its demand; and, while its demand is
// under half what it was within the last recentDemand periods (its
// demand fell or left) if its demand has come back once before (returns:
// it moves to and fro), its base, or that recent demand if less. The
// rest of the limit goes in proportion to demand, no
// region's part passing its demand while another's is under its own (what
// is left after all are filled, in proportion to demand). A region
// without demand, recent or current, has no floor, so that all of a small
// limit, or all but nothing of a large one, can go where the demand is;
// one whose demand has just left keeps its floor for when it comes back,
// if it came back before; one whose demand left for the first time, or
// after longer than recentDemand, gives its part away.
// It returns nil if no region has demand.
func (s *Store) fairParts(items map[string]*regionItem, mine *regionItem, limit, now int64) []float64 {
	n := len(s.regions)
	demand := make([]float64, n)
	fair := make([]float64, n)
	var sumD, sumF float64
	for i, r := range s.regions {
		it := items[r]
		if r == s.region {
			it = mine
		}
		demand[i] = it.rate(now)
		base := float64(baseShare(limit, i, n))
		fair[i] = min(base/10, demand[i])
		if recent := it.peak(now); demand[i] < recent/2 && it.returns(now, int64(recentDemand*s.rebalance)) {
			fair[i] = max(fair[i], min(base, recent)) // its demand fell: keep for its return
		}
		sumD += demand[i]
		sumF += fair[i]
	}
	if sumD <= 0 {
		return nil
	}
	// Water-filling: the rest in proportion to demand among the regions
	// under their demand, each filled to its demand at most, until the
	// rest is gone or every region is filled.
	rest := float64(limit) - sumF
	open := make([]bool, n)
	for i := range open {
		open[i] = demand[i] > fair[i]
	}
	for rest > 1e-9 {
		var sum float64
		for i := range n {
			if open[i] {
				sum += demand[i]
			}
		}
		if sum == 0 {
			break
		}
		used := 0.0
		for i := range n {
			if open[i] && fair[i]+rest*demand[i]/sum >= demand[i] {
				used += demand[i] - fair[i]
				fair[i], open[i] = demand[i], false
			}
		}
		rest -= used
		if used == 0 {
			for i := range n {
				if open[i] {
					fair[i] += rest * demand[i] / sum
				}
			}
			rest = 0
		}
	}
	if rest > 1e-9 {
		for i := range n {
			fair[i] += rest * demand[i] / sumD
		}
	}
	return fair
}

// gifts returns what this region gives each other region from the window
// starting at from, the regions' fair parts being fair (fairParts): what
// it holds over its fair part, to the regions under theirs, in proportion
// to what they lack.
func (s *Store) gifts(items map[string]*regionItem, fair []float64, limit, from int64) map[string]int64 {
	if fair == nil {
		return nil
	}
	me := slices.Index(s.regions, s.region)
	excess := float64(s.allotted(items, s.region, limit, from)) - fair[me]
	if excess < max(1, float64(limit)/100) {
		return nil
	}
	lack := make(map[string]float64)
	var sumLack float64
	for i, r := range s.regions {
		if i == me {
			continue
		}
		if l := fair[i] - float64(s.allotted(items, r, limit, from)); l >= 1 {
			lack[r] = l
			sumLack += l
		}
	}
	if sumLack == 0 {
		return nil
	}
	// Whole units, shared by largest remainder: truncating each share
	// would strand a unit or two of a small limit.
	give := int64(min(excess, sumLack))
	out := map[string]int64{}
	var given int64
	rest := make([]string, 0, len(lack))
	for r, l := range lack {
		out[r] = int64(float64(give) * l / sumLack)
		given += out[r]
		rest = append(rest, r)
	}
	slices.SortFunc(rest, func(a, b string) int {
		ra, rb := float64(give)*lack[a]/sumLack-float64(out[a]), float64(give)*lack[b]/sumLack-float64(out[b])
		if ra != rb {
			return cmp.Compare(rb, ra)
		}
		return strings.Compare(a, b)
	})
	for _, r := range rest {
		if given >= give {
			break
		}
		if float64(out[r]+1) <= lack[r] {
			out[r]++
			given++
		}
	}
	maps.DeleteFunc(out, func(_ string, x int64) bool { return x <= 0 })
	return out
}

// inboxPK is the partition of a region's inbox: an item per key and
// calling region (sk: the caller, "#", the key's base pk), written only by
// the caller's nodes, that asks the region's nodes to look at a key on
// which it holds units the caller's demand lacks, though it has no
// traffic of its own there. Without it a region that never sees a key
// would keep its even part of the key's limit for ever. It begins with
// "#", as no tenant's key does.
func inboxPK(region string) string { return "#inbox#" + region }

// inboxTTL is how long an inbox item lives; a call older than
// inboxHeeded is no longer heeded.
const (
	inboxTTL    = time.Hour
	inboxHeeded = 10 * time.Minute
	// inboxEvery is how often, at most, a node calls a region about a
	// key: a call keeps the region looking at the key for inboxHeeded.
	inboxEvery = time.Minute
)

// callIdle writes to the inbox of every region that holds more of the
// key's limit than its fair part, while this region lacks, and whose
// nodes are not looking at the key (no item, or none written within two
// aliveEvery: a node that looks writes its item at least every
// aliveEvery), at most once per inboxEvery per region from this node. A failed
// write is tried again at the next refresh. e.lock is held.
func (s *Store) callIdle(ctx context.Context, pk string, p *sluice.Policy, e *allotment, items map[string]*regionItem, fair []float64, wall time.Time) {
	if fair == nil {
		return
	}
	w := int64(p.Window)
	now := wall.UnixNano()
	start := now - ((now%w)+w)%w
	me := slices.Index(s.regions, s.region)
	if fair[me]-float64(s.allotted(items, s.region, p.Limit, start)) < 1 {
		return
	}
	for i, r := range s.regions {
		it := items[r]
		switch {
		case i == me,
			float64(s.allotted(items, r, p.Limit, start))-fair[i] < 1,
			it != nil && now-it.wrote < int64(2*s.aliveEvery()),
			wall.Sub(e.called[r]) < inboxEvery:
			continue
		}
		s.stats.writes.Add(1)
		_, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &s.table, Item: map[string]types.AttributeValue{
			attrPK:  &types.AttributeValueMemberS{Value: inboxPK(r)},
			attrSK:  &types.AttributeValueMemberS{Value: s.region + "#" + pk},
			"lim":   num(p.Limit),
			"win":   num(int64(p.Window)),
			"alg":   num(int64(p.Algorithm)),
			"wrote": num(now),
			attrTTL: num(now/int64(time.Second) + int64(inboxTTL/time.Second)),
		}})
		if err != nil {
			continue
		}
		if e.called == nil {
			e.called = map[string]time.Time{}
		}
		e.called[r] = wall
	}
}

// inboxBatch is the most inbox items a node reads a Rebalance period.
const inboxBatch = 256

// readInbox reads up to inboxBatch items of this region's inbox, going on
// from where the last read ended, and has the idle refresh look at each
// key called within inboxHeeded, for inboxHeeded from the call (at most
// Options.CacheKeys keys, as for the keys decided on). A failed read is
// tried again next period.
func (s *Store) readInbox() {
	ctx, cancel := context.WithTimeout(s.bg, s.readTimeout())
	defer cancel()
	s.stats.reads.Add(1)
	out, err := s.db.Query(ctx, &dynamodb.QueryInput{
		TableName:                 &s.table,
		KeyConditionExpression:    aws.String("pk = :p"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":p": &types.AttributeValueMemberS{Value: inboxPK(s.region)}},
		ExclusiveStartKey:         s.allots.inboxNext,
		Limit:                     aws.Int32(inboxBatch),
	})
	if err != nil {
		return
	}
	s.allots.inboxNext = out.LastEvaluatedKey
	wall := time.Now()
	for _, it := range out.Items {
		sk, _ := it[attrSK].(*types.AttributeValueMemberS)
		if sk == nil {
			continue
		}
		_, pk, ok := strings.Cut(sk.Value, "#")
		get := func(name string) int64 {
			n, _ := it[name].(*types.AttributeValueMemberN)
			if n == nil {
				return 0
			}
			x, _ := strconv.ParseInt(n.Value, 10, 64)
			return x
		}
		lim, win, alg, wrote := get("lim"), get("win"), sluice.Algorithm(get("alg")), time.Unix(0, get("wrote"))
		if !ok || lim <= 0 || win <= 0 || !rebalanced(alg) || wall.Sub(wrote) >= inboxHeeded {
			continue
		}
		s.heed(pk, &sluice.Policy{Algorithm: alg, Limit: lim, Window: time.Duration(win)}, wrote)
	}
}

// heed has the idle refresh look at the key of base pk, called at wrote,
// for inboxHeeded from then: its copy made if there is room, its last
// decision moved to the call. A copy in use is left for the next period.
func (s *Store) heed(pk string, p *sluice.Policy, wrote time.Time) {
	s.allots.mu.Lock()
	defer s.allots.mu.Unlock()
	if s.allots.m == nil {
		s.allots.m = map[string]*allotment{}
	}
	e := s.allots.m[pk]
	if e == nil {
		if len(s.allots.m) >= s.maxAllots {
			return
		}
		e = &allotment{lock: make(chan struct{}, 1)}
		s.allots.m[pk] = e
	}
	select {
	case e.lock <- struct{}{}:
	default:
		return
	}
	if e.policy == nil {
		e.policy = p
	}
	if wrote.After(e.decided) {
		e.decided = wrote
	}
	<-e.lock
}

// readAllotments reads every region's allotment item of the key: one
// Query of the local replica.
func (s *Store) readAllotments(ctx context.Context, pk string) (map[string]*regionItem, error) {
	s.stats.reads.Add(1)
	out, err := s.db.Query(ctx, &dynamodb.QueryInput{
		TableName:              &s.table,
		KeyConditionExpression: aws.String("#pk = :pk AND begins_with(#sk, :a)"),
		ExpressionAttributeNames: map[string]string{
			"#pk": attrPK, "#sk": attrSK,
		},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk": &types.AttributeValueMemberS{Value: pk},
			":a":  &types.AttributeValueMemberS{Value: skAllotment},
		},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return nil, unavailable("read allotments", err)
	}
	items := map[string]*regionItem{}
	for _, it := range out.Items {
		sk, _ := it[attrSK].(*types.AttributeValueMemberS)
		if sk == nil {
			continue
		}
		r := strings.TrimPrefix(sk.Value, skAllotment)
		ri, err := decodeAllotment(it)
		if err != nil {
			return nil, fmt.Errorf("dynamostore: allotment item %s %s: %w", pk, sk.Value, err)
		}
		items[r] = ri
	}
	return items, nil
}

var errAllotmentRaced = errors.New("dynamostore: allotment item written by another node")

// writeAllotment puts this region's allotment item, conditioned on the
// version v it was computed from.
func (s *Store) writeAllotment(ctx context.Context, pk string, v int64, it *regionItem) error {
	item := map[string]types.AttributeValue{
		attrPK:  &types.AttributeValueMemberS{Value: pk},
		attrSK:  &types.AttributeValueMemberS{Value: skAllotment + s.region},
		"v":     num(v + 1),
		"lim":   num(it.lim),
		"rates": floatMap(it.rates),
		"peaks": floatMap(it.peaks),
		"seen":  numMap(it.seen),
		"backs": numMap(it.backs),
		"wrote": num(it.wrote),
		"total": numMap(it.total),
		"pend":  numMap(it.pend),
		"from":  numMap(it.from),
		attrTTL: num(it.wrote/int64(time.Second) + 7*86400),
	}
	in := &dynamodb.PutItemInput{TableName: &s.table, Item: item}
	if v == 0 {
		in.ConditionExpression = aws.String("attribute_not_exists(#pk)")
		in.ExpressionAttributeNames = map[string]string{"#pk": attrPK}
	} else {
		in.ConditionExpression = aws.String("#v = :v")
		in.ExpressionAttributeNames = map[string]string{"#v": "v"}
		in.ExpressionAttributeValues = map[string]types.AttributeValue{":v": num(v)}
	}
	s.stats.writes.Add(1)
	_, err := s.db.PutItem(ctx, in)
	var failed *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &failed):
		return errAllotmentRaced
	case err != nil:
		return unavailable("write allotment", err)
	}
	return nil
}

func decodeAllotment(it map[string]types.AttributeValue) (*regionItem, error) {
	ri := &regionItem{}
	var err error
	get := func(name string) int64 {
		n, ok := it[name].(*types.AttributeValueMemberN)
		if !ok {
			return 0
		}
		x, e := strconv.ParseInt(n.Value, 10, 64)
		if e != nil && err == nil {
			err = fmt.Errorf("%s: %w", name, e)
		}
		return x
	}
	ri.v, ri.wrote, ri.lim = get("v"), get("wrote"), get("lim")
	for _, m := range []struct {
		name string
		dst  *map[string]float64
	}{{"rates", &ri.rates}, {"peaks", &ri.peaks}} {
		*m.dst = map[string]float64{}
		mm, _ := it[m.name].(*types.AttributeValueMemberM)
		if mm == nil {
			continue // peaks: an item of a node before them
		}
		for k, v := range mm.Value {
			n, ok := v.(*types.AttributeValueMemberN)
			if !ok {
				return nil, fmt.Errorf("%s.%s is not a number", m.name, k)
			}
			x, e := strconv.ParseFloat(n.Value, 64)
			if e != nil {
				return nil, fmt.Errorf("%s.%s: %w", m.name, k, e)
			}
			(*m.dst)[k] = x
		}
	}
	for _, m := range []struct {
		name string
		dst  *map[string]int64
	}{{"total", &ri.total}, {"pend", &ri.pend}, {"from", &ri.from}, {"seen", &ri.seen}, {"backs", &ri.backs}} {
		*m.dst = map[string]int64{}
		mm, _ := it[m.name].(*types.AttributeValueMemberM)
		if mm == nil {
			continue
		}
		for k, v := range mm.Value {
			n, ok := v.(*types.AttributeValueMemberN)
			if !ok {
				return nil, fmt.Errorf("%s.%s is not a number", m.name, k)
			}
			x, e := strconv.ParseInt(n.Value, 10, 64)
			if e != nil {
				return nil, fmt.Errorf("%s.%s: %w", m.name, k, e)
			}
			(*m.dst)[k] = x
		}
	}
	return ri, err
}

func num(x int64) *types.AttributeValueMemberN {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(x, 10)}
}

func numMap(m map[string]int64) *types.AttributeValueMemberM {
	out := &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{}}
	for k, v := range m {
		out.Value[k] = num(v)
	}
	return out
}

func floatMap(m map[string]float64) *types.AttributeValueMemberM {
	out := &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{}}
	for k, v := range m {
		out.Value[k] = &types.AttributeValueMemberN{Value: strconv.FormatFloat(v, 'f', 3, 64)}
	}
	return out
}

// cloneMap returns a copy of m, never nil: the item's maps are written to.
func cloneMap[V any](m map[string]V) map[string]V {
	out := make(map[string]V, len(m))
	maps.Copy(out, m)
	return out
}
