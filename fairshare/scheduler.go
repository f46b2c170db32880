package fairshare

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Request is one request waiting for the upstream.
type Request struct {
	// ID names the request in Grant and Cancel; unique among the waiting.
	ID       uint64
	Customer Customer
	// Group is who the customer belongs to (its tenant): a group's
	// customers share its weight, so that a group does not get more of
	// the upstream by naming more customers. Empty: the customer is a
	// group of its own.
	Group string
	// Weight is the group's share relative to others, 1 to MaxWeight;
	// the latest request's weight is the group's.
	Weight int64
	// Cost is the upstream units the request uses, 1 to Burst.
	Cost int64
}

// group returns the group r's customer belongs to: its own if none.
func (r Request) group() string { return cmp.Or(r.Group, string(r.Customer)) }

// validate reports r's bad weight or cost by name.
func (s *Scheduler) validate(r Request) error {
	switch {
	case r.Weight < 1 || r.Weight > MaxWeight:
		return fmt.Errorf("fairshare: Weight %d must be 1 to %d", r.Weight, MaxWeight)
	case r.Cost < 1 || r.Cost > s.cfg.Burst:
		return fmt.Errorf("fairshare: Cost %d must be 1 to Burst (%d)", r.Cost, s.cfg.Burst)
	case s.cfg.Cap > 0 && r.Cost > s.cfg.Cap:
		return fmt.Errorf("fairshare: Cost %d must be 1 to Cap (%d)", r.Cost, s.cfg.Cap)
	}
	return nil
}

// Grant is a request released to the upstream.
type Grant struct {
	ID       uint64
	Customer Customer
	Cost     int64
	At       time.Time     // when it was released
	Waited   time.Duration // from Enqueue to release
}

// Scheduler is the fair-share core for one upstream (see the package doc).
// Time is explicit: every method takes now, which must not go backwards.
// It is not safe for concurrent use; Upstream is.
type Scheduler struct {
	cfg   Config
	pacer pacer
	// groups and queues hold the groups and customers with a request
	// waiting, and those that had more than their share since: until the
	// rest catch up, they would otherwise gain by draining and coming
	// back (fairQueue).
	groups  map[string]*group
	queues  map[Customer]*custQueue
	busy    fairQueue[*group] // the groups with a request waiting
	swept   int               // len(groups) after the last sweep
	waiting map[uint64]*custQueue
	// expect is the rate (scaled units per window) the node expects to
	// hold soon, for estimates while its pacer's rate is lower.
	expect int64
	// asked is what each group asked for since askedSince (Demands).
	asked       map[string]*asking
	askedSince  time.Time
	trackDemand bool
	// With a Cap: what each customer was released in the last Window, and
	// every release of the last Window in order, to forget them.
	sent     map[Customer]*sentLog
	sentLogs []sentRelease
}

// sentLog is what one customer was released in the last Window.
type sentLog struct {
	log []release
	sum int64
}

type sentRelease struct {
	at time.Time
	c  Customer
}

// asking is one group's demand: what it asked for in each of the last
// demandSpans spans between calls of Demands, and whether its requests
// waited throughout the last span.
type asking struct {
	weight int64
	units  int64 // asked since the last Demands
	spans  [demandSpans]span
	next   int   // the slot of spans the next Demands fills
	queued int64 // units waiting now
	// waited: units were waiting at the last Demands, and have been ever
	// since (drained is false).
	waited, drained bool
	// fell: the last Demands measured the group at its recent rate, its
	// demand having fallen (recentSpans).
	fell bool
	// cost is the least cost asked in the last span in which the group
	// asked anything; least, the least asked since the last Demands.
	cost, least int64
}

// span is what a group asked for in one span between calls of Demands.
type span struct {
	units int64
	d     time.Duration
}

// demandSpans is how many spans between calls of Demands (about a second
// each, on an Upstream) a group's rate is measured over: long enough that
// a steady client's rate reads the same from one call to the next, which
// keeps the nodes' shares still, short enough to follow a change within a
// few seconds.
const demandSpans = 8

