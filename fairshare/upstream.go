package fairshare

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Options configures an Upstream beyond its Config. The zero Options are
// the defaults.
type Options struct {
	// Now is the clock; default time.Now. Tests may pass a fake one, or run
	// under testing/synctest. The Upstream keeps only its readings' wall
	// clock, never earlier than one it kept before (see wallClock).
	Now func() time.Time
	// Ledger, if not nil, shares the upstream with the other nodes that
	// use the same ledger: the Upstream releases at this node's share,
	// which a goroutine of its own resizes every Interval (Balancer). Nil:
	// this node has the whole rate.
	Ledger Ledger
	// Interval is how often the share is resized. Default 1s.
	Interval time.Duration
	// Logger receives the ledger's errors. Default: discard.
	Logger *slog.Logger
	// Observer, if not nil, is told how each Acquire ends, for metrics.
	Observer Observer
}

// Observer is told how each Acquire of an Upstream ends: granted after
// waiting, or refused for a reason (one of the Refused constants). It must
// be safe for concurrent use and fast; it is called without the
// Upstream's lock.
type Observer interface {
	Granted(waited time.Duration)
	Refused(reason string)
}

// The reasons of a refusal, as an Observer is told them.
const (
	RefusedEstimate  = "estimate"   // its estimated wait exceeded its maximum wait: refused at once
	RefusedExpired   = "expired"    // it waited its maximum wait without its turn
	RefusedQueueFull = "queue_full" // its customer had MaxQueue requests waiting, or the upstream as many groups asking as it tracks
	RefusedCancelled = "cancelled"  // its caller went (its context ended) first
	RefusedClosed    = "closed"     // the Upstream was closed
	RefusedInvalid   = "invalid"    // a bad weight or cost
	// RefusedUnavailable: the ledger fails and the node cannot release
	// the request within its maximum wait (ErrUnavailable).
	RefusedUnavailable = "unavailable"
)

// RefusedReasons are every reason of a refusal.
var RefusedReasons = []string{RefusedEstimate, RefusedExpired, RefusedQueueFull, RefusedCancelled, RefusedClosed, RefusedInvalid, RefusedUnavailable}

// Upstream is a Scheduler for concurrent callers: Acquire blocks until the
// caller's request is released, refused or cancelled. One goroutine, owned
// by the Upstream and stopped by Close, releases requests at the times the
// scheduler names. Upstream is safe for concurrent use.
type Upstream struct {
	clock   *wallClock
	now     func() time.Time // clock's
	mu      sync.Mutex
	s       *Scheduler
	nextID  uint64
	waiters map[uint64]chan Grant // each buffered 1: the loop never blocks
	closed  bool
	kick    chan struct{} // buffered 1: the queue changed
	done    chan struct{} // closed by Close
	stopped chan struct{} // closed when the loop has returned
	obs     Observer      // nil: none

	// With a ledger: the balancer, owned by the balance goroutine, and
	// what its last step gave, under mu.
	bal       *Balancer
	interval  time.Duration
	logger    *slog.Logger
	share     Share
	lastGrant time.Time
	ctx       context.Context // the ledger's calls; cancelled by Close
	cancel    context.CancelFunc
	rebalance chan struct{} // buffered 1: a request came while the share is 0
	balanced  chan struct{} // closed when the balance goroutine has returned
	// failed is the last resize's ledger error, nil if it succeeded; down
	// is closed once a resize finds the ledger failing and the node able
	// to release nothing (unavailable), and replaced by an open one when
	// the ledger answers again. Both under mu.
	failed error
	down   chan struct{}
	// sized is whether a resize has run: until then the node has no
	// share to estimate a wait by, and a request waits for the first.
	sized bool
}

