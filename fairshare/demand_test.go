package fairshare

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"
)

// admit offers a request of customer c (a group of its own) to s at now.
func admit(s *Scheduler, now time.Time, id uint64, c Customer, weight, cost int64, maxWait time.Duration) error {
	return s.Admit(now, Request{ID: id, Customer: c, Weight: weight, Cost: cost}, maxWait)
}

// demandOf returns the demand of weight in ds, the tests' groups each
// having a weight of its own, and whether there is one.
func demandOf(ds []GroupDemand, weight int64) (GroupDemand, bool) {
	for _, d := range ds {
		if d.Weight == weight {
			return d, true
		}
	}
	return GroupDemand{}, false
}

// A steady client's demand reads the same from one call of Demands to the
// next once a few spans are in: 1.5 requests a second, one in a span and
// two in the next, is 1.5 per second whatever span the calls end, in cost
// units per Window.
func TestDemandsSteadyRate(t *testing.T) {
	for _, w := range []time.Duration{time.Second, 2 * time.Second} {
		t.Run(fmt.Sprintf("window=%v", w), func(t *testing.T) {
			s := newSched(t, Config{Rate: 100, Window: w})
			s.TrackDemand(t0) // as an Upstream does: the first span starts
			want := 1.5 * w.Seconds()
			id := uint64(0)
			for k := 1; k <= 24; k++ {
				span := at(time.Duration(k-1) * time.Second)
				for i := range 1 + (k+1)%2 { // 1 in odd spans, 2 in even ones
					id++
					now := span.Add(time.Duration(200+400*i) * time.Millisecond)
					if err := admit(s, now, id, "steady", 1, 1, time.Second); err != nil {
						t.Fatalf("span %d: Admit: %v", k, err)
					}
					s.Next(now)
				}
				ds := s.Demands(at(time.Duration(k) * time.Second))
				if len(ds) != 1 {
					t.Fatalf("call %d: demands %+v, want the steady group's alone", k, ds)
				}
				if ds[0].Backlogged {
					t.Errorf("call %d: backlogged, but every request went at once", k)
				}
				if k >= 4 && math.Abs(ds[0].Rate-want) > 0.1*want {
					t.Errorf("call %d, %d spans in: rate %.3f, want %.3f within 10%%", k, k, ds[0].Rate, want)
				}
			}
		})
	}
}

// A request that Admit refuses counts toward its group's demand: it was
// asked for, though it never waits.
func TestDemandsCountRefused(t *testing.T) {
	s := newSched(t, Config{Rate: 100, Window: time.Second})
	s.SetRate(t0, 0, 0, time.Time{}) // nothing goes: every estimate is too long
	s.TrackDemand(t0)
	for i := range 3 {
		now := at(time.Duration(100+200*i) * time.Millisecond)
		if err := admit(s, now, uint64(i+1), "refused", 1, 2, time.Second); !errors.Is(err, ErrShortage) {
			t.Fatalf("Admit %d: %v, want ErrShortage", i, err)
		}
	}
	if s.Len() != 0 {
		t.Fatalf("%d requests waiting, want none: all were refused", s.Len())
	}
	ds := s.Demands(at(time.Second))
	if len(ds) != 1 || ds[0].Rate != 6 || ds[0].Backlogged {
		t.Errorf("demands %+v, want one group asking 6 (3 refused of cost 2), not backlogged", ds)
	}
}