// recentSpans is how many of the last spans say whether a group's demand
// fell: a group with nothing waiting that asked in them under a quarter
// of its rate over demandSpans, and fellBy of its requests a Window or
// more less, is measured at its recent rate instead, until it asks at
// least a quarter of its rate again. A burst that has ended then stops
// holding its node's share within recentSpans calls, not as its average
// decays over demandSpans, which kept the share of the ended burst from
// the other nodes. A steady client asks about its rate in any two spans,
// and one asking fewer than fellBy requests a Window keeps its average
// (as a costly client sending one request every few seconds does): its
// demand reads still from one call to the next.
const recentSpans = 2

// fellBy is how many requests, of its least cost, a Window a group's
// recent rate must be under its rate for the group to be measured at the
// recent one (recentSpans).
const fellBy = 4

// group is one group's place among the groups, and its customers'
// places among themselves: each group is a flow of its weight, and each
// of its customers a flow of equal weight within it.
type group struct {
	fl      flow
	name    string
	weight  int64                   // the latest request's
	keys    fairQueue[*custQueue]   // its customers with a request waiting
	custs   map[Customer]*custQueue // those and the ones still owing
	swept   int                     // len(custs) after the last sweep
	backlog int64                   // the costs of its waiting requests
}

func (g *group) flow() *flow { return &g.fl }

type custQueue struct {
	fl      flow
	name    Customer
	g       *group
	weight  int64 // the latest request's
	reqs    []waiter
	backlog int64 // sum of reqs' costs
}

func (q *custQueue) flow() *flow { return &q.fl }

type waiter struct {
	id      uint64
	cost    int64
	at      time.Time
	maxWait time.Duration // 0: none
	light   bool          // asked while its group asked less than its share (ask)
}

// NewScheduler returns a Scheduler for cfg, defaulted and validated.
func NewScheduler(cfg Config) (*Scheduler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	sc := cfg.scale()
	return &Scheduler{
		cfg:     cfg,
		pacer:   newPacer(cfg.Rate*sc, cfg.Window, cfg.Burst*sc, cfg.Burst*sc),
		queues:  make(map[Customer]*custQueue),
		waiting: make(map[uint64]*custQueue),
		groups:  make(map[string]*group),
		asked:   make(map[string]*asking),
		sent:    make(map[Customer]*sentLog),
	}, nil
}

// SetRate sets the rate the scheduler releases at, in 1/scale cost units
// per Window (Config.Rate*scale is the whole upstream): a node's share of
// an upstream it shares with other nodes (Balancer). Nothing is released
// at or after stop, if it is not zero: when the node's hold on its share
// may lapse. expect is the rate the node expects to hold soon, which
// estimates use while it is above rate. A lower rate takes effect at once
// for what is released from now on; what was released in the last Window
// still counts against it.
func (s *Scheduler) SetRate(now time.Time, rate, expect int64, stop time.Time) {
	s.pacer.expire(now)
	s.pacer.setRate(min(max(rate, 0), s.cfg.Rate*s.cfg.scale()), stop)
	s.expect = max(expect, 0)
}

// Released returns what the scheduler released in the Window up to now,
// in the units of SetRate, and when that falls to rate.
func (s *Scheduler) Released(now time.Time, rate int64) Released {
	s.pacer.expire(now)
	return Released{At: now, Units: s.pacer.inLog, Falls: s.pacer.fallsTo(now, rate)}
}

// Rate returns the rate the scheduler releases at, in cost units per
// Window, and the time after which it releases nothing (zero: none).
func (s *Scheduler) Rate() (float64, time.Time) {
	return float64(s.pacer.rate) / float64(s.cfg.scale()), s.pacer.stop
}

// Admit offers r at now: it counts toward its group's demand (Demands),
// and is refused with ErrShortage if maxWait is not zero and its estimated
// wait (Estimate) exceeds it; otherwise it is enqueued (Enqueue).
func (s *Scheduler) Admit(now time.Time, r Request, maxWait time.Duration) error {
	return s.admit(now, r, maxWait, true)
}

