package algo

import (
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

func TestStateEncodingRoundTrip(t *testing.T) {
	states := []State{
		{},
		{Algorithm: sluice.TokenBucket, TAT: at(time.Hour), Expires: at(time.Hour)},
		{Algorithm: sluice.SlidingWindow, Start: math.MinInt64, Count: math.MaxInt64, Prev: -1, Expires: 1},
		{Algorithm: sluice.Concurrency, TAT: 7, Entries: []Entry{{At: 1, N: 2, ID: 3}, {At: at(0), N: 1, ID: math.MaxUint64}}},
	}
	for _, s := range states {
		b, err := s.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var got State
		if err := got.UnmarshalBinary(b); err != nil {
			t.Fatalf("%+v: %v", s, err)
		}
		if !statesEqual(got, s) {
			t.Fatalf("round trip: got %+v, want %+v", got, s)
		}
		// Every truncation is refused, never misread.
		for i := range len(b) {
			var x State
			if err := x.UnmarshalBinary(b[:i]); err == nil {
				t.Fatalf("%+v truncated to %d bytes decoded as %+v", s, i, x)
			}
		}
		if err := got.UnmarshalBinary(append(b, 0)); err == nil {
			t.Fatal("trailing byte accepted")
		}
	}
	if err := new(State).UnmarshalBinary([]byte{2, 1}); err == nil {
		t.Fatal("unknown version accepted")
	}
	if err := new(State).UnmarshalBinary([]byte{1, 99, 0, 0, 0, 0, 0, 0}); err == nil {
		t.Fatal("unknown algorithm accepted")
	}
}

func FuzzStateDecode(f *testing.F) {
	s := State{Algorithm: sluice.SlidingLog, Count: 3, Entries: []Entry{{At: 5, N: 3}}}
	b, _ := s.MarshalBinary()
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		var s State
		if s.UnmarshalBinary(b) != nil {
			return
		}
		again, _ := s.MarshalBinary()
		var s2 State
		if err := s2.UnmarshalBinary(again); err != nil || !statesEqual(s, s2) {
			t.Fatalf("decoded state does not round-trip: %+v %v", s, err)
		}
	})
}
