package fairshare

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// offer is one request a loadRun offers: who, and how long it may wait.
type offer struct {
	c       Customer
	group   string
	weight  int64
	cost    int64
	maxWait time.Duration
}

// loadResult is what a loadRun measured for each customer.
type loadResult struct {
	units   map[Customer]int64 // cost units granted
	refused map[Customer]int   // refused at arrival (ErrShortage)
	dropped map[Customer]int   // withdrawn after waiting past maxWait
	waits   map[Customer][]time.Duration
	grants  []Grant
}

// loadRun drives s on a virtual clock in steps of 1ms for d: at each step
// it offers what arrive returns through Admit, withdraws what waited past
// its maxWait (as an Upstream does), and releases what Next allows.
func loadRun(t *testing.T, s *Scheduler, d time.Duration, arrive func(now time.Duration) []offer) loadResult {
	t.Helper()
	res := loadResult{units: map[Customer]int64{}, refused: map[Customer]int{}, dropped: map[Customer]int{}, waits: map[Customer][]time.Duration{}}
	type pending struct {
		id       uint64
		c        Customer
		deadline time.Duration
	}
	var waiting []pending
	id := uint64(0)
	for now := time.Duration(0); now < d; now += time.Millisecond {
		for _, o := range arrive(now) {
			id++
			err := s.Admit(t0.Add(now), Request{ID: id, Customer: o.c, Group: o.group, Weight: o.weight, Cost: o.cost}, o.maxWait)
			switch {
			case err == ErrShortage:
				res.refused[o.c]++
			case err != nil:
				t.Fatalf("at %v: Admit(%s): %v", now, o.c, err)
			case o.maxWait > 0:
				waiting = append(waiting, pending{id, o.c, now + o.maxWait})
			}
		}
		kept := waiting[:0]
		for _, p := range waiting {
			if now > p.deadline {
				if s.Cancel(p.id) {
					res.dropped[p.c]++
				}
				continue
			}
			kept = append(kept, p)
		}
		waiting = kept
		gs, _ := s.Next(t0.Add(now))
		for _, g := range gs {
			res.units[g.Customer] += g.Cost
			res.waits[g.Customer] = append(res.waits[g.Customer], g.Waited)
		}
		res.grants = append(res.grants, gs...)
	}
	return res
}

// backlogged returns the offers that keep customer c of group with n
// requests waiting: whatever it was granted since the last call, it asks
// again.
func backlogged(s *Scheduler, c Customer, group string, weight, cost int64, n int) []offer {
	have := 0
	if q := s.queues[c]; q != nil {
		have = len(q.reqs)
	}
	var os []offer
	for range n - have {
		os = append(os, offer{c: c, group: group, weight: weight, cost: cost})
	}
	return os
}

// backloggedTenants returns the offers that keep n tenants, each its own
// customer named prefix and its number, of the weights in turn, with
// depth requests of cost 1 waiting (backlogged).
func backloggedTenants(s *Scheduler, prefix string, n int, weights []int64, depth int) []offer {
	var os []offer
	for i := range n {
		c := Customer(fmt.Sprint(prefix, i))
		os = append(os, backlogged(s, c, string(c), weights[i%len(weights)], 1, depth)...)
	}
	return os
}

// A light customer that asks with a short maxWait, behind heavy customers
// of weights 4, 2 and 1, is served next, as the rotation serves a customer
// new to it: its estimate says so, so it is not refused, and it waits
// about one release.
func TestLightCustomerShortMaxWait(t *testing.T) {
	s := newSched(t, Config{Rate: 100, Window: time.Second, Burst: 10, MaxQueue: 1000})
	weights := []int64{4, 2, 1}
	res := loadRun(t, s, 30*time.Second, func(now time.Duration) []offer {
		os := backloggedTenants(s, "heavy", 30, weights, 20)
		if now%(3300*time.Millisecond) == 500*time.Millisecond { // 0.3 a second
			os = append(os, offer{c: "light", weight: 1, cost: 1, maxWait: 300 * time.Millisecond})
		}
		return os
	})
	checkWindow(t, res.grants, 100, time.Second)
	if res.refused["light"] > 0 || res.dropped["light"] > 0 || len(res.waits["light"]) != 9 {
		t.Errorf("light customer: %d refused, %d dropped, %d served of 9", res.refused["light"], res.dropped["light"], len(res.waits["light"]))
	}
	for _, w := range res.waits["light"] {
		if w > 50*time.Millisecond {
			t.Errorf("light customer waited %v, want about one release (10ms)", w)
		}
	}
}

// A tenant gets its weight's share whatever the number of keys its
// requests name, even when each key alone asks for little: tenant a, of
// weight 1, asks twice its share at random times, spread over 1, 5 or 20
// keys, beside nine backlogged tenants of weights 4, 2 and 1; it gets its
// share, a twenty-second of the upstream, however many keys it names.
func TestGroupKeysGetOneShare(t *testing.T) {
	for _, keys := range []int{1, 5, 20} {
		t.Run(fmt.Sprint(keys, " keys"), func(t *testing.T) {
			s := newSched(t, Config{Rate: 100, Window: time.Second, Burst: 10, MaxQueue: 1000})
			r := rand.New(rand.NewPCG(uint64(keys), 24))
			weights := []int64{4, 2, 1}
			share := 100 / 22.0 // a's weight over the sum of weights, 1 + 3*(4+2+1)
			next := time.Duration(0)
			res := loadRun(t, s, 30*time.Second, func(now time.Duration) []offer {
				var os []offer
				for i := range 9 {
					g := fmt.Sprint("t", i)
					os = append(os, backlogged(s, Customer(g+"/x"), g, weights[i%3], 1, 20)...)
				}
				for ; next <= now; next += time.Duration(r.ExpFloat64() / (2 * share) * float64(time.Second)) {
					k := r.IntN(keys)
					os = append(os, offer{c: Customer(fmt.Sprint("a/", k)), group: "a", weight: 1, cost: 1, maxWait: 2 * time.Second})
				}
				return os
			})
			checkWindow(t, res.grants, 100, time.Second)
			var a int64
			for c, u := range res.units {
				if strings.HasPrefix(string(c), "a/") {
					a += u
				}
			}
			if want := 30 * share; float64(a) < 0.9*want {
				t.Errorf("tenant a on %d keys got %d units in 30s, want its share of %.0f within 10%%", keys, a, want)
			}
		})
	}
}