// admit is Admit, refusing r for its estimated wait only if estimate:
// an Upstream that has not yet sized its share has no rate to estimate
// by.
func (s *Scheduler) admit(now time.Time, r Request, maxWait time.Duration, estimate bool) error {
	if err := s.validate(r); err != nil {
		return err
	}
	if s.trackDemand {
		a := s.asked[r.group()]
		if a == nil {
			if len(s.asked) >= maxAsking {
				return ErrQueueFull
			}
			a = &asking{}
			s.asked[r.group()] = a
		}
		a.weight = r.Weight
		a.units += r.Cost
		if a.least == 0 || r.Cost < a.least {
			a.least = r.Cost
		}
	}
	// The request counts toward its group's asking, refused or not; a
	// group not yet known is counted as it is created (enqueue), light.
	g, light := s.groups[r.group()], true
	if q := s.queues[r.Customer]; q != nil {
		g = q.g
	}
	if g != nil {
		light = s.ask(g, r)
	}
	if estimate && maxWait > 0 && s.estimate(now, r.Customer, r.Group, r.Weight, r.Cost, s.laneFor(light, maxWait)) > maxWait {
		return ErrShortage
	}
	return s.enqueue(now, r, maxWait, g != nil, light)
}

// A light group's lane. Each group keeps an asked tag: every request it
// asks, refused or not, moves it on by its cost over the group's weight,
// from no less than v-lightDepth, and no further than v+askAhead. A group
// asking less than its share (the virtual time v moves by one for each
// unit per unit of weight the groups waiting are released) falls behind
// v; one asking more runs ahead, whatever it was granted, so a heavy
// group whose requests were refused or dropped does not count as light
// when it comes back. A request asked while the tag was no later than v
// is light, and so are up to about lightDepth units per unit of weight
// asked at once by a group that asked nothing for a while. A group new to
// the scheduler starts at v: light for one request, for a cluster once it
// has shown it asks less than its share. (Starting all new groups light
// sent the first requests of every tenant arriving with a backlog ahead
// of a light customer's.) A group is forgotten only once its asked tag is
// lightDepth behind v, so a heavy group that drains is not forgotten and
// made light again by the sweep.
//
// A light request that may wait longer than a Window (or has no maximum
// wait) goes, when it is its group's next, as if its start tag were lane
// units earlier: a light customer's cluster of requests goes at once, not
// a round of the rotation later (Jain's index is not what it costs, since
// its tags move as without the lane: what the group is released ahead of
// its turn it waits for after). One that may wait a Window or less needs
// no lane: it is served within a Window or not at all.
const (
	lightDepth = 2.5
	askAhead   = 6
	lane       = 2
)

// ask counts r, of group g, as asked, and reports whether it is light.
func (s *Scheduler) ask(g *group, r Request) bool {
	v := s.busy.v
	before := max(g.fl.asked, v-lightDepth)
	g.fl.asked = min(before+float64(r.Cost)/float64(min(max(r.Weight, 1), MaxWeight)), v+askAhead)
	return before <= v
}

// groupLane returns how far ahead of its start tag g's next request goes
// (laneFor), but never ahead of where a group joining now would be: the
// lane serves a light group's cluster as if each request in it were the
// first, and puts it ahead of no request that a group joining now, with
// no lane, would go before.
func (s *Scheduler) groupLane(g *group) float64 {
	if g.keys.len() == 0 {
		return 0
	}
	head := g.keys.top().reqs[0]
	return min(s.laneFor(head.light, head.maxWait), max(g.fl.start-(s.busy.v-credit), 0))
}

// laneFor returns how far past the virtual time a request, light or not,
// that waits at most w (0: no limit) may go as if at it.
func (s *Scheduler) laneFor(light bool, w time.Duration) float64 {
	if !light || w > 0 && w <= s.cfg.Window {
		return 0
	}
	return lane
}

// maxAsking bounds the groups whose demand a scheduler tracks at once;
// a request of one more is refused as if its queue were full.
const maxAsking = 100_000

// TrackDemand makes the scheduler measure each group's demand for
// Demands from now on: a node that shares its upstream with others (a
// Balancer) calls it before its first request. A scheduler that does not
// keeps no demand, and Demands returns none.
func (s *Scheduler) TrackDemand(now time.Time) {
	s.trackDemand, s.askedSince = true, now
}

// GroupDemand is one group's demand on an upstream at a node.
type GroupDemand struct {
	Weight int64
	// Rate is the cost units the group asked for per Window, measured over
	// the last few calls of Demands, or the last two once its demand fell.
	Rate float64
	// Backlogged: the group had requests waiting throughout the span since
	// the last call, so it asks for more than it gets, whatever Rate says.
	Backlogged bool
	// Cost is the least cost of the group's requests in the last span in
	// which it asked anything: its share is used in steps of at least
	// that (Balancer). 0: unknown.
	Cost int64
	// Once: the group asked one request in the last demandSpans calls,
	// and Rate is its cost over all of them, however young the group.
	Once bool
}

