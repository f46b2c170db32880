package fairshare

import (
	"context"
	"sync"
	"time"
)

// Options configures an Upstream beyond its Config. The zero Options are
// the defaults.
type Options struct {
	// Now is the clock; default time.Now. Tests may pass a fake one, or run
	// under testing/synctest.
	Now func() time.Time
}

// Upstream is a Scheduler for concurrent callers: Acquire blocks until the
// caller's request is released, refused or cancelled. One goroutine, owned
// by the Upstream and stopped by Close, releases requests at the times the
// scheduler names. Upstream is safe for concurrent use.
type Upstream struct {
	now     func() time.Time
	mu      sync.Mutex
	s       *Scheduler
	nextID  uint64
	waiters map[uint64]chan Grant // each buffered 1: the loop never blocks
	closed  bool
	kick    chan struct{} // buffered 1: the queue changed
	done    chan struct{} // closed by Close
	stopped chan struct{} // closed when the loop has returned
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
		now:     opts.Now,
		s:       s,
		waiters: make(map[uint64]chan Grant),
		kick:    make(chan struct{}, 1),
		done:    make(chan struct{}),
		stopped: make(chan struct{}),
	}
	go u.loop()
	return u, nil
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
func (u *Upstream) Acquire(ctx context.Context, c Customer, group string, weight, cost int64, maxWait time.Duration) (time.Duration, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	u.mu.Lock()
	if u.closed {
		u.mu.Unlock()
		return 0, ErrClosed
	}
	now := u.now()
	u.nextID++
	id := u.nextID
	if err := u.s.Admit(now, Request{ID: id, Customer: c, Group: group, Weight: weight, Cost: cost}, maxWait); err != nil {
		u.mu.Unlock()
		return 0, err
	}
	ch := make(chan Grant, 1)
	u.waiters[id] = ch
	u.mu.Unlock()
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
	select {
	case g := <-ch:
		return g.Waited, nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-expired:
		err = ErrShortage
	case <-u.done:
		err = ErrClosed
	}
	u.mu.Lock()
	withdrawn := u.s.Cancel(id)
	delete(u.waiters, id)
	u.mu.Unlock()
	if !withdrawn {
		// Released in the same instant: the loop sends under the lock, so
		// the grant is in ch, and its units are spent; take it.
		g := <-ch
		return g.Waited, nil
	}
	return 0, err
}

// Close stops the Upstream: waiting and later Acquire calls return
// ErrClosed. It waits for the Upstream's goroutine to return.
func (u *Upstream) Close() error {
	u.mu.Lock()
	if !u.closed {
		u.closed = true
		close(u.done)
	}
	u.mu.Unlock()
	<-u.stopped
	return nil
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
	return u.s.Stats(u.now(), top)
}