// Requests that cost 5 get their customer's share in cost units, as
// requests that cost 1 do: a customer asking twice its share in cost-5
// requests, beside twenty backlogged customers of cost-1 requests, gets
// about a twenty-first of the upstream, even with a maxWait (300ms) much
// shorter than the five rounds it would take to save up for one request.
func TestCostlyRequestsGetTheirShare(t *testing.T) {
	for _, maxWait := range []time.Duration{300 * time.Millisecond, time.Second, 2 * time.Second} {
		t.Run(fmt.Sprint("maxWait ", maxWait), func(t *testing.T) {
			s := newSched(t, Config{Rate: 100, Window: time.Second, Burst: 10, MaxQueue: 1000})
			res := loadRun(t, s, 30*time.Second, func(now time.Duration) []offer {
				os := backloggedTenants(s, "cheap", 20, []int64{1}, 20)
				if now%(500*time.Millisecond) == 0 { // 10 units a second
					os = append(os, offer{c: "costly", weight: 1, cost: 5, maxWait: maxWait})
				}
				return os
			})
			checkWindow(t, res.grants, 100, time.Second)
			share := 30 * 100 / 21.0
			if got := float64(res.units["costly"]); got < 0.9*share || got > 1.1*share {
				t.Errorf("costly customer got %.0f units in 30s, want its share of %.0f within 10%% (%d refused, %d dropped)",
					got, share, res.refused["costly"], res.dropped["costly"])
			}
		})
	}
}

// A costly request at the head of the line does not leave the upstream
// idle while it waits for the window to free room: customers asking
// cost 1, 5 and 10 at random, three times the rate in all, with a maxWait
// of 1s, keep it at least 98% used (96% when the line waited behind the
// costly head), and never over the rate in any window.
func TestCostlyHeadLeavesNoRoomUnused(t *testing.T) {
	s := newSched(t, Config{Rate: 100, Window: time.Second, Burst: 10, MaxQueue: 1000})
	r := rand.New(rand.NewPCG(5, 24))
	costs := []int64{1, 5, 10}
	next := make([]time.Duration, 30)
	res := loadRun(t, s, 30*time.Second, func(now time.Duration) []offer {
		var os []offer
		for i := range next {
			cost := costs[i%3]
			for ; next[i] <= now; next[i] += time.Duration(r.ExpFloat64() / (10 / float64(cost)) * float64(time.Second)) {
				c := Customer(fmt.Sprint("c", i))
				os = append(os, offer{c: c, group: string(c), weight: 1, cost: cost, maxWait: time.Second})
			}
		}
		return os
	})
	checkWindow(t, res.grants, 100, time.Second)
	var units int64
	for _, u := range res.units {
		units += u
	}
	if units < 0.98*30*100 {
		t.Errorf("granted %d units in 30s, want at least 98%% of %d", units, 30*100)
	}
}

// A light customer's cluster of requests goes at once, even when a round
// of the rotation takes longer than a Window: 120 tenants keep requests
// waiting (a round is 1.2 s at 100 a second), and a customer asking about
// a third of its share sends 3 requests at once every 8 s, with a maxWait
// of 2 s. Each request moves its tags as if it waited its turn, so it
// gains no share; it only goes sooner. With the credit alone, the first
// two went at once and the third waited a round.
func TestLightClusterServedWithinAWindow(t *testing.T) {
	s := newSched(t, Config{Rate: 100, Window: time.Second, Burst: 10, MaxQueue: 1000})
	res := loadRun(t, s, 60*time.Second, func(now time.Duration) []offer {
		os := backloggedTenants(s, "heavy", 120, []int64{1}, 3)
		if now%(8*time.Second) == 4*time.Second {
			for range 3 {
				os = append(os, offer{c: "light", weight: 1, cost: 1, maxWait: 2 * time.Second})
			}
		}
		return os
	})
	checkWindow(t, res.grants, 100, time.Second)
	if n := len(res.waits["light"]); n != 3*7 {
		t.Fatalf("light customer: %d served of 21 (refused %d, dropped %d)", n, res.refused["light"], res.dropped["light"])
	}
	// The first cluster comes from a customer new to the scheduler, which
	// has not yet shown that it asks less than its share.
	for i, w := range res.waits["light"][3:] {
		if w > time.Second {
			t.Errorf("light request %d waited %v, want within a Window", i+3, w)
		}
	}
	// Its share over the run is what it asked: the heavy tenants still
	// share the rest evenly.
	var least, most int64 = 1 << 62, 0
	for i := range 120 {
		u := res.units[Customer(fmt.Sprint("heavy", i))]
		least, most = min(least, u), max(most, u)
	}
	if most-least > 2 {
		t.Errorf("heavy tenants got %d to %d units, want within 2 of each other", least, most)
	}
}