// Demands returns each group's demand at now: the cost units it asked for
// per Window over the last demandSpans calls (refused requests count: they
// were asked for), and whether it was backlogged, its requests waiting
// throughout the span since the last call. A client that keeps n requests
// waiting asks at the rate it is served, whatever that is: its backlog,
// not its rate, says it wants more. A light group's request that waits a
// moment for the pacer does not make it backlogged, since its queue
// drains between requests; so a group asking near the fair level is not
// taken for a heavy one, which would lower the level for all. A group
// with nothing waiting whose rate over the last recentSpans calls fell
// under a quarter of that (a burst that ended) is measured at that recent
// rate. It forgets the groups that stopped asking.
func (s *Scheduler) Demands(now time.Time) []GroupDemand {
	if !s.trackDemand {
		return nil
	}
	elapsed := max(now.Sub(s.askedSince), 1)
	s.askedSince = now
	var ds []GroupDemand
	for g, a := range s.asked {
		a.spans[a.next] = span{a.units, elapsed}
		a.next = (a.next + 1) % demandSpans
		a.units = 0
		if a.least > 0 {
			a.cost, a.least = a.least, 0
		}
		var units, recent int64
		var d, rd time.Duration
		filled := time.Duration(0)
		for i, sp := range a.spans {
			units += sp.units
			d += sp.d
			if sp.d > 0 {
				filled++
			}
			if (a.next-1-i+2*demandSpans)%demandSpans < recentSpans {
				recent += sp.units
				rd += sp.d
			}
		}
		backlogged := a.waited && !a.drained && a.queued > 0
		a.waited, a.drained = a.queued > 0, false
		if units == 0 && a.queued == 0 {
			delete(s.asked, g)
			continue
		}
		w := float64(s.cfg.Window)
		once := units < 2*a.cost
		if once {
			// One request: its cost over the whole memory, as it will be
			// once the group is demandSpans calls old (see GroupDemand.Once).
			d = d * demandSpans / filled
		}
		rate, lately := float64(units)*w/float64(d), float64(recent)*w/float64(rd)
		// Nothing waits and the group asks a quarter of its rate or less
		// of late: a burst that ended. Its node must not hold a share for
		// it (see recentSpans), until it asks again.
		a.fell = a.queued == 0 && lately < rate/4 && (rate-lately >= fellBy*float64(max(a.cost, 1)) || a.fell)
		if a.fell {
			rate = lately
		}
		ds = append(ds, GroupDemand{
			Weight:     a.weight,
			Rate:       rate,
			Backlogged: backlogged,
			Cost:       a.cost,
			Once:       once,
		})
	}
	return ds
}

// queued counts n units of group g as waiting (n < 0: no longer waiting),
// for Demands.
func (s *Scheduler) queued(g string, n int64) {
	a := s.asked[g]
	if a == nil {
		return // enqueued without Admit: not counted as demand
	}
	if a.queued = max(a.queued+n, 0); a.queued == 0 {
		a.drained = true
	}
}

// Config returns the scheduler's configuration, defaults filled in.
func (s *Scheduler) Config() Config { return s.cfg }

// Len returns the number of waiting requests.
func (s *Scheduler) Len() int { return len(s.waiting) }

// Enqueue queues r at now behind its customer's earlier requests. It
// returns ErrQueueFull if the customer has MaxQueue requests waiting, and
// an error naming the field for a bad weight, cost or duplicate id. Call
// Next to release what the pacer allows.
func (s *Scheduler) Enqueue(now time.Time, r Request) error {
	return s.enqueue(now, r, 0, false, false)
}

