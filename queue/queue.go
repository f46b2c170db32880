// Package queue runs messages through bounded FIFO queues with SQS FIFO's
// guarantees, in process: strict order within a message group, one message
// of a group in flight at a time, a message id seen in the last five
// minutes not delivered twice, and a message whose delivery fails, or does
// not end within the visibility timeout, delivered again, first of its
// group, up to a number of receives, then dropped to a dead letter so that
// its group moves on. Delivery is at least once: a handler that timed out
// may still finish after the message was delivered again. Its workers serve tenants fairly, by deficit
// round robin in which every message costs one: each tenant with a message
// ready takes one turn in rotation, so one busy tenant cannot starve the
// others.
//
// The WebSocket gateway runs messages through a Queue per tenant with one
// worker ("silo") or through one Queue shared by all tenants with several
// workers ("pooled").
package queue

import (
	"container/list"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
)

// Message is one message. Group orders it: messages of one group are
// handled in the order they were enqueued, one at a time.
type Message struct {
	Tenant string
	Group  string
	// ID deduplicates: a message whose group and id were enqueued in the
	// last dedup window is refused with ErrDuplicate. Empty: no dedup.
	ID   string
	Body any
	// Receives is how many times the message has been delivered, this
	// delivery included: 1 at the first.
	Receives int

	visibleAt time.Time // after a failed delivery, when it may go again
}

// Errors of Enqueue, with their kinds: a full queue is exhausted (the
// sender may try again), a duplicate a conflict, a closed queue
// unavailable.
var (
	ErrFull      = &sluice.Error{Op: "queue", Kind: sluice.KindExhausted, Message: "full"}
	ErrDuplicate = &sluice.Error{Op: "queue", Kind: sluice.KindConflict, Message: "duplicate message id"}
	ErrClosed    = &sluice.Error{Op: "queue", Kind: sluice.KindUnavailable, Message: "closed"}
)

// Handler handles one message and returns nil once it is done with it. An
// error, or a delivery still running at the visibility timeout, has the
// message delivered again. ctx is cancelled at the visibility timeout and
// at Close: a handler should return then, since Close waits for it.
type Handler func(ctx context.Context, m Message) error

// errVisibilityTimeout is a delivery that outlived the visibility timeout.
var errVisibilityTimeout = errors.New("queue: delivery did not end within the visibility timeout")

// Options configures a Queue. The zero Options are the defaults.
type Options struct {
	// Capacity caps the messages waiting, across tenants. Default 10,000.
	Capacity int
	// TenantCapacity caps one tenant's messages waiting, so that one
	// tenant cannot fill a shared queue. Default Capacity.
	TenantCapacity int
	// Dedup remembers message ids; queues that share one refuse an id
	// seen by any of them. Default: the queue's own, with DedupWindow and
	// MaxDedup.
	Dedup *Dedup
	// Workers handle messages concurrently (never two of one group).
	// Default 1.
	Workers int
	// DedupWindow is how long a message id is remembered. Default 5m.
	DedupWindow time.Duration
	// MaxDedup caps the ids remembered; past it the oldest are forgotten
	// early. Default 100,000.
	MaxDedup int
	// VisibilityTimeout is how long a delivery may run before its message
	// is delivered again, as SQS's. Default 30s.
	VisibilityTimeout time.Duration
	// MaxReceives is the most deliveries of one message, the first
	// included; past it the message is dropped, told to DeadLetter, and
	// its group moves on. Default 5.
	MaxReceives int
	// RetryDelay is the wait before a failed delivery is made again,
	// doubling at each further one; its group waits with it. Default
	// 100ms.
	RetryDelay time.Duration
	// DeadLetter is told of every message dropped after MaxReceives, with
	// the last delivery's error. Optional.
	DeadLetter func(m Message, err error)
	Now        func() time.Time
}

// maxOverdue bounds the deliveries still running past their visibility
// timeout (handlers that ignore their context): past it, a worker waits for
// its delivery to end rather than leave another goroutine behind.
const maxOverdue = 64

// Queue is a bounded, fair, group-ordered queue with its workers. It is safe
// for concurrent use.
type Queue struct {
	opts   Options
	handle Handler

	mu      sync.Mutex
	ready   *sync.Cond
	tenants map[string]*tenantQ
	ring    []*tenantQ // tenants with messages, in turn order
	next    int        // whose turn
	waiting int
	closed  bool
	room    chan struct{} // closed, and made anew, whenever a message is taken

	wg       sync.WaitGroup // the workers
	handlers sync.WaitGroup // the deliveries, some of which may be overdue
	overdue  atomic.Int64
	cancel   context.CancelFunc
}

type tenantQ struct {
	name     string
	pending  *list.List      // of Message, in arrival order
	inFlight map[string]bool // groups with a message being handled
	inRing   bool
}

