package memstore

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
)

// TestTableFull: a table grown key by key to its fullest finds every key
// it holds and no other, and a sweep keeps exactly the live ones, whatever
// the hashes, tags alike or not.
func TestTableFull(t *testing.T) {
	for _, hashes := range []struct {
		name string
		of   func(i int) uint64
	}{
		{"random", func(i int) uint64 { return rand.New(rand.NewPCG(uint64(i), 1)).Uint64() }},
		{"one tag", func(i int) uint64 { return uint64(i) * 0x10001 &^ (0x7f << 40) }},
		{"one slot", func(i int) uint64 { return 42 | uint64(i)<<40 }},
	} {
		t.Run(hashes.name, func(t *testing.T) {
			var tb table
			p := &prefix{tenant: "t", policy: "p", alg: sluice.FixedWindow}
			const n = 7 * 64 / 8 // a table of 64 slots at its fullest
			for i := range n {
				tb.addScoped(hashes.of(i), p, fmt.Sprint(i), algo.State{Algorithm: sluice.FixedWindow, Expires: int64(1 + i%2*10)})
			}
			if len(tb.slots) != 64 {
				t.Fatalf("%d keys in %d slots, want 64", n, len(tb.slots))
			}
			for i := range n {
				if e := tb.getScoped(hashes.of(i), p, fmt.Sprint(i)); e == nil || e.value() != fmt.Sprint(i) {
					t.Fatalf("key %d: %v", i, e)
				}
				if e := tb.getScoped(hashes.of(i), p, fmt.Sprint(i+n)); e != nil {
					t.Fatalf("key %d found under key %d's hash", i+n, i)
				}
			}
			tb.sweep(5, false)
			if tb.removed != n/2 || tb.n != n/2 {
				t.Fatalf("sweep removed %d, kept %d", tb.removed, tb.n)
			}
			for i := range n {
				if e := tb.getScoped(hashes.of(i), p, fmt.Sprint(i)); (e != nil) != (i%2 == 1) {
					t.Fatalf("key %d after the sweep: %v", i, e)
				}
			}
		})
	}
}

// TestEntryState: every state an entry is given, packed in its line or
// not, is the state it gives back, with its value short or long.
func TestEntryState(t *testing.T) {
	states := []algo.State{
		{Algorithm: sluice.TokenBucket, TAT: 5, Expires: 5},
		{Algorithm: sluice.FixedWindow, Start: -60, Count: 3, Expires: 0},
		{Algorithm: sluice.SlidingWindow, Start: 60, Count: 3, Prev: 9, Expires: 180},
		{Algorithm: sluice.Quota, Start: 1, Count: 2, Prev: 3, TAT: 4, Expires: 5}, // no line holds both
		{Algorithm: sluice.SlidingLog, Count: 2, Expires: 9, Entries: []algo.Entry{{At: 1, N: 1}, {At: 2, N: 1}}},
		{Algorithm: sluice.Concurrency, TAT: 7, Expires: 9, Entries: []algo.Entry{}},
		{Algorithm: sluice.FixedWindow, Start: 1, Count: 1, Expires: 2}, // after a state out of line
	}
	for _, v := range []string{"k", strings.Repeat("long", 10)} {
		var e entry
		e.setValue(v)
		for i, st := range states {
			e.setState(&st)
			if got := e.state(); !reflect.DeepEqual(got, st) || e.exp != st.Expires {
				t.Errorf("value %q, state %d: got %+v, want %+v", v, i, got, st)
			}
			if e.value() != v {
				t.Errorf("value %q, state %d: value became %q", v, i, e.value())
			}
		}
		if e.flags&flagExt == 0 {
			t.Errorf("value %q: states with entries kept in the line", v)
		}
	}
}