// enqueue is Enqueue, of a request that waits at most maxWait (0: no
// limit); asked: r was counted in its group's asked tag already (Admit),
// light saying what it found.
func (s *Scheduler) enqueue(now time.Time, r Request, maxWait time.Duration, asked, light bool) error {
	if err := s.validate(r); err != nil {
		return err
	}
	if _, dup := s.waiting[r.ID]; dup {
		return fmt.Errorf("fairshare: ID %d is already waiting", r.ID)
	}
	q := s.queues[r.Customer]
	if q != nil && len(q.reqs) >= s.cfg.MaxQueue {
		return ErrQueueFull
	}
	if q == nil {
		g := s.groups[r.group()]
		if g == nil {
			g = &group{fl: flow{at: -1, asked: s.busy.v}, name: r.group(), custs: make(map[Customer]*custQueue)}
			s.groups[g.name] = g
			asked = false
		}
		s.sweep(g)
		q = &custQueue{fl: flow{at: -1}, name: r.Customer, g: g}
		s.queues[q.name] = q
		g.custs[q.name] = q
	}
	g := q.g
	if !asked {
		light = s.ask(g, r)
	}
	q.weight, g.weight = r.Weight, r.Weight
	if len(q.reqs) == 0 {
		g.keys.join(q)
	}
	if g.backlog == 0 {
		s.busy.join(g)
	}
	q.reqs = append(q.reqs, waiter{r.ID, r.Cost, now, maxWait, light})
	if g.backlog == 0 {
		s.busy.setAhead(g, s.groupLane(g))
	}
	q.backlog += r.Cost
	g.backlog += r.Cost
	s.waiting[r.ID] = q
	s.queued(g.name, r.Cost)
	return nil
}

// Cancel withdraws the waiting request id and reports whether it was
// waiting: false if it was granted or never queued.
func (s *Scheduler) Cancel(id uint64) bool {
	q, ok := s.waiting[id]
	if !ok {
		return false
	}
	delete(s.waiting, id)
	for i, w := range q.reqs {
		if w.id == id {
			q.backlog -= w.cost
			q.g.backlog -= w.cost
			q.reqs = append(q.reqs[:i], q.reqs[i+1:]...)
			s.queued(q.g.name, -w.cost)
			break
		}
	}
	if len(q.reqs) == 0 {
		q.g.keys.remove(q)
	}
	if q.g.backlog == 0 {
		s.busy.remove(q.g)
	}
	s.forget()
	return true
}

// Next releases, in fair order, every request the pacer allows at now, and
// returns them with the time at which the next one may go: zero if none is
// waiting, or none can go until SetRate gives the scheduler a rate. The
// caller calls Next again at wakeAt, or sooner after an Enqueue or a
// SetRate.
func (s *Scheduler) Next(now time.Time) (grants []Grant, wakeAt time.Time) {
	s.pacer.expire(now)
	s.expireSent(now)
	sc := s.cfg.scale()
	// Customers at their Cap, and groups all of whose waiting customers
	// are, are taken out of the queues until Next returns: capWake is when
	// the first of them may go again.
	var (
		heldCusts  []*custQueue
		heldGroups []*group
		capWake    time.Time
	)
	defer func() {
		for _, q := range heldCusts {
			q.g.keys.push(q)
		}
		for _, g := range heldGroups {
			s.busy.push(g)
		}
		s.forget()
	}()
	for s.busy.len() > 0 {
		g := s.busy.top()
		var q *custQueue
		for g.keys.len() > 0 {
			c := g.keys.top()
			at := s.capReady(now, c.name, c.reqs[0].cost)
			if at.IsZero() {
				q = c
				break
			}
			if capWake.IsZero() || at.Before(capWake) {
				capWake = at
			}
			heldCusts = append(heldCusts, g.keys.pop())
		}
		if q == nil {
			heldGroups = append(heldGroups, s.busy.pop())
			continue
		}
		at := s.pacer.readyAt(now, q.reqs[0].cost*sc)
		if at == never {
			return grants, time.Time{}
		}
		if at.After(now) {
			// The head waits: a request behind it that fits in the room
			// the pacer leaves meanwhile, without putting the head off,
			// goes now.
			if bg, bq := s.backfill(now, at, q.reqs[0].cost*sc); bq != nil {
				grants = append(grants, s.release(now, bg, bq, false))
				continue
			}
			return grants, at
		}
		grants = append(grants, s.release(now, g, q, true))
	}
	if len(heldGroups) > 0 {
		return grants, capWake
	}
	return grants, time.Time{}
}

