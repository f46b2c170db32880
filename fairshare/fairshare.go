// Package fairshare shares one upstream quota among many customers by
// weighted max-min fairness: each customer gets min(demand, fair share), and
// what light customers leave is shared among the rest in proportion to
// their weights.
//
// The model: a Scheduler holds a bounded FIFO queue per customer (a
// customer is whatever the caller names, such as tenant plus key) and
// releases requests by start-time fair queuing (SFQ) in two levels:
// among groups (Request.Group: a tenant), each of its weight, and within a
// group among its customers with a request waiting, each of equal weight.
// Every group waiting has a start tag, a virtual time; the group of least
// tag goes next, with the next request of its customer of least tag, and
// a release of n cost units moves the group's tag on by n over its weight
// (and the customer's by n). Under contention, cost units are therefore
// released in proportion to weight, whatever each request costs: a costly
// request goes on its group's turn, and the group then waits its cost's
// worth of turns. A group gets its weight's share whatever the number of
// customers it names, and shares it evenly among them. A customer with no
// group is a group of its own. Alone, a customer gets the whole rate (the
// scheduler is work-conserving: it never holds a request back while the
// upstream has room).
//
// A group that starts to wait takes the later of the virtual time, less a
// small credit, and its own last finish tag: one that had no more than its
// share since it last waited goes next, ahead of every group waiting (as
// FQ-CoDel serves new flows first), so a light customer waits about one
// release; one that had more waits where its releases took it, so it
// gains nothing by draining its queue and coming back. A group that asks
// (refused requests included) less than its share has a lane: its next
// request, if it may wait longer than a Window, is ordered as if it had
// just joined, so a light customer's cluster of requests goes at once,
// while its tags move as without the lane. Admit's estimate follows the
// same order.
//
// A Cap, if configured, bounds what one customer is released in any
// Window: a customer whose next request would pass it is passed over
// until enough of its earlier releases leave the window, and saves no
// turns meanwhile.
//
// Every release passes a pacer, so the upstream never sees more than Rate
// cost units in any interval of length Window: a sliding log of the
// releases of the last Window enforces that bound exactly, and a token
// bucket of Burst units refilled at Rate per Window spreads releases over
// the window instead of sending Rate at once and then nothing.
//
// Scheduler is the pure core, driven by explicit time: the caller passes
// now to every call, so a simulation on a virtual clock and a server on the
// wall clock run the same code. Upstream wraps it for concurrent callers
// that block in Acquire.
package fairshare

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
)

// Customer names who a request is for: the caller's tenant plus key.
type Customer string

// Errors.
var (
	// ErrShortage is a request whose estimated or actual wait exceeds its
	// maximum wait: the caller should refuse it (429) instead of waiting.
	// It is sluice.ErrShortage, of kind KindExhausted.
	ErrShortage = sluice.ErrShortage
	// ErrQueueFull is a request whose customer already has MaxQueue
	// requests waiting: sluice.ErrQueueFull, of kind KindExhausted.
	ErrQueueFull = sluice.ErrQueueFull
	// ErrClosed is a call to an Upstream after Close (KindUnavailable).
	ErrClosed = sluice.ErrUpstreamClosed
	// ErrUnavailable is a request an Upstream with a Ledger cannot serve
	// because the ledger (the store the nodes share the upstream through)
	// fails and the node holds no share it may release on: a fault, of
	// kind KindUnavailable (503), never a shortage.
	ErrUnavailable = &sluice.Error{Op: "fairshare", Kind: sluice.KindUnavailable,
		Message: "the store that shares the upstream among the nodes is unavailable, and this node holds no share of it"}
)

// MaxWeight bounds a request's weight, so the smallest step of a
// group's tag stays well within float64's precision.
const MaxWeight = 1_000_000

// Config configures a Scheduler. Zero fields take the defaults stated.
type Config struct {
	// Rate is the upstream's quota: at most Rate cost units in any interval
	// of length Window. Required, 1 to 1e9.
	Rate int64
	// Window is the quota's interval. Default 1s; Window/Rate must be at
	// least a nanosecond.
	Window time.Duration
	// Burst is how many cost units may go at once after a quiet spell, at
	// most Rate. Default Rate/10, at least 1. A request costs at most
	// Burst.
	Burst int64
	// MaxQueue is how many requests one customer may have waiting. Default
	// 1000.
	MaxQueue int
	// Quantum is accepted for compatibility and has no effect: releases
	// interleave at the finest grain, one request at a time. 1 to Rate;
	// default 1.
	//
	// Deprecated: the scheduler no longer uses a round-robin quantum.
	Quantum int64
	// Cap, if not 0, is the most cost units one customer may be released
	// in any interval of length Window, however idle the upstream: a
	// ceiling on top of its fair share, 1 to Rate. A request then costs at
	// most Cap as well.
	Cap int64
}

// withDefaults returns a copy of c with the zero fields defaulted.
func (c Config) withDefaults() Config {
	if c.Window == 0 {
		c.Window = time.Second
	}
	if c.Burst == 0 {
		c.Burst = max(1, c.Rate/10)
	}
	if c.MaxQueue == 0 {
		c.MaxQueue = 1000
	}
	if c.Quantum == 0 {
		c.Quantum = 1
	}
	return c
}

// scale is how many units of a node's share make one cost unit: a node
// may hold a share of the upstream that is not a whole number of cost
// units, as three nodes share 100 per second. Shares are held in a store
// counter of at most sluice.MaxLimit units, so the scale is smaller for
// rates over a million.
func (c Config) scale() int64 {
	return min(1000, sluice.MaxLimit/max(c.Rate, 1))
}

// Validate reports the first bad field of c once defaulted, by name.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Rate < 1 || c.Rate > 1e9:
		return fmt.Errorf("fairshare: Rate %d must be 1 to 1e9", c.Rate)
	case c.Window < 0:
		return fmt.Errorf("fairshare: Window %v must be positive", c.Window)
	case int64(c.Window) < c.Rate:
		return fmt.Errorf("fairshare: Window %v must be at least Rate (%d) nanoseconds", c.Window, c.Rate)
	case c.Burst < 1 || c.Burst > c.Rate:
		return fmt.Errorf("fairshare: Burst %d must be 1 to Rate (%d)", c.Burst, c.Rate)
	case c.MaxQueue < 1:
		return fmt.Errorf("fairshare: MaxQueue %d must be at least 1", c.MaxQueue)
	case c.Quantum < 1 || c.Quantum > c.Rate:
		return fmt.Errorf("fairshare: Quantum %d must be 1 to Rate (%d)", c.Quantum, c.Rate)
	case c.Cap < 0 || c.Cap > c.Rate:
		return fmt.Errorf("fairshare: Cap %d must be 0 (none) or 1 to Rate (%d)", c.Cap, c.Rate)
	}
	return nil
}