// Dedup remembers message ids for a window, by message group. It is safe
// for concurrent use; queues may share one.
type Dedup struct {
	mu     sync.Mutex
	window time.Duration
	max    int
	seen   map[string]time.Time // group\x00id -> when seen
	order  *list.List           // of seenEntry, oldest first
}

type seenEntry struct {
	key string
	at  time.Time
}

// NewDedup returns a Dedup remembering ids for window, at most max of them
// (past it the oldest are forgotten early).
func NewDedup(window time.Duration, max int) *Dedup {
	return &Dedup{window: window, max: max, seen: map[string]time.Time{}, order: list.New()}
}

// seen records group and id at now, and reports whether they were seen in
// the window.
func (d *Dedup) check(now time.Time, group, id string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for e := d.order.Front(); e != nil; e = d.order.Front() {
		s := e.Value.(seenEntry)
		if now.Sub(s.at) < d.window && d.order.Len() < d.max {
			break
		}
		d.order.Remove(e)
		if d.seen[s.key] == s.at {
			delete(d.seen, s.key)
		}
	}
	key := group + "\x00" + id
	if at, ok := d.seen[key]; ok && now.Sub(at) < d.window {
		return true
	}
	d.seen[key] = now
	d.order.PushBack(seenEntry{key, now})
	return false
}

// New returns a Queue and starts its workers. Close stops them.
func New(opts Options, handle Handler) *Queue {
	if opts.Capacity <= 0 {
		opts.Capacity = 10_000
	}
	if opts.Workers <= 0 {
		opts.Workers = 1
	}
	if opts.DedupWindow <= 0 {
		opts.DedupWindow = 5 * time.Minute
	}
	if opts.MaxDedup <= 0 {
		opts.MaxDedup = 100_000
	}
	if opts.TenantCapacity <= 0 {
		opts.TenantCapacity = opts.Capacity
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.VisibilityTimeout <= 0 {
		opts.VisibilityTimeout = 30 * time.Second
	}
	if opts.MaxReceives <= 0 {
		opts.MaxReceives = 5
	}
	if opts.RetryDelay <= 0 {
		opts.RetryDelay = 100 * time.Millisecond
	}
	if opts.Dedup == nil {
		opts.Dedup = NewDedup(opts.DedupWindow, opts.MaxDedup)
	}
	ctx, cancel := context.WithCancel(context.Background())
	q := &Queue{opts: opts, handle: handle, tenants: map[string]*tenantQ{}, cancel: cancel, room: make(chan struct{})}
	q.ready = sync.NewCond(&q.mu)
	for range opts.Workers {
		q.wg.Go(func() { q.work(ctx) })
	}
	return q
}

// Enqueue adds m. It returns ErrFull when Capacity messages wait, or
// TenantCapacity of m's tenant (nothing is dropped silently: the caller
// tells its sender), ErrDuplicate for an id of m's group seen in the dedup
// window, ErrClosed after Close.
func (q *Queue) Enqueue(m Message) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return ErrClosed
	}
	t := q.tenants[m.Tenant]
	if q.waiting >= q.opts.Capacity || (t != nil && t.pending.Len() >= q.opts.TenantCapacity) {
		return ErrFull
	}
	if m.ID != "" && q.opts.Dedup.check(q.opts.Now(), m.Group, m.ID) {
		return ErrDuplicate
	}
	if t == nil {
		t = &tenantQ{name: m.Tenant, pending: list.New(), inFlight: map[string]bool{}}
		q.tenants[m.Tenant] = t
	}
	t.pending.PushBack(m)
	q.waiting++
	if !t.inRing {
		t.inRing = true
		q.ring = append(q.ring, t)
	}
	q.ready.Signal()
	return nil
}

// EnqueueWait is Enqueue, waiting while the queue, or m's tenant's share
// of it, is full, until there is room or ctx ends (then ErrFull): for a
// sender that stops reading its own input while it waits, so that its
// client feels the back-pressure.
func (q *Queue) EnqueueWait(ctx context.Context, m Message) error {
	for {
		q.mu.Lock()
		room := q.room
		q.mu.Unlock()
		err := q.Enqueue(m)
		if !errors.Is(err, ErrFull) {
			return err
		}
		select {
		case <-room:
		case <-ctx.Done():
			return ErrFull
		}
		// Closed meanwhile: Enqueue answers ErrClosed next.
	}
}

// Len returns the number of messages waiting.
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.waiting
}

