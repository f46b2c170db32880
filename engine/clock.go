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
//
// time.Now reads the wall clock, then the monotonic one: a thread paused
// between the two (a loaded machine, measured at up to 212 ms here) gives a
// reading whose wall part is early by the pause, and an anchor of it would
// keep the clock that far behind for its second, so that leases lapse early
// in the store's eyes. An anchor is the best of three readings: the one
// whose wall part is furthest ahead of its monotonic part, the least
// delayed between the two.
type wallClock struct {
	origin time.Time // monotonic readings are durations since origin
	anchor atomic.Pointer[anchor]
	// read takes one reading of both clocks; tests replace it.
	read func() anchor
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
	c.read = func() anchor {
		t := time.Now()
		return anchor{wall: t.UnixNano(), mono: int64(t.Sub(c.origin))}
	}
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

// reanchor takes a new anchor, the best of three readings, and returns the
// time of the last.
func (c *wallClock) reanchor() int64 {
	best := c.read()
	last := best
	for range 2 {
		last = c.read()
		if last.wall-last.mono > best.wall-best.mono {
			best = last
		}
	}
	c.anchor.Store(&best)
	return best.wall + last.mono - best.mono
}

func (c *wallClock) now() time.Time { return time.Unix(0, c.unixNano()) }
