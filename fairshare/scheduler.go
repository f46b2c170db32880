package fairshare

import (
	"cmp"
	"fmt"
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
	// the latest request's weight is the customer's.
	Weight int64
	// Cost is the upstream units the request uses, 1 to Burst.
	Cost int64
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
	cfg     Config
	pacer   pacer
	queues  map[Customer]*custQueue
	active  []*custQueue // customers with a request waiting, in turn order
	cur     int          // index in active of the customer whose turn it is
	fresh   []*custQueue // customers new to the rotation, served before it
	waiting map[uint64]*custQueue
	groups  map[string]int // customers in the rotation, by group
}

type custQueue struct {
	name    Customer
	group   string
	weight  int64
	deficit float64 // a group's quantum is split among its customers
	topped  bool    // received this turn's quantum
	// inRotation: in active, perhaps with an empty queue until its turn.
	inRotation bool
	reqs       []waiter
	backlog    int64 // sum of reqs' costs
}

type waiter struct {
	id   uint64
	cost int64
	at   time.Time
}

// NewScheduler returns a Scheduler for cfg, defaulted and validated.
func NewScheduler(cfg Config) (*Scheduler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &Scheduler{
		cfg:     cfg,
		pacer:   newPacer(cfg.Rate, cfg.Window, cfg.Burst),
		queues:  make(map[Customer]*custQueue),
		waiting: make(map[uint64]*custQueue),
		groups:  make(map[string]int),
	}, nil
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
	switch {
	case r.Weight < 1 || r.Weight > MaxWeight:
		return fmt.Errorf("fairshare: Weight %d must be 1 to %d", r.Weight, MaxWeight)
	case r.Cost < 1 || r.Cost > s.cfg.Burst:
		return fmt.Errorf("fairshare: Cost %d must be 1 to Burst (%d)", r.Cost, s.cfg.Burst)
	}
	if _, dup := s.waiting[r.ID]; dup {
		return fmt.Errorf("fairshare: ID %d is already waiting", r.ID)
	}
	q := s.queues[r.Customer]
	if q == nil {
		q = &custQueue{name: r.Customer, group: cmp.Or(r.Group, string(r.Customer))}
		s.queues[r.Customer] = q
	}
	if len(q.reqs) >= s.cfg.MaxQueue {
		return ErrQueueFull
	}
	q.weight = r.Weight
	if !q.inRotation {
		// A customer new to the rotation goes next, as a sparse flow in
		// FQ-CoDel: light customers wait little. It stays in the rotation
		// until a turn finds its queue empty, so it cannot jump the
		// rotation more than once per round. Only a group's first
		// customer in the rotation goes next: a group naming new
		// customers one after another joins the rotation's end with
		// them, and jumps it no more than once per round either.
		if s.groups[q.group] == 0 {
			s.fresh = append(s.fresh, q)
		} else {
			s.active = slices.Insert(s.active, s.cur, q)
			s.cur = (s.cur + 1) % len(s.active)
		}
		s.groups[q.group]++
		q.inRotation = true
	}
	q.reqs = append(q.reqs, waiter{r.ID, r.Cost, now})
	q.backlog += r.Cost
	s.waiting[r.ID] = q
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
			q.reqs = append(q.reqs[:i], q.reqs[i+1:]...)
			break
		}
	}
	return true
}

// endTurn ends c's turn: a fresh customer joins the rotation last, just
// before the customer whose turn it is; one in the rotation passes the turn
// on.
func (s *Scheduler) endTurn(c *custQueue, fresh bool) {
	c.topped = false
	if !fresh {
		s.cur = (s.cur + 1) % len(s.active)
		return
	}
	s.fresh = s.fresh[1:]
	s.active = slices.Insert(s.active, s.cur, c)
	s.cur = (s.cur + 1) % len(s.active)
}

