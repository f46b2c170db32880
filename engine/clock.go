package engine

import (
	"sync/atomic"
	"time"
)

// wallClock reads the wall clock at about half the cost of time.Now: it adds
// the monotonic time elapsed since an anchor taken with time.Now, and takes a
// new anchor every second, so that a step of the wall clock (an NTP
// correction) is followed within a second. Decisions read the clock once
// each, so on a busy node this is a measurable part of a decision.
type wallClock struct {
	anchor atomic.Pointer[time.Time]
}

// reanchor is how long an anchor serves.
const reanchor = time.Second

func newWallClock() *wallClock {
	c := &wallClock{}
	t := time.Now()
	c.anchor.Store(&t)
	return c
}

func (c *wallClock) now() time.Time {
	a := c.anchor.Load()
	if d := time.Since(*a); d >= 0 && d < reanchor {
		return a.Add(d)
	}
	t := time.Now()
	c.anchor.Store(&t)
	return t
}