// release sends the head of q, of group g, at now. A release in turn
// moves the groups' virtual time to g's tag; one ahead of its turn
// (backfill) moves only g's own tags, so it costs g its place as a
// release in turn does, and no other group's.
func (s *Scheduler) release(now time.Time, g *group, q *custQueue, inTurn bool) Grant {
	head := q.reqs[0]
	s.pacer.take(now, head.cost*s.cfg.scale())
	s.recordSent(now, q.name, head.cost)
	q.reqs = q.reqs[1:]
	q.backlog -= head.cost
	g.backlog -= head.cost
	delete(s.waiting, head.id)
	s.queued(g.name, -head.cost)
	g.keys.served(q, float64(head.cost), len(q.reqs) > 0)
	if g.keys.v > maxTag {
		g.keys.shift(maps.Values(g.custs))
	}
	units := float64(head.cost) / float64(g.weight)
	if inTurn {
		s.busy.served(g, units, g.backlog > 0)
	} else {
		s.busy.servedAhead(g, units, g.backlog > 0)
	}
	if g.backlog > 0 {
		s.busy.setAhead(g, s.groupLane(g))
	}
	return Grant{ID: head.id, Customer: q.name, Cost: head.cost, At: now, Waited: now.Sub(head.at)}
}

// backfillScan bounds the groups backfill looks at: the first of the
// heap, which hold the least tags but for the top's subtrees' depths.
const backfillScan = 32

// backfill returns the group and customer whose next request may go at
// now, ahead of the top's head of n scaled units that cannot go before
// at, without putting it off: the pacer still lets the head go at at
// after this request. Of those among the first groups of the queue, the
// one of least tag. A costly head waits on the log for room to free
// (Window after earlier releases) with the bucket full; units a smaller
// request could use meanwhile would otherwise go unused. None: nil.
func (s *Scheduler) backfill(now, at time.Time, n int64) (*group, *custQueue) {
	sc := s.cfg.scale()
	var bg *group
	var bq *custQueue
	for _, g := range s.busy.busy[1:min(len(s.busy.busy), backfillScan)] {
		if bg != nil && !s.busy.lessFlow(g.flow(), bg.flow()) {
			continue
		}
		q := g.keys.top()
		m := q.reqs[0].cost * sc
		if !s.capReady(now, q.name, q.reqs[0].cost).IsZero() || s.pacer.readyAt(now, m).After(now) ||
			s.pacer.readyAfter(now, m, n).After(at) {
			continue
		}
		bg, bq = g, q
	}
	return bg, bq
}

// forget drops the groups and customers that no longer owe anything, and
// keeps the tags small. With nothing waiting, nobody owes: every group
// starts afresh. Else it sweeps when the groups (or a group's customers)
// have doubled since the last sweep, so its cost per call is constant on
// average.
func (s *Scheduler) forget() {
	if len(s.waiting) == 0 {
		clear(s.groups)
		clear(s.queues)
		s.busy.v, s.swept = 0, 0
		return
	}
	if len(s.groups) > 2*s.swept+64 {
		for name, g := range s.groups {
			if g.fl.at < 0 && g.backlog == 0 && g.fl.finish <= s.busy.v && g.fl.asked <= s.busy.v-lightDepth {
				for c := range g.custs {
					delete(s.queues, c)
				}
				delete(s.groups, name)
			}
		}
		s.swept = len(s.groups)
	}
	if s.busy.v > maxTag {
		s.busy.shift(maps.Values(s.groups))
	}
}

// sweep drops g's customers that wait for nothing and no longer owe, when
// they have doubled since the last sweep.
func (s *Scheduler) sweep(g *group) {
	if len(g.custs) <= 2*g.swept+16 {
		return
	}
	for c, q := range g.custs {
		if q.fl.at < 0 && len(q.reqs) == 0 && q.fl.finish <= g.keys.v {
			delete(g.custs, c)
			delete(s.queues, c)
		}
	}
	g.swept = len(g.custs)
}

// recordSent counts cost units released to c at now against the Cap.
func (s *Scheduler) recordSent(now time.Time, c Customer, cost int64) {
	if s.cfg.Cap <= 0 {
		return
	}
	l := s.sent[c]
	if l == nil {
		l = &sentLog{}
		s.sent[c] = l
	}
	l.log = append(l.log, release{now, cost})
	l.sum += cost
	s.sentLogs = append(s.sentLogs, sentRelease{now, c})
}