// A group whose requests wait throughout the span between two calls of
// Demands, its queue never drained, is backlogged, and stays listed
// while they wait though it asks nothing more; one whose request waits at
// each call but whose queue drains between them is not.
func TestDemandsBacklogged(t *testing.T) {
	t.Run("never drains", func(t *testing.T) {
		s := newSched(t, Config{Rate: 100, Window: time.Second})
		s.SetRate(t0, 0, 0, time.Time{}) // nothing is released
		s.TrackDemand(t0)
		if err := admit(s, at(500*time.Millisecond), 1, "stuck", 1, 1, 0); err != nil {
			t.Fatal(err)
		}
		for k := 1; k <= 2*demandSpans; k++ {
			now := at(time.Duration(k) * time.Second)
			if g, _ := s.Next(now); len(g) > 0 {
				t.Fatalf("at %v: released %d, at rate 0", now.Sub(t0), len(g))
			}
			ds := s.Demands(now)
			if len(ds) != 1 {
				t.Fatalf("call %d: demands %+v, want the waiting group, though it asked once", k, ds)
			}
			// At the first call its request has waited half the span.
			if want := k > 1; ds[0].Backlogged != want {
				t.Errorf("call %d: backlogged %v, want %v", k, ds[0].Backlogged, want)
			}
		}
	})
	t.Run("drains between calls", func(t *testing.T) {
		// A bucket of 1 unit at 10 a second: of two requests at once, the
		// second waits 0.1s.
		s := newSched(t, Config{Rate: 10, Window: time.Second, Burst: 1})
		s.TrackDemand(t0)
		id := uint64(0)
		now := t0
		for k := 1; k <= 2*demandSpans; k++ {
			call := at(time.Duration(k) * time.Second)
			// Two requests 50ms before the call: one waits across it.
			for range 2 {
				id++
				if err := admit(s, call.Add(-50*time.Millisecond), id, "light", 1, 1, 0); err != nil {
					t.Fatal(err)
				}
			}
			for now = call.Add(-50 * time.Millisecond); now.Before(call); {
				_, wake := s.Next(now)
				if wake.IsZero() {
					break
				}
				now = wake
			}
			if s.Len() != 1 {
				t.Fatalf("call %d: %d requests waiting, want 1: the test does not make one wait across the call", k, s.Len())
			}
			ds := s.Demands(call)
			if len(ds) != 1 || ds[0].Backlogged {
				t.Errorf("call %d: demands %+v, want one not backlogged: its queue drained since the last call", k, ds)
			}
			if k >= 2 && math.Abs(ds[0].Rate-2) > 1e-9 {
				t.Errorf("call %d: rate %v, want 2", k, ds[0].Rate)
			}
			// The request waiting goes 50ms after the call.
			if g, _ := s.Next(call.Add(50 * time.Millisecond)); len(g) != 1 || s.Len() != 0 {
				t.Fatalf("call %d: released %d 50ms after it, %d still waiting; want the one released", k, len(g), s.Len())
			}
		}
	})
}

// A group that stops asking, with nothing queued, is listed until its
// last request is out of the last demandSpans spans, then forgotten: asking
// again, its rate is measured from then on.
func TestDemandsForgetIdle(t *testing.T) {
	s := newSched(t, Config{Rate: 100, Window: time.Second})
	s.TrackDemand(t0)
	id := uint64(0)
	ask := func(now time.Time, n int) {
		t.Helper()
		for range n {
			id++
			if err := admit(s, now, id, "once", 1, 1, 0); err != nil {
				t.Fatal(err)
			}
		}
		if g, _ := s.Next(now); len(g) != n {
			t.Fatalf("released %d of %d", len(g), n)
		}
	}
	ask(at(500*time.Millisecond), 4)
	if ds := s.Demands(at(time.Second)); len(ds) != 1 || ds[0].Rate != 4 {
		t.Fatalf("at 1s: demands %+v, want one group asking 4", ds)
	}
	// Idle calls from 2s on: listed for demandSpans-1 of them, gone at the
	// demandSpans-th.
	for i := 1; i <= demandSpans; i++ {
		now := at(time.Duration(1+i) * time.Second)
		ds := s.Demands(now)
		if i < demandSpans {
			want := 4 / float64(i+1)
			if len(ds) != 1 || math.Abs(ds[0].Rate-want) > 1e-9 {
				t.Errorf("idle call %d: demands %+v, want the group asking %.3f: 4 in %d spans", i, ds, want, i+1)
			}
			continue
		}
		if len(ds) != 0 {
			t.Errorf("idle call %d: demands %+v, want none: the group asked nothing in the last %d spans", i, ds, demandSpans)
		}
	}
	// Asking again, it is new: its rate is that of its first span alone.
	now := at(time.Duration(demandSpans+1) * time.Second)
	ask(now.Add(500*time.Millisecond), 2)
	if ds := s.Demands(now.Add(time.Second)); len(ds) != 1 || ds[0].Rate != 2 {
		t.Errorf("asking again: demands %+v, want one group asking 2", ds)
	}
}

