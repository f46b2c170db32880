package engine

import (
	"sync/atomic"
	"time"
)

// wallClock reads the wall clock at about half the cost of time.Now: it adds
// the monotonic time elapsed since an anchor, a reading of both clocks taken
// with time.Now, to the anchor's wall time, and takes a new anchor every
// second, so that a step of the wall clock (an NTP correction) is followed
// within a second. Within an anchor's second it never goes backwards; across
// anchors it goes back only if the wall clock did. Decisions read the clock
// once each, so on a busy node this is a measurable part of a decision.
type wallClock struct {
	origin time.Time // monotonic readings are durations since origin
	anchor atomic.Pointer[anchor]
}

// anchor is a reading of both clocks at once.
type anchor struct {
	wall int64 // Unix nanoseconds
	mono int64 // nanoseconds since the clock's origin
}

// reanchor is how long an anchor serves.
const reanchor = time.Second

func newWallClock() *wallClock {
	c := &wallClock{origin: time.Now()}
	c.reanchor()
	return c
}

// unixNano returns the wall clock's time in Unix nanoseconds.
func (c *wallClock) unixNano() int64 {
	// The anchor first: a monotonic reading taken after it is never
	// before it, whoever took it.
	a := c.anchor.Load()
	if d := int64(time.Since(c.origin)) - a.mono; d >= 0 && d < int64(reanchor) {
		return a.wall + d
	}
	return c.reanchor()
}

func (c *wallClock) reanchor() int64 {
	t := time.Now()
	c.anchor.Store(&anchor{wall: t.UnixNano(), mono: int64(t.Sub(c.origin))})
	return t.UnixNano()
}

func (c *wallClock) now() time.Time { return time.Unix(0, c.unixNano()) }