// expireSent forgets the releases that no longer count against the Cap
// at now, and the customers left with none.
func (s *Scheduler) expireSent(now time.Time) {
	i := 0
	for ; i < len(s.sentLogs) && now.Sub(s.sentLogs[i].at) >= s.cfg.Window; i++ {
		l := s.sent[s.sentLogs[i].c]
		l.sum -= l.log[0].n
		if l.log = l.log[1:]; len(l.log) == 0 {
			delete(s.sent, s.sentLogs[i].c)
		}
	}
	if i > 0 {
		s.sentLogs = append(s.sentLogs[:0], s.sentLogs[i:]...)
	}
}

// capReady returns zero if c may be released cost more units at now under
// the Cap, else when it may: when enough of its releases have left the
// window. expireSent(now) must have run.
func (s *Scheduler) capReady(now time.Time, c Customer, cost int64) time.Time {
	l := s.sent[c]
	if s.cfg.Cap <= 0 || l == nil || l.sum+cost <= s.cfg.Cap {
		return time.Time{}
	}
	left := l.sum
	for _, x := range l.log {
		left -= x.n
		if left+cost <= s.cfg.Cap {
			return x.at.Add(s.cfg.Window)
		}
	}
	return now // cannot happen: cost is at most Cap
}

// capWait returns how long c must wait under the Cap for its backlog and
// cost more units to go: until its releases leave the window to make room
// for the first Cap of them, then a Window for each Cap more.
func (s *Scheduler) capWait(now time.Time, c Customer, units int64) time.Duration {
	if s.cfg.Cap <= 0 {
		return 0
	}
	var sent int64
	l := s.sent[c]
	if l != nil {
		sent = l.sum
	}
	if sent+units <= s.cfg.Cap {
		return 0
	}
	var first time.Duration
	if l != nil {
		if at := s.capReady(now, c, min(units, s.cfg.Cap)); !at.IsZero() {
			first = at.Sub(now)
		}
	}
	more := max(units-s.cfg.Cap, 0)
	return first + time.Duration(float64(s.cfg.Window)*float64(more)/float64(s.cfg.Cap))
}

// Estimate returns how long a new request of customer c of group (empty:
// its own) with this weight and cost would wait if enqueued at now, were
// no other request to arrive, less what the pacer can send at once: the
// cost units released before it, in the order the fair queues release
// them. Within its group, each customer waiting is released as much as c
// until c's backlog and this request are; among the groups, each group
// waiting is released its weight's worth for each unit of c's group's
// weight until then, or all it has; and a group whose next request goes
// in its lane ahead of this one, that request. A customer owing nothing
// goes ahead of every group waiting but those, so a light customer's
// estimate is about one release. It is the estimate of a request with no
// maximum wait (which has a lane if light); Admit's is of one with its
// own. A caller with a maximum wait refuses a request whose estimate
// exceeds it (ErrShortage) instead of queueing it. With a Cap, it is at
// least the wait the Cap imposes on c's backlog and this request.
func (s *Scheduler) Estimate(now time.Time, c Customer, group string, weight, cost int64) time.Duration {
	g := s.groups[cmp.Or(group, string(c))]
	if q := s.queues[c]; q != nil {
		g = q.g
	}
	light := g == nil || max(g.fl.asked, s.busy.v-lightDepth) <= s.busy.v
	return s.estimate(now, c, group, weight, cost, s.laneFor(light, 0))
}

// estimate is Estimate of a request with a lane of early (laneFor).
func (s *Scheduler) estimate(now time.Time, c Customer, group string, weight, cost int64, early float64) time.Duration {
	d := s.fairWait(now, c, group, weight, cost, early)
	if s.cfg.Cap > 0 {
		s.expireSent(now)
		units := cost
		if q := s.queues[c]; q != nil {
			units += q.backlog
		}
		d = max(d, s.capWait(now, c, units))
	}
	return d
}