// A group that asked one request in the memory (a customer sending a
// costly request every few tens of seconds) asks its cost over the whole
// memory from its first call on, and says so (Once); a second request
// makes it a group like any other, measured over the spans it has.
func TestDemandsOnce(t *testing.T) {
	for _, w := range []time.Duration{time.Second, 2 * time.Second} {
		t.Run(fmt.Sprintf("window=%v", w), func(t *testing.T) {
			s := newSched(t, Config{Rate: 100, Window: w, Burst: 10})
			s.TrackDemand(t0)
			if err := admit(s, at(500*time.Millisecond), 1, "sparse", 1, 10, 0); err != nil {
				t.Fatal(err)
			}
			s.Next(at(500 * time.Millisecond))
			// Calls a second apart: the memory is demandSpans seconds.
			want := 10 * w.Seconds() / demandSpans
			for k := 1; k < demandSpans; k++ {
				ds := s.Demands(at(time.Duration(k) * time.Second))
				if len(ds) != 1 || !ds[0].Once || math.Abs(ds[0].Rate-want) > 1e-9 {
					t.Fatalf("call %d: demands %+v, want one group asking %.3f once", k, ds, want)
				}
			}
			if err := admit(s, at(7500*time.Millisecond), 2, "sparse", 1, 10, 0); err != nil {
				t.Fatal(err)
			}
			s.Next(at(7500 * time.Millisecond))
			ds := s.Demands(at(8 * time.Second))
			if want := 20 * w.Seconds() / 8; len(ds) != 1 || ds[0].Once || math.Abs(ds[0].Rate-want) > 1e-9 {
				t.Errorf("after a second request: demands %+v, want one group asking %.3f, not once", ds, want)
			}
		})
	}
}

// FairLevel and split take a group that asked one request for light at
// any level, as they take a backlogged one for heavy: its rate over the
// memory is above the level here, but it asks that request alone.
func TestOnceIsLight(t *testing.T) {
	once := GroupDemand{Weight: 1, Rate: 1.25, Cost: 10, Once: true}
	others := Demand{Heavy: 100}
	level := FairLevel(100, others, []GroupDemand{once})
	if want := 98.75 / 100; math.Abs(level-want) > 1e-9 {
		t.Errorf("FairLevel(100, %+v, %+v) = %v, want %v", others, once, level, want)
	}
	if got, want := split([]GroupDemand{once}, level), (Demand{Light: 1.25}); got != want {
		t.Errorf("split(%+v, %v) = %+v, want %+v", once, level, got, want)
	}
	heavy := once
	heavy.Once = false
	if got, want := split([]GroupDemand{heavy}, level), (Demand{Heavy: 1}); got != want {
		t.Errorf("split(%+v, %v) = %+v, want %+v", heavy, level, got, want)
	}
}