// leave takes the customer at s.cur, whose queue is empty, out of the
// rotation; the next customer's turn begins.
func (s *Scheduler) leave() {
	q := s.active[s.cur]
	s.active = slices.Delete(s.active, s.cur, s.cur+1)
	if s.cur >= len(s.active) {
		s.cur = 0
	}
	q.deficit, q.topped, q.inRotation = 0, false, false
	if s.groups[q.group]--; s.groups[q.group] <= 0 {
		delete(s.groups, q.group)
	}
	delete(s.queues, q.name)
}

// Next releases, in fair order, every request the pacer allows at now, and
// returns them with the time at which the next one may go (zero if none is
// waiting). The caller calls Next again at wakeAt, or sooner after an
// Enqueue.
func (s *Scheduler) Next(now time.Time) (grants []Grant, wakeAt time.Time) {
	s.pacer.expire(now)
	for len(s.fresh) > 0 || len(s.active) > 0 {
		fresh := len(s.fresh) > 0
		q := s.fresh
		if !fresh {
			q = s.active[s.cur:]
		}
		c := q[0]
		if len(c.reqs) == 0 {
			if fresh {
				s.endTurn(c, true) // withdrawn: lingers in the rotation
			} else {
				s.leave()
			}
			continue
		}
		if !c.topped {
			c.deficit += float64(s.cfg.Quantum*c.weight) / float64(max(s.groups[c.group], 1))
			c.topped = true
		}
		head := c.reqs[0]
		if float64(head.cost) > c.deficit {
			s.endTurn(c, fresh)
			continue
		}
		if at := s.pacer.readyAt(now, head.cost); at.After(now) {
			return grants, at
		}
		s.pacer.take(now, head.cost)
		c.deficit -= float64(head.cost)
		c.reqs = c.reqs[1:]
		c.backlog -= head.cost
		delete(s.waiting, head.id)
		grants = append(grants, Grant{ID: head.id, Customer: c.name, Cost: head.cost, At: now, Waited: now.Sub(head.at)})
		if len(c.reqs) == 0 {
			// Its turn ends, but it keeps its place until the next: a
			// customer that sends one request at a time cannot rejoin as
			// new after each.
			c.deficit = 0
			s.endTurn(c, fresh)
		}
	}
	return grants, time.Time{}
}

// Estimate returns how long a new request of customer c of group (empty:
// its own) with this weight and cost would wait if enqueued at now, were
// no other request to arrive: the finish time of fluid weighted fair
// sharing (GPS) over the backlogs waiting, each customer's weight its
// group's split among the group's customers in the rotation, less what the
// pacer can send at once. A caller with a maximum wait refuses a request
// whose estimate exceeds it (ErrShortage) instead of queueing it. DRR
// tracks GPS to within a turn per customer, so the estimate may be short
// by up to a round of the rotation.
func (s *Scheduler) Estimate(now time.Time, c Customer, group string, weight, cost int64) time.Duration {
	s.pacer.expire(now)
	group = cmp.Or(group, string(c))
	mine := float64(cost)
	n := s.groups[group] // c's group's customers in the rotation, c among them
	if q := s.queues[c]; q != nil {
		mine += float64(q.backlog)
		if !q.inRotation {
			n++
		}
	} else {
		n++
	}
	share := float64(min(max(weight, 1), MaxWeight)) / float64(max(n, 1))
	// Until c's backlog drains, customer j receives share_j/share_c of what
	// c does, or all it has.
	work := mine
	for _, q := range slices.Concat(s.fresh, s.active) {
		if q.name != c {
			j := float64(q.weight) / float64(max(s.groups[q.group], 1))
			work += min(float64(q.backlog), mine*j/share)
		}
	}
	work -= float64(s.pacer.available(now))
	d := time.Duration(max(work, 0) * float64(s.pacer.t))
	if at := s.pacer.readyAt(now, cost).Sub(now); at > d {
		d = at
	}
	return d
}

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
	st := Stats{Waiting: len(s.waiting), Granted: s.pacer.inLog, Utilisation: float64(s.pacer.inLog) / float64(s.cfg.Rate)}
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
