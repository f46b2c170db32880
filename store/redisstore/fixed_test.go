package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/store/redisstore"
	"github.com/sluicehq/sluice/store/redisstore/redistest"
)

// TestFixedWindowOneRoundTrip: three nodes taking turns on fixed windows,
// each node's view stale at every decision (another node wrote last), one
// request of one window and one of three: every decision is one command,
// the decisions' remaining is the count as it stands, and exactly the
// limit is admitted. A request with a token bucket beside the window still
// needs a second round trip on a stale view, and its window is counted
// once. The verdict a stale view gets wrong (admitting past the limit) is
// decided again from the script's answer: two commands, denied.
func TestFixedWindowOneRoundTrip(t *testing.T) {
	prefix := redistest.Prefix(t)
	cnts := make([]*counter, 3)
	ss := make([]*redisstore.Store, 3)
	for i := range ss {
		c := redistest.Client(t)
		cnts[i] = &counter{}
		c.AddHook(cnts[i])
		s, err := redisstore.New(c, redisstore.Options{Prefix: prefix, Timeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		ss[i] = s
	}
	const limit = 12
	fw := sluice.Policy{Name: "fw", Algorithm: sluice.FixedWindow, Limit: limit, Window: time.Hour}
	tb := sluice.Policy{Name: "tb", Algorithm: sluice.TokenBucket, Limit: 1000, Window: time.Hour}
	op := func(p *sluice.Policy, v string) sluice.Op {
		return sluice.Op{Key: sluice.Key{Tenant: "acme", Algorithm: p.Algorithm, Policy: p.Name, Value: v}, Policy: p, Hits: 1}
	}
	apply := func(node int, ops []sluice.Op) ([]sluice.Decision, int64) {
		t.Helper()
		dst := make([]sluice.Decision, len(ops))
		before := cnts[node].n.Load()
		if err := ss[node].Apply(context.Background(), t0, ops, dst); err != nil {
			t.Fatal(err)
		}
		return dst, cnts[node].n.Load() - before
	}
	for _, n := range []int{0, 1, 2} {
		apply(n, []sluice.Op{op(&fw, "warm")}) // loads the script
	}
	one := []sluice.Op{op(&fw, "a")}
	three := []sluice.Op{op(&fw, "x"), op(&fw, "y"), op(&fw, "z")}
	for i := range limit {
		for _, ops := range [][]sluice.Op{one, three} {
			dst, cmds := apply(i%3, ops)
			if cmds != 1 {
				t.Fatalf("decision %d of %d ops on node %d: %d commands, want 1", i, len(ops), i%3, cmds)
			}
			for _, d := range dst {
				if !d.Allowed || d.Remaining != int64(limit-1-i) {
					t.Fatalf("decision %d: %+v, want allowed with %d remaining", i, d, limit-1-i)
				}
			}
		}
	}
	// Node 0 last wrote at decision 9; its view says 2 remain: wrong.
	dst, cmds := apply(0, one)
	if dst[0].Allowed || cmds != 2 {
		t.Fatalf("past the limit from a stale view: %+v in %d commands, want denied in 2", dst[0], cmds)
	}
	mixed := []sluice.Op{op(&fw, "m"), op(&tb, "m")}
	for i := range 6 {
		dst, cmds := apply(i%3, mixed)
		if want := int64(min(i, 1) + 1); cmds != want {
			t.Fatalf("mixed decision %d: %d commands, want %d", i, cmds, want)
		}
		if !dst[0].Allowed || dst[0].Remaining != int64(limit-1-i) {
			t.Fatalf("mixed decision %d: %+v, want allowed with %d remaining", i, dst[0], limit-1-i)
		}
	}
}

// TestFixedWindowText: a fixed window's state is stored as the text the
// script counts in, and read back by a node that never saw it.
func TestFixedWindowText(t *testing.T) {
	prefix := redistest.Prefix(t)
	a := newStore(t, redisstore.Options{Prefix: prefix})
	fw := sluice.Policy{Name: "fw", Algorithm: sluice.FixedWindow, Limit: 5, Window: time.Minute}
	ops := []sluice.Op{{Key: sluice.Key{Tenant: "acme", Algorithm: fw.Algorithm, Policy: "fw", Value: "u"}, Policy: &fw, Hits: 2}}
	dst := make([]sluice.Decision, 1)
	if err := a.Apply(context.Background(), t0, ops, dst); err != nil || !dst[0].Allowed {
		t.Fatal(dst, err)
	}
	c := redistest.Client(t)
	keys, err := c.Keys(context.Background(), prefix+"*").Result()
	if err != nil || len(keys) != 1 {
		t.Fatal(keys, err)
	}
	v, err := c.Get(context.Background(), keys[0]).Result()
	start := t0.Truncate(time.Minute).UnixNano()
	if want := "F" + pad19(start) + ":" + pad19(int64(time.Minute)) + ":2"; err != nil || !strings.HasPrefix(v, want) || len(v) != len(want)+8 {
		t.Fatalf("stored %q, want %q and the call's 8-byte id", v, want)
	}
	b := newStore(t, redisstore.Options{Prefix: prefix})
	ops[0].Hits = 0
	if err := b.Apply(context.Background(), t0, ops, dst); err != nil || dst[0].Remaining != 3 {
		t.Fatalf("read by another node: %+v %v, want 3 remaining", dst[0], err)
	}
}

func pad19(n int64) string { return fmt.Sprintf("%019d", n) }

// TestFixedWindowModel: three nodes taking requests at random (so their
// views are stale at random), of one to three fixed windows of different
// limits, hits from 0 to past the limit, times crossing windows: every
// decision is algo.DecideAll's on one state held in memory, the script's
// judgement of the windows included. Seeds 1 to 3.
func TestFixedWindowModel(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		rng := rand.New(rand.NewPCG(seed, 0))
		ss := nodes(t, 3)
		pols := []sluice.Policy{
			{Name: "a", Algorithm: sluice.FixedWindow, Limit: 7, Window: time.Second},
			{Name: "b", Algorithm: sluice.FixedWindow, Limit: 3, Window: 2 * time.Second},
			{Name: "c", Algorithm: sluice.FixedWindow, Limit: 20, Window: 500 * time.Millisecond},
		}
		model := map[sluice.Key]algo.State{}
		now := t0
		for step := range 1500 {
			now = now.Add(time.Duration(rng.IntN(int(150 * time.Millisecond))))
			var ops []sluice.Op
			for _, i := range rng.Perm(3)[:1+rng.IntN(3)] {
				p := &pols[i]
				ops = append(ops, sluice.Op{Key: sluice.Key{Tenant: "acme", Algorithm: p.Algorithm, Policy: p.Name, Value: "u"}, Policy: p, Hits: int64(rng.IntN(int(p.Limit) + 2))})
			}
			stored, next := make([]algo.State, len(ops)), make([]algo.State, len(ops))
			for i := range ops {
				stored[i] = model[ops[i].Key]
			}
			want := make([]sluice.Decision, len(ops))
			if algo.DecideAll(ops, stored, next, now.UnixNano(), want) {
				for i := range ops {
					model[ops[i].Key] = next[i]
				}
			}
			got := make([]sluice.Decision, len(ops))
			if err := ss[rng.IntN(3)].Apply(context.Background(), now, ops, got); err != nil {
				t.Fatal(err)
			}
			for i := range ops {
				if got[i] != want[i] {
					t.Fatalf("seed %d step %d op %d (%s, %d hits): %+v, want %+v", seed, step, i, ops[i].Policy.Name, ops[i].Hits, got[i], want[i])
				}
			}
		}
	}
}