// FairLevel and split take a backlogged group for heavy whatever its
// rate: it asks more than it gets.
func TestBackloggedIsHeavy(t *testing.T) {
	stuck := GroupDemand{Weight: 1, Rate: 1, Backlogged: true}
	for _, tc := range []struct {
		name   string
		others Demand
		mine   []GroupDemand
		want   float64
	}{
		{"alone", Demand{}, []GroupDemand{stuck}, 100},
		{"with others light", Demand{Light: 20}, []GroupDemand{{Weight: 2, Rate: 1, Backlogged: true}}, 40},
		{"with a heavy group", Demand{}, []GroupDemand{stuck, {Weight: 1, Rate: 500}}, 50},
		// Sorted by its rate, it would come before the light group and
		// stop the search at 50.
		{"with a light group", Demand{}, []GroupDemand{stuck, {Weight: 1, Rate: 10}}, 90},
		{"with others heavy", Demand{Light: 10, Heavy: 2}, []GroupDemand{stuck}, 30},
	} {
		if got := FairLevel(100, tc.others, tc.mine); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: FairLevel(100, %+v, %+v) = %v, want %v", tc.name, tc.others, tc.mine, got, tc.want)
		}
	}

	for _, tc := range []struct {
		groups []GroupDemand
		level  float64
		want   Demand
	}{
		{[]GroupDemand{stuck}, 50, Demand{Heavy: 1}},
		{[]GroupDemand{stuck}, math.Inf(1), Demand{Heavy: 1}},
		{[]GroupDemand{{Weight: 3, Rate: 2, Backlogged: true}, {Weight: 1, Rate: 4}, {Weight: 1, Rate: 80}}, 50, Demand{Light: 4, Heavy: 4}},
	} {
		if got := split(tc.groups, tc.level); got != tc.want {
			t.Errorf("split(%+v, %v) = %+v, want %+v", tc.groups, tc.level, got, tc.want)
		}
	}

	// A node whose one group is backlogged publishes heavy weight, and its
	// share is the rest of the rate, not its rate and half of what is left.
	cfg := Config{Rate: 100, Window: time.Second}
	sc := cfg.scale()
	st := newFakeStore(cfg, 4*time.Second)
	st.claims["b"] = fakeClaim{40 * sc, at(time.Hour)}
	st.demands["b"] = fakeDemand{Demand{Light: 40}, at(time.Hour)}
	a := newBalancer(t, cfg, st.ledger("a"))
	sh, err := a.Step(context.Background(), t0, []GroupDemand{stuck}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.demands["a"].d; got != (Demand{Heavy: 1}) {
		t.Errorf("a published %+v, want %+v", got, Demand{Heavy: 1})
	}
	if sh.Expect != 60*sc || sh.Rate != 60*sc {
		t.Errorf("rate %d, expect %d; want both %d", sh.Rate, sh.Expect, 60*sc)
	}
}

// Released reports the units released in the Window up to now, and when
// they fall to the rate asked about: when the last of the oldest releases
// that must leave the window leaves it, now if they are at or below it.
func TestSchedulerReleased(t *testing.T) {
	cfg := Config{Rate: 10, Window: time.Second, Burst: 10}
	sc := cfg.scale()
	s := newSched(t, cfg)
	id := uint64(0)
	for _, r := range []struct {
		d time.Duration
		n int
	}{{0, 3}, {300 * time.Millisecond, 2}, {600 * time.Millisecond, 4}} {
		for range r.n {
			id++
			enqueue(t, s, at(r.d), id, "c", 1, 1)
		}
		if g, _ := s.Next(at(r.d)); len(g) != r.n {
			t.Fatalf("at %v: released %d, want %d", r.d, len(g), r.n)
		}
	}
	for _, tc := range []struct {
		now   time.Duration
		rate  int64 // cost units
		units int64
		falls time.Duration
	}{
		{800 * time.Millisecond, 9, 9, 800 * time.Millisecond}, // at the rate
		{800 * time.Millisecond, 10, 9, 800 * time.Millisecond},
		{800 * time.Millisecond, 8, 9, time.Second}, // the 3 of 0 must leave
		{800 * time.Millisecond, 6, 9, time.Second},
		{800 * time.Millisecond, 5, 9, 1300 * time.Millisecond},
		{800 * time.Millisecond, 0, 9, 1600 * time.Millisecond},
		{time.Second, 6, 6, time.Second}, // the 3 of 0 have left
		{time.Second, 4, 6, 1300 * time.Millisecond},
		{time.Second, 3, 6, 1600 * time.Millisecond}, // 4 at 0.6s must leave too
		{1700 * time.Millisecond, 0, 0, 1700 * time.Millisecond},
	} {
		r := s.Released(at(tc.now), tc.rate*sc)
		if !r.At.Equal(at(tc.now)) || r.Units != tc.units*sc || !r.Falls.Equal(at(tc.falls)) {
			t.Errorf("Released(%v, %d): %d at %v, falls at %v; want %d, falls at %v",
				tc.now, tc.rate*sc, r.Units, r.At.Sub(t0), r.Falls.Sub(t0), tc.units*sc, tc.falls)
		}
	}
}