// NewUpstream returns a running Upstream for cfg; Close stops it.
func NewUpstream(cfg Config, opts Options) (*Upstream, error) {
	s, err := NewScheduler(cfg)
	if err != nil {
		return nil, err
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	u := &Upstream{
		clock:     &wallClock{read: opts.Now},
		s:         s,
		waiters:   make(map[uint64]chan Grant),
		kick:      make(chan struct{}, 1),
		done:      make(chan struct{}),
		stopped:   make(chan struct{}),
		interval:  opts.Interval,
		logger:    opts.Logger,
		rebalance: make(chan struct{}, 1),
		balanced:  make(chan struct{}),
		obs:       opts.Observer,
		down:      make(chan struct{}),
	}
	u.now = u.clock.now
	if u.interval <= 0 {
		u.interval = DefaultInterval
	}
	if u.logger == nil {
		u.logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.Ledger == nil {
		close(u.balanced)
	} else {
		if u.bal, err = NewBalancer(cfg, opts.Ledger, 0); err != nil {
			return nil, err
		}
		// Nothing goes until the first step claims a share.
		s.SetRate(u.now(), 0, 0, time.Time{})
		s.TrackDemand(u.now())
		u.ctx, u.cancel = context.WithCancel(context.Background())
		go u.balance()
	}
	go u.loop()
	return u, nil
}

// wallClock is an Upstream's clock: the wall clock of read's readings
// alone, never earlier than a reading it returned before. A grant's time
// is the wall clock (the client and the other nodes see no other), so the
// pacer must measure its windows on that clock too: time.Now reads the
// wall clock, then the monotonic one, and a thread preempted between the
// two (for milliseconds on a loaded machine, 212 ms seen on a 2-core one)
// returns a wall reading that early beside its monotonic one. Paced on the
// monotonic reading, a release stamped that early joined the releases of
// the window before it: more than the rate by grant time. Clamped, a wall
// clock that steps back stands still until it has caught up, and no
// release is stamped before one already made.
type wallClock struct {
	read func() time.Time
	last atomic.Int64 // the latest reading returned, in Unix nanoseconds
}

func (c *wallClock) now() time.Time {
	now, _ := c.both()
	return now
}

// both returns the clock's reading and the wall clock's own, which is
// earlier while the clock stands still after the wall clock stepped back.
// A claim's lease lapses by the wall clock of the node that wrote it:
// the Balancer reckons when its claims lapse from the wall clock's
// reading, so that it stops releasing in time (Share.Stop) while the
// clock stands still.
func (c *wallClock) both() (now, wall time.Time) {
	wall = c.read().Round(0) // Round(0) drops the monotonic reading
	n := wall.UnixNano()
	for {
		last := c.last.Load()
		if n <= last {
			return wall.Add(time.Duration(last - n)), wall
		}
		if c.last.CompareAndSwap(last, n) {
			return wall, wall
		}
	}
}

// balance resizes the node's share every interval, and sooner when a
// request comes while it has none; between steps it claims its share
// again (Balancer.Reclaim) when what it released no longer needs all it
// holds (Share.Retry), and, when its share is under what it expects, at
// the times after a step that Share.NextReclaim gives, to take what other
// nodes gave back.
// It returns when Close is called.
func (u *Upstream) balance() {
	defer close(u.balanced)
	timer := time.NewTimer(0)
	defer timer.Stop()
	var (
		last, due, retry time.Time // the last resize, the next step, the next reclaim
		grew             bool      // a reclaim to grow ran since the last step
	)
	for {
		wake := due
		if !retry.IsZero() && retry.Before(due) {
			wake = retry
		}
		timer.Reset(time.Until(wake))
		early := false
		select {
		case <-u.done:
			return
		case <-timer.C:
		case <-u.rebalance:
			early = true
		}
		timer.Stop()
		now := time.Now()
		if early && now.Sub(last) < u.interval/4 {
			continue
		}
		step := early || !now.Before(due)
		sh := u.resize(step)
		last, retry = now, time.Time{}
		if step {
			due, grew = now.Add(u.interval), false
		}
		// sh is on u's clock, which need not be the timer's.
		if after, growing, ok := sh.NextReclaim(u.now(), u.interval, grew); ok {
			retry, grew = now.Add(after), growing
		}
	}
}

// resize runs one Balancer step, or only a claim (Balancer.Reclaim) if not
// step, and applies the share.
func (u *Upstream) resize(step bool) Share {
	lower := func(sh Share) Released {
		u.mu.Lock()
		defer u.mu.Unlock()
		at := u.now()
		u.s.SetRate(at, sh.Rate, sh.Expect, sh.Stop)
		return u.s.Released(at, sh.Rate)
	}
	ctx, cancel := context.WithTimeout(u.ctx, u.interval)
	defer cancel()
	var (
		sh  Share
		err error
	)
	if step {
		u.mu.Lock()
		now, wall := u.clock.both()
		demand := u.s.Demands(now)
		u.mu.Unlock()
		sh, err = u.bal.Step(ctx, wall, demand, lower)
	} else {
		_, wall := u.clock.both()
		sh, err = u.bal.Reclaim(ctx, wall, lower)
	}
	if err != nil && u.ctx.Err() == nil {
		u.logger.Warn("fairshare: the ledger failed; this node keeps the share it holds", "error", err, "rate", sh.Rate, "stop", sh.Stop)
	}
	u.mu.Lock()
	now := u.now()
	u.s.SetRate(now, sh.Rate, sh.Expect, sh.Stop)
	u.share = sh
	if u.ctx.Err() == nil { // not a call Close cut short
		u.failed, u.sized = err, true
	}
	select {
	case <-u.down:
		if !u.faultLocked(now) {
			u.down = make(chan struct{})
		}
	default:
		if u.faultLocked(now) {
			close(u.down) // the requests waiting are refused
		}
	}
	u.mu.Unlock()
	select {
	case u.kick <- struct{}{}:
	default:
	}
	return sh
}

// faultLocked reports whether the node, with a ledger, is kept from
// releasing by until because the ledger fails: its last resize failed,
// and it holds no share, or must stop releasing on the one it holds
// (Share.Stop) by until, unless the ledger renews it. A request the node
// cannot serve then is refused with ErrUnavailable, not ErrShortage: a
// fault is never a limit.
func (u *Upstream) faultLocked(until time.Time) bool {
	return u.bal != nil && u.failed != nil && (u.share.Rate <= 0 || !until.Before(u.share.Stop))
}

// Acquire waits until a request of customer c of group (its tenant; empty:
// its own), with this weight and cost, may go to the upstream, and returns
// how long it waited. A request whose
// estimated wait (Scheduler.Estimate) exceeds maxWait is refused at once
// with ErrShortage, as is one still waiting after maxWait; maxWait 0 waits
// without limit. Other errors: ErrQueueFull, ErrClosed, a bad weight or
// cost, and ctx's error when ctx ends first, in which case the request's
// place is withdrawn. A request released in the same instant as ctx ends
// or maxWait passes succeeds: its units are spent.
//
// With a Ledger, a request with a maxWait is refused with ErrUnavailable,
// not ErrShortage, when the node cannot release it within maxWait
// because the ledger fails (the node holds no share, or must stop
// releasing on the one it holds first): at once, or, waiting, at the
// Upstream's next resize. One with maxWait 0 waits for the ledger to
// answer again.
func (u *Upstream) Acquire(ctx context.Context, c Customer, group string, weight, cost int64, maxWait time.Duration) (time.Duration, error) {
	g, err := u.AcquireGrant(ctx, c, group, weight, cost, maxWait)
	return g.Waited, err
}

// AcquireGrant is Acquire, returning the grant: when the request was
// released (on the Upstream's clock) as well as how long it waited.
func (u *Upstream) AcquireGrant(ctx context.Context, c Customer, group string, weight, cost int64, maxWait time.Duration) (Grant, error) {
	g, reason, err := u.acquire(ctx, c, group, weight, cost, maxWait)
	if u.obs != nil {
		if err == nil {
			u.obs.Granted(g.Waited)
		} else {
			u.obs.Refused(reason)
		}
	}
	return g, err
}

// acquire is AcquireGrant, with the reason of a refusal.
func (u *Upstream) acquire(ctx context.Context, c Customer, group string, weight, cost int64, maxWait time.Duration) (Grant, string, error) {
	if err := ctx.Err(); err != nil {
		return Grant{}, RefusedCancelled, err
	}
	u.mu.Lock()
	if u.closed {
		u.mu.Unlock()
		return Grant{}, RefusedClosed, ErrClosed
	}
	now := u.now()
	// A request that waits without limit waits through a fault too, for
	// the ledger to answer again.
	var down chan struct{}
	if maxWait > 0 {
		if u.faultLocked(now) {
			u.mu.Unlock()
			return Grant{}, RefusedUnavailable, ErrUnavailable
		}
		down = u.down
	}
	u.nextID++
	id := u.nextID
	if err := u.s.admit(now, Request{ID: id, Customer: c, Group: group, Weight: weight, Cost: cost}, maxWait, u.bal == nil || u.sized); err != nil {
		// Refused for its wait while the ledger fails, a request that
		// could have waited past the node's stop was refused for the
		// fault, not for a shortage.
		fault := errors.Is(err, ErrShortage) && u.faultLocked(now.Add(maxWait))
		u.mu.Unlock()
		reason := RefusedInvalid
		switch {
		case fault:
			reason, err = RefusedUnavailable, ErrUnavailable
		case errors.Is(err, ErrShortage):
			reason = RefusedEstimate
		case errors.Is(err, ErrQueueFull):
			reason = RefusedQueueFull
		}
		return Grant{}, reason, err
	}
	ch := make(chan Grant, 1)
	u.waiters[id] = ch
	starved := u.bal != nil && u.share.Rate == 0
	u.mu.Unlock()
	if starved {
		select {
		case u.rebalance <- struct{}{}:
		default:
		}
	}
	select {
	case u.kick <- struct{}{}:
	default: // a kick is already pending
	}

	var expired <-chan time.Time
	if maxWait > 0 {
		t := time.NewTimer(maxWait)
		defer t.Stop()
		expired = t.C
	}
	var err error
	var reason string
	select {
	case g := <-ch:
		return g, "", nil
	case <-ctx.Done():
		err, reason = ctx.Err(), RefusedCancelled
	case <-expired:
		err, reason = ErrShortage, RefusedExpired
	case <-u.done:
		err, reason = ErrClosed, RefusedClosed
	case <-down:
		err, reason = ErrUnavailable, RefusedUnavailable
	}
	u.mu.Lock()
	withdrawn := u.s.Cancel(id)
	delete(u.waiters, id)
	if reason == RefusedExpired && u.faultLocked(u.now()) {
		err, reason = ErrUnavailable, RefusedUnavailable
	}
	u.mu.Unlock()
	if !withdrawn {
		// Released in the same instant: the loop sends under the lock, so
		// the grant is in ch, and its units are spent; take it.
		return <-ch, "", nil
	}
	return Grant{}, reason, err
}

// Close stops the Upstream: waiting and later Acquire calls return
// ErrClosed. It waits for the Upstream's goroutines to return. With a
// ledger, it withdraws the node's share at once if it released nothing
// in the last Window; otherwise the share lapses with its claim.
func (u *Upstream) Close() error {
	u.mu.Lock()
	first := !u.closed
	if first {
		u.closed = true
		close(u.done)
	}
	u.mu.Unlock()
	<-u.stopped
	<-u.balanced
	if u.bal == nil || !first {
		return nil
	}
	u.cancel()
	now := u.now()
	if now.Sub(u.lastGrant) < u.s.Config().Window {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), u.interval)
	defer cancel()
	return u.bal.Leave(ctx, now)
}

// loop releases requests when the scheduler says they may go.
func (u *Upstream) loop() {
	defer close(u.stopped)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		u.mu.Lock()
		now := u.now()
		grants, wake := u.s.Next(now)
		if len(grants) > 0 {
			u.lastGrant = now
		}
		for _, g := range grants {
			if ch, ok := u.waiters[g.ID]; ok {
				delete(u.waiters, g.ID)
				ch <- g
			}
		}
		u.mu.Unlock()
		var wakeC <-chan time.Time
		if !wake.IsZero() {
			timer.Reset(wake.Sub(now))
			wakeC = timer.C
		}
		select {
		case <-u.kick:
		case <-wakeC:
		case <-u.done:
			return
		}
	}
}

// Config returns the Upstream's configuration, defaults filled in.
func (u *Upstream) Config() Config { return u.s.Config() }

// Estimate returns how long a request of customer c of group with this weight and
// cost would wait if it came now (Scheduler.Estimate): what a refused
// caller may be told to wait before trying again.
func (u *Upstream) Estimate(c Customer, group string, weight, cost int64) time.Duration {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.s.Estimate(u.now(), c, group, weight, cost)
}

// Stats returns the Upstream's live state, with at most top customer
// queues, the longest. It holds the Upstream's lock for one pass over the
// waiting customers.
func (u *Upstream) Stats(top int) Stats {
	u.mu.Lock()
	defer u.mu.Unlock()
	st := u.s.Stats(u.now(), top)
	st.Share, st.Nodes, st.Level = float64(u.s.Config().Rate), 1, 0
	if u.bal != nil {
		st.Share, _ = u.s.Rate()
		st.Nodes, st.Level = u.share.Nodes, u.share.Level
	}
	return st
}