// fairWait is estimate without the Cap: the request's group goes as if
// its tag were early less, and so does each group waiting by its own
// lane.
func (s *Scheduler) fairWait(now time.Time, c Customer, group string, weight, cost int64, early float64) time.Duration {
	s.pacer.expire(now)
	g, q := s.groups[cmp.Or(group, string(c))], s.queues[c]
	if q != nil {
		g = q.g
	}
	// The request's start tag among the groups, and the units of its own
	// group released before it.
	tag, ahead := s.busy.v, 0.0
	if g != nil {
		tag = startTag(&g.fl, s.busy.v)
		kTag := g.keys.v
		if q != nil {
			kTag = startTag(&q.fl, g.keys.v) + float64(q.backlog)
			ahead = float64(q.backlog)
		}
		for _, k := range g.keys.busy {
			if k != q {
				ahead += min(float64(k.backlog), max(kTag-k.fl.start, 0))
			}
		}
		tag += ahead / float64(min(max(weight, 1), MaxWeight))
	}
	tag = max(tag-early, min(tag, s.busy.v-credit))
	work := ahead + float64(cost)
	for _, j := range s.busy.busy {
		if j == g {
			continue
		}
		u := max(tag-j.fl.start, 0) * float64(j.weight)
		if j.fl.ahead > 0 && j.fl.start-j.fl.ahead < tag {
			// Its next request goes in its lane, before this one.
			u = max(u, float64(j.keys.top().reqs[0].cost))
		}
		work += min(float64(j.backlog), u)
	}
	sc := s.cfg.scale()
	if s.pacer.rate < s.expect {
		// The node is to hold more of the upstream soon: estimate at that
		// rate, and the pacer's hold-ups at the present one do not count.
		return time.Duration(max(work, 0) * float64(sc) * float64(s.cfg.Window) / float64(s.expect))
	}
	if s.pacer.rate <= 0 {
		return maxEstimate
	}
	work -= float64(s.pacer.available(now)) / float64(sc)
	d := time.Duration(min(max(work, 0)*float64(sc)*s.pacer.t, float64(maxEstimate)))
	if at := s.pacer.readyAt(now, cost*sc); at == never {
		return maxEstimate
	} else if at.Sub(now) > d {
		d = at.Sub(now)
	}
	return d
}

// startTag returns the start tag of f's next request in a queue at
// virtual time v: its own if it waits, else the one it would join with.
func startTag(f *flow, v float64) float64 {
	if f.at >= 0 {
		return f.start
	}
	return max(f.finish, v-credit)
}

// maxEstimate is the estimate of a request that cannot go until the
// scheduler's rate changes: longer than any maximum wait.
const maxEstimate = time.Duration(1<<63 - 1)

// Stats is a scheduler's live state, for operators.
type Stats struct {
	// Waiting is the number of requests waiting; Customers the number of
	// customers with at least one.
	Waiting   int
	Customers int
	// Queues are the longest customer queues, longest first (ties by
	// name), at most the number asked for.
	Queues []QueueStats
	// Granted is the cost units released in the last Window, and
	// Utilisation that over Rate (0 to 1).
	Granted     int64
	Utilisation float64
	// Share is the cost units per Window this node may release (the rate
	// on one node), Nodes the number of nodes sharing the upstream and
	// Level their fair level per unit of weight (+Inf: every group gets
	// all it asks; 0 on one node). Upstream.Stats fills them.
	Share float64
	Nodes int
	Level float64
}

// QueueStats is one customer's queue.
type QueueStats struct {
	Customer Customer
	Weight   int64
	Waiting  int
	Backlog  int64 // the sum of its waiting requests' costs
}

// Stats returns the scheduler's state at now, with at most top queues.
func (s *Scheduler) Stats(now time.Time, top int) Stats {
	s.pacer.expire(now)
	sc := s.cfg.scale()
	st := Stats{Waiting: len(s.waiting), Granted: s.pacer.inLog / sc, Utilisation: float64(s.pacer.inLog) / float64(s.cfg.Rate*sc)}
	for _, q := range s.queues {
		if len(q.reqs) == 0 {
			continue
		}
		st.Customers++
		st.Queues = append(st.Queues, QueueStats{Customer: q.name, Weight: q.weight, Waiting: len(q.reqs), Backlog: q.backlog})
	}
	slices.SortFunc(st.Queues, func(a, b QueueStats) int {
		if a.Waiting != b.Waiting {
			return b.Waiting - a.Waiting
		}
		return strings.Compare(string(a.Customer), string(b.Customer))
	})
	if len(st.Queues) > max(top, 0) {
		st.Queues = slices.Clip(st.Queues[:max(top, 0)])
	}
	return st
}