// lowerNode is a node stepping its Balancer with a real Scheduler and a
// lower callback as Upstream's resize: SetRate, then what was released.
type lowerNode struct {
	t      *testing.T
	st     *fakeStore
	bal    *Balancer
	s      *Scheduler
	grants []Grant
	id     uint64
}

// newLowerNode returns node a on st, its scheduler releasing nothing
// until its first step.
func newLowerNode(t *testing.T, cfg Config, st *fakeStore) *lowerNode {
	n := &lowerNode{t: t, st: st, bal: newBalancer(t, cfg, st.ledger("a")), s: newSched(t, cfg)}
	n.s.SetRate(t0, 0, 0, time.Time{}) // nothing until its first step
	return n
}

// lower returns the callback for a Step or Reclaim at now.
func (n *lowerNode) lower(now time.Time) func(Share) Released {
	return func(sh Share) Released {
		n.s.SetRate(now, sh.Rate, sh.Expect, sh.Stop)
		return n.s.Released(now, sh.Rate)
	}
}

// resize runs a Step (a Reclaim if not step) at now and applies the share;
// it returns the share and the node's last claim, which must be granted
// at now.
func (n *lowerNode) resize(now time.Time, step bool) (Share, claimRecord) {
	n.t.Helper()
	var sh Share
	var err error
	if step {
		sh, err = n.bal.Step(context.Background(), now, heavy, n.lower(now))
	} else {
		sh, err = n.bal.Reclaim(context.Background(), now, n.lower(now))
	}
	if err != nil {
		n.t.Fatalf("at %v: %v", now.Sub(t0), err)
	}
	n.s.SetRate(now, sh.Rate, sh.Expect, sh.Stop)
	cs := n.st.claimsOf("a")
	c := cs[len(cs)-1]
	if !c.ok || !c.at.Equal(now) {
		n.t.Fatalf("at %v: last claim %+v, want one granted then", now.Sub(t0), c)
	}
	return sh, c
}

// run releases what the scheduler allows from from until before until,
// keeping 200 requests waiting.
func (n *lowerNode) run(from, until time.Time) {
	for now := from; now.Before(until); {
		for n.s.Len() < 200 {
			n.id++
			enqueue(n.t, n.s, now, n.id, "busy", 1, 1)
		}
		g, wake := n.s.Next(now)
		n.grants = append(n.grants, g...)
		if wake.IsZero() {
			return
		}
		now = wake
	}
}

// inWindow returns the cost units of grants in the Window w up to now, and
// when they fall to rate: when the last of the oldest that must leave
// leaves; now if they are at or below it.
func inWindow(grants []Grant, now time.Time, w time.Duration, rate int64) (units int64, falls time.Time) {
	var in []Grant
	for _, g := range grants {
		if !g.At.After(now) && now.Sub(g.At) < w {
			in = append(in, g)
			units += g.Cost
		}
	}
	falls = now
	for i, left := 0, units; left > rate; i++ {
		left -= in[i].Cost
		falls = in[i].At.Add(w)
	}
	return units, falls
}

