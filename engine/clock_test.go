package engine

import (
	"testing"
	"time"
)

// TestWallClockTracksTimeNow: the cheap clock stays within the anchor
// period's drift of time.Now and never goes backwards.
func TestWallClockTracksTimeNow(t *testing.T) {
	c := newWallClock()
	prev := c.now()
	deadline := time.Now().Add(1500 * time.Millisecond) // crosses a re-anchor
	for n := 0; time.Now().Before(deadline); n++ {
		before := time.Now()
		got := c.now()
		// A reading's wall part is early by any pause between its two
		// clocks' reads (wallClock's doc): the later of two is the truer.
		after := time.Now()
		if a := time.Now(); a.Round(0).After(after.Round(0)) {
			after = a
		}
		// Both clocks tick together within an anchor's second; allow for
		// the monotonic and wall clocks drifting by a millisecond.
		if got.Before(before.Add(-time.Millisecond)) || got.After(after.Add(time.Millisecond)) {
			t.Fatalf("read %d: clock %v outside [%v, %v]", n, got, before, after)
		}
		if got.Before(prev) {
			t.Fatalf("read %d: clock went back from %v to %v", n, prev, got)
		}
		prev = got
		if n%1000 == 0 {
			time.Sleep(time.Millisecond)
		}
	}
}

// TestWallClockAnchorsOnTheTruestReading: of the readings an anchor is
// chosen from, the one whose wall part is furthest ahead of its monotonic
// part, whatever their order: a reading paused between its two clocks is
// early in wall time, and would hold the clock behind for its second.
func TestWallClockAnchorsOnTheTruestReading(t *testing.T) {
	const paused = 200 * int64(time.Millisecond)
	for early := range 3 {
		c := newWallClock()
		var n int64
		c.read = func() anchor {
			n++
			r := anchor{wall: 1_000_000_000_000 + n*1000, mono: n * 1000}
			if int(n-1) == early {
				r.wall -= paused
			}
			return r
		}
		got := c.reanchor()
		if a := c.anchor.Load(); a.wall-a.mono != 1_000_000_000_000 {
			t.Errorf("the reading paused is number %d: anchored at an offset of %d, want 1e12 (a reading not paused)", early, a.wall-a.mono)
		}
		if want := int64(1_000_000_000_000 + 3000); got != want {
			t.Errorf("the reading paused is number %d: reanchor returned %d, want %d (the last reading's time)", early, got, want)
		}
	}
}
