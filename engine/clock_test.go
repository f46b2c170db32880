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
		after := time.Now()
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
