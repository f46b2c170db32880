package algo

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

func TestPenaltyBoxDoublesAndForgives(t *testing.T) {
	p := sluice.Policy{Name: "login", Algorithm: sluice.PenaltyBox, Window: time.Minute,
		Penalty: sluice.Penalty{After: 3, Base: time.Minute, Max: 4 * time.Minute}}
	var s State
	blockedFor := func(now int64) time.Duration {
		_, d := Decide(&p, s, now, 0)
		if d.Allowed {
			return 0
		}
		return d.RetryAfter
	}
	offend := func(now int64) { s, _ = Decide(&p, s, now, 1) }

	// Two offences: not yet blocked.
	offend(at(0))
	offend(at(time.Second))
	if b := blockedFor(at(2 * time.Second)); b != 0 {
		t.Fatalf("blocked after 2 offences: %v", b)
	}
	// A streak broken by a window without offences starts over.
	offend(at(2 * time.Minute))
	if b := blockedFor(at(2 * time.Minute)); b != 0 {
		t.Fatalf("blocked although the streak was broken: %v", b)
	}
	offend(at(2*time.Minute + 1))
	offend(at(2*time.Minute + 2))
	if b := blockedFor(at(2*time.Minute + 2)); b != time.Minute {
		t.Fatalf("first block %v, want 1m", b)
	}
	// Offending again as each block ends: 2m, then 4m, then capped at 4m.
	end := at(3*time.Minute) + 2
	for i, want := range []time.Duration{2 * time.Minute, 4 * time.Minute, 4 * time.Minute} {
		for range 3 {
			offend(end)
		}
		if b := blockedFor(end); b != want {
			t.Fatalf("block %d: %v, want %v", i+2, b, want)
		}
		end += int64(want)
	}
	// A whole Max after the last block ends, the doubling starts over.
	now := end + int64(4*time.Minute)
	for range 3 {
		offend(now)
	}
	if b := blockedFor(now); b != time.Minute {
		t.Fatalf("after forgiveness: %v, want 1m", b)
	}
}