// nextLocked takes the next message to handle: the tenants take turns
// (deficit round robin with a quantum of one message), and within a tenant
// the oldest message whose group has none in flight. It returns false if no
// message can be handled now.
func (q *Queue) nextLocked() (Message, *tenantQ, bool) {
	var now time.Time
	var waiting map[string]bool // groups whose first message waits to go again
	for range len(q.ring) {
		if q.next >= len(q.ring) {
			q.next = 0
		}
		t := q.ring[q.next]
		for e := t.pending.Front(); e != nil; e = e.Next() {
			m := e.Value.(Message)
			if t.inFlight[m.Group] || waiting[m.Group] {
				continue
			}
			if !m.visibleAt.IsZero() {
				if now.IsZero() {
					now = time.Now()
				}
				if now.Before(m.visibleAt) {
					if waiting == nil {
						waiting = map[string]bool{}
					}
					waiting[m.Group] = true // and its group behind it
					continue
				}
			}
			t.pending.Remove(e)
			t.inFlight[m.Group] = true
			q.waiting--
			close(q.room) // a sender waiting for room looks again
			q.room = make(chan struct{})
			q.next++ // the next tenant's turn
			return m, t, true
		}
		q.next++
	}
	return Message{}, nil, false
}

// work is one worker: it takes messages in turn and handles them, until
// Close.
func (q *Queue) work(ctx context.Context) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for {
		m, t, ok := q.nextLocked()
		for !ok {
			if q.closed {
				return
			}
			q.ready.Wait()
			m, t, ok = q.nextLocked()
		}
		q.mu.Unlock()
		m.Receives++
		err := q.deliver(ctx, m)
		var dead bool
		q.mu.Lock()
		delete(t.inFlight, m.Group)
		switch {
		case err == nil || q.closed:
		case m.Receives < q.opts.MaxReceives:
			// Delivered again, first of its group: order holds. A
			// failure waits a delay that doubles; a timeout has waited.
			if !errors.Is(err, errVisibilityTimeout) {
				delay := q.opts.RetryDelay << min(m.Receives-1, 16)
				m.visibleAt = time.Now().Add(delay)
				time.AfterFunc(delay, q.wake)
			}
			t.pending.PushFront(m)
			q.waiting++
		default:
			dead = true
		}
		if t.pending.Len() == 0 && len(t.inFlight) == 0 {
			q.dropLocked(t)
		} else if !t.inRing {
			t.inRing = true
			q.ring = append(q.ring, t)
		}
		// The group's next message may be ready for another worker.
		q.ready.Broadcast()
		if dead && q.opts.DeadLetter != nil {
			q.mu.Unlock()
			q.opts.DeadLetter(m, err)
			q.mu.Lock()
		}
	}
}

// wake has the workers look for messages again: a message waiting to go
// again may be ready.
func (q *Queue) wake() {
	q.mu.Lock()
	q.ready.Broadcast()
	q.mu.Unlock()
}

// deliver runs the handler on m and returns its error, or
// errVisibilityTimeout if it is still running at the visibility timeout;
// then it runs on with its context cancelled, and Close waits for it.
func (q *Queue) deliver(ctx context.Context, m Message) error {
	dctx, cancel := context.WithTimeout(ctx, q.opts.VisibilityTimeout)
	done := make(chan error, 1)
	const running, finished, leftBehind = 0, 1, 2
	var state atomic.Int32
	q.handlers.Go(func() {
		defer cancel()
		done <- q.handle(dctx, m)
		if !state.CompareAndSwap(running, finished) {
			q.overdue.Add(-1) // it was left behind, and is no longer
		}
	})
	select {
	case err := <-done:
		return err
	case <-dctx.Done():
	}
	if q.overdue.Load() >= maxOverdue || !state.CompareAndSwap(running, leftBehind) {
		return <-done // too many left behind already, or just finished
	}
	q.overdue.Add(1)
	return errVisibilityTimeout
}

// CloseIfIdle closes the queue if no message waits nor is in flight, and
// reports whether it did; an Enqueue after it answers ErrClosed. It does
// not wait: Close then waits for the workers to end. For an owner that
// makes queues on demand and drops idle ones, under its own lock.
func (q *Queue) CloseIfIdle() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed || q.waiting > 0 || len(q.tenants) > 0 {
		return false
	}
	q.closed = true
	q.ready.Broadcast()
	close(q.room)
	q.cancel()
	return true
}

// dropLocked takes an empty tenant out of the rotation.
func (q *Queue) dropLocked(t *tenantQ) {
	for i, x := range q.ring {
		if x == t {
			q.ring = append(q.ring[:i], q.ring[i+1:]...)
			if q.next > i {
				q.next--
			}
			break
		}
	}
	t.inRing = false
	delete(q.tenants, t.name)
}

// Close stops taking messages, lets the workers finish the messages in
// flight, drops the rest, and waits for the workers. It returns the number
// of messages dropped.
func (q *Queue) Close() int {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		q.wg.Wait()
		q.handlers.Wait()
		return 0
	}
	q.closed = true
	close(q.room) // senders waiting for room find the queue closed
	dropped := q.waiting
	for _, t := range q.tenants {
		t.pending.Init()
	}
	q.waiting = 0
	q.ready.Broadcast()
	q.mu.Unlock()
	q.cancel()
	q.wg.Wait()
	q.handlers.Wait()
	return dropped
}