// A node that shrinks holds only what went out: with a lower callback, one
// that released little in the last Window claims its new target at once,
// while one that released at its old rate claims what it released, and
// is told to Reclaim (Retry, at most when the releases fall to its new
// rate), which claims less as they leave the window, down to the target.
func TestBalancerHoldsWhatWentOut(t *testing.T) {
	cfg := Config{Rate: 100, Window: time.Second}
	sc := cfg.scale()
	// b asks 40, a's heavy group 60; b asks 60 from 1s on, a 40. b takes
	// what a frees as soon as it does.
	setup := func(t *testing.T) (*fakeStore, *lowerNode) {
		st := newFakeStore(cfg, 4*time.Second)
		st.demands["b"] = fakeDemand{Demand{Light: 40}, at(time.Hour)}
		st.grows["b"] = 60 * sc
		n := newLowerNode(t, cfg, st)
		if sh, c := n.resize(t0, true); sh.Rate != 60*sc || c.units != 60*sc {
			t.Fatalf("at 0: rate %d, claim %d; want both %d", sh.Rate, c.units, 60*sc)
		}
		st.demands["b"] = fakeDemand{Demand{Light: 60}, at(time.Hour)}
		return st, n
	}

	t.Run("released little", func(t *testing.T) {
		st, n := setup(t)
		for i := range 5 {
			enqueue(t, n.s, at(200*time.Millisecond), uint64(i+1), "light", 1, 1)
		}
		if g, _ := n.s.Next(at(200 * time.Millisecond)); len(g) != 5 {
			t.Fatalf("released %d at 0.2s, want 5", len(g))
		}
		sh, c := n.resize(at(time.Second), true)
		if c.units != 40*sc || sh.Rate != 40*sc || sh.Expect != 40*sc {
			t.Errorf("at 1s, 5 released in the Window: claim %d, rate %d, expect %d; want all %d, not the old rate %d",
				c.units, sh.Rate, sh.Expect, 40*sc, 60*sc)
		}
		if !sh.Retry.IsZero() {
			t.Errorf("at 1s: Retry %v, want none: it holds its rate", sh.Retry.Sub(t0))
		}
		if len(st.overs) > 0 {
			t.Errorf("the claims went over the rate: %v", st.overs)
		}
	})

	t.Run("released at its old rate", func(t *testing.T) {
		st, n := setup(t)
		now := at(time.Second)
		n.run(t0, now)
		released, falls := inWindow(n.grants, now, cfg.Window, 40)
		if released <= 42 || released > 60 {
			t.Fatalf("released %d in the Window up to 1s, want near the rate of 60", released)
		}
		sh, c := n.resize(now, true)
		if c.units != released*sc || sh.Rate != 40*sc || sh.Expect != 40*sc {
			t.Errorf("at 1s, %d released in the Window: claim %d, rate %d, expect %d; want claim %d, rate and expect %d",
				released, c.units, sh.Rate, sh.Expect, released*sc, 40*sc)
		}
		firstFalls, last := falls, c.units
		for i := 0; !sh.Retry.IsZero(); i++ {
			if !sh.Retry.After(now) || sh.Retry.After(falls) {
				t.Fatalf("at %v, holding %d at rate %d: Retry at %v, want after it and by %v, when the releases fall to the rate",
					now.Sub(t0), last, sh.Rate, sh.Retry.Sub(t0), falls.Sub(t0))
			}
			if i == 10 {
				t.Fatalf("Retry at %v after %d reclaims", sh.Retry.Sub(t0), i)
			}
			n.run(now, sh.Retry)
			now = sh.Retry
			released, falls = inWindow(n.grants, now, cfg.Window, 40)
			sh, c = n.resize(now, false)
			if want := max(released, 40) * sc; c.units != want || c.units >= last {
				t.Errorf("reclaim at %v, %d released in the Window: claim %d, want %d, less than the %d before", now.Sub(t0), released, c.units, want, last)
			}
			if sh.Rate != 40*sc || sh.Expect != 40*sc {
				t.Errorf("reclaim at %v: rate %d, expect %d; want both %d", now.Sub(t0), sh.Rate, sh.Expect, 40*sc)
			}
			last = c.units
		}
		if last != 40*sc || now.After(firstFalls) {
			t.Errorf("the reclaims ended at %v holding %d, want %d by %v", now.Sub(t0), last, 40*sc, firstFalls.Sub(t0))
		}
		if held, _ := st.held(now, "a"); held != 40*sc {
			t.Errorf("at %v: the ledger holds %d for a, want %d", now.Sub(t0), held, 40*sc)
		}
		checkWindow(t, n.grants, 60, cfg.Window)
		if len(st.overs) > 0 {
			t.Errorf("the claims went over the rate: %v", st.overs)
		}
	})
}

// Granted its target, a node with heavy groups claims its part of the units
// no node holds, in proportion to its heavy weight in the sum, in whole
// units; a node with no heavy group, or whose part is under one unit,
// takes none. The claims never sum over the rate.
func TestBalancerSpare(t *testing.T) {
	cfg := Config{Rate: 100, Window: time.Second}
	sc := cfg.scale()
	for _, tc := range []struct {
		name   string
		mine   []GroupDemand
		bHolds int64 // scaled; b is heavy, of weight 3
		target int64 // cost units
		extra  int64 // cost units
	}{
		// 25 of 100 for weight 1 of 4; 45 free: a quarter, 11.25.
		{"heavy", heavy, 30 * sc, 25, 11},
		// 40 for weight 2 of 5; 25 free: 2/5 of them.
		{"heavier", []GroupDemand{{Weight: 2, Rate: 1e6}}, 35 * sc, 40, 10},
		// 44.5 free: 44 whole units, a quarter of which is 11.
		{"free units not whole", heavy, 30*sc + sc/2, 25, 11},
		// 3 free: a quarter is under a unit.
		{"part under a unit", heavy, 72 * sc, 25, 0},
		// Light: its 10; 60 free, none of it for a.
		{"no heavy group", []GroupDemand{{Weight: 1, Rate: 10}}, 30 * sc, 10, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newFakeStore(cfg, 4*time.Second)
			st.claims["b"] = fakeClaim{tc.bHolds, at(time.Hour)}
			st.demands["b"] = fakeDemand{Demand{Heavy: 3}, at(time.Hour)}
			a := newBalancer(t, cfg, st.ledger("a"))
			sh, err := a.Step(context.Background(), t0, tc.mine, nil)
			if err != nil {
				t.Fatal(err)
			}
			want := (tc.target + tc.extra) * sc
			if sh.Rate != want || sh.Expect != want {
				t.Errorf("rate %d, expect %d; want both %d: its target %d and %d spare", sh.Rate, sh.Expect, want, tc.target*sc, tc.extra*sc)
			}
			cs := st.claimsOf("a")
			wantClaims := []int64{tc.target * sc}
			if tc.extra > 0 {
				wantClaims = append(wantClaims, want)
			}
			var got []string
			ok := len(cs) == len(wantClaims)
			for i, c := range cs {
				got = append(got, fmt.Sprintf("%d (granted %v)", c.units, c.ok))
				ok = ok && c.ok && c.units == wantClaims[i]
			}
			if !ok {
				t.Errorf("claims %v, want granted claims of %v", got, wantClaims)
			}
			if held, _ := st.held(t0, "a"); held != want {
				t.Errorf("the ledger holds %d for a, want %d", held, want)
			}
			if len(st.overs) > 0 {
				t.Errorf("the claims went over the rate: %v", st.overs)
			}
		})
	}
}

// A burst that ends stops counting at once: a group that asked 40 units
// in each of two spans and then nothing, with nothing waiting, reads 0
// from its second idle call, not its eight-span average as that decays
// (20 units, then 16, ...). Asking a little again, it is measured at its
// recent rate while that is under a quarter of its average.
func TestDemandsEndedBurst(t *testing.T) {
	s := newSched(t, Config{Rate: 100, Window: time.Second, Burst: 40})
	s.TrackDemand(t0)
	id := uint64(0)
	ask := func(now time.Time, n int) {
		t.Helper()
		for range n {
			id++
			if err := admit(s, now, id, "burst", 1, 1, 0); err != nil {
				t.Fatal(err)
			}
			if g, _ := s.Next(now); len(g) != 1 {
				t.Fatalf("request %d did not go at once", id)
			}
		}
	}
	for k, want := range []float64{40, 40, 80.0 / 3, 0, 0, 0, 0, 0, 1} {
		switch k {
		case 0, 1:
			ask(at(time.Duration(k)*time.Second+100*time.Millisecond), 40)
		case 8:
			ask(at(time.Duration(k)*time.Second+500*time.Millisecond), 2)
		}
		ds := s.Demands(at(time.Duration(k+1) * time.Second))
		if len(ds) != 1 || math.Abs(ds[0].Rate-want) > 1e-9 {
			t.Errorf("call at %ds: demands %+v, want the group asking %.3f", k+1, ds, want)
		}
	}
}
