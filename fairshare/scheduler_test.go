package fairshare

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them: an
// Upstream's goroutine stops on Close.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func newSched(t *testing.T, c Config) *Scheduler {
	t.Helper()
	s, err := NewScheduler(c)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func enqueue(t *testing.T, s *Scheduler, now time.Time, id uint64, c Customer, weight, cost int64) {
	t.Helper()
	if err := s.Enqueue(now, Request{ID: id, Customer: c, Weight: weight, Cost: cost}); err != nil {
		t.Fatalf("Enqueue(%d, %s): %v", id, c, err)
	}
}

// drain calls Next at every wake time from now until until, and returns
// the grants.
func drain(s *Scheduler, now, until time.Time) []Grant {
	var all []Grant
	for !now.After(until) {
		g, wake := s.Next(now)
		all = append(all, g...)
		if wake.IsZero() {
			break
		}
		now = wake
	}
	return all
}

// checkWindow fails if any interval of length w holds more than rate units
// of grants: every pair of grants less than w apart shares a window.
func checkWindow(t *testing.T, grants []Grant, rate int64, w time.Duration) {
	t.Helper()
	var sum int64
	lo := 0
	for i, g := range grants {
		sum += g.Cost
		for grants[i].At.Sub(grants[lo].At) >= w {
			sum -= grants[lo].Cost
			lo++
		}
		if sum > rate {
			t.Fatalf("%d units in the window ending at %v, more than %d", sum, g.At.Sub(t0), rate)
		}
	}
}

func TestFairConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		c     Config
		field string // "" valid
	}{
		{Config{Rate: 100}, ""},
		{Config{Rate: 100, Burst: 100, Window: time.Minute, MaxQueue: 1, Quantum: 5}, ""},
		{Config{}, "Rate"},
		{Config{Rate: 2e9}, "Rate"},
		{Config{Rate: 100, Window: -time.Second}, "Window"},
		{Config{Rate: 100, Window: 10}, "Window"},
		{Config{Rate: 100, Burst: 101}, "Burst"},
		{Config{Rate: 100, MaxQueue: -1}, "MaxQueue"},
		{Config{Rate: 100, Quantum: 101}, "Quantum"},
	} {
		err := tc.c.Validate()
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("%+v: %v", tc.c, err)
		case tc.field != "" && (err == nil || !strings.Contains(err.Error(), tc.field)):
			t.Errorf("%+v: got %v, want an error naming %s", tc.c, err, tc.field)
		}
	}
}

// Under contention, throughput follows weight; alone, a customer takes the
// whole rate (work-conserving).
func TestFairShares(t *testing.T) {
	type cust struct {
		name   Customer
		weight int64
		cost   int64
		want   float64 // share of the units granted
	}
	for _, tc := range []struct {
		name  string
		custs []cust
	}{
		{"alone", []cust{{"a", 1, 1, 1}}},
		{"equal", []cust{{"a", 1, 1, 0.5}, {"b", 1, 1, 0.5}}},
		{"weights 2:1", []cust{{"a", 2, 1, 2.0 / 3}, {"b", 1, 1, 1.0 / 3}}},
		{"weights 3:1:1", []cust{{"a", 3, 1, 0.6}, {"b", 1, 1, 0.2}, {"c", 1, 1, 0.2}}},
		{"costs 4:1 equal weights", []cust{{"a", 1, 4, 0.5}, {"b", 1, 1, 0.5}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSched(t, Config{Rate: 100, MaxQueue: 10_000})
			id := uint64(0)
			for _, c := range tc.custs {
				for range 2000 / c.cost {
					id++
					enqueue(t, s, t0, id, c.name, c.weight, c.cost)
				}
			}
			grants := drain(s, t0, t0.Add(10*time.Second-time.Nanosecond))
			checkWindow(t, grants, 100, time.Second)
			units := map[Customer]int64{}
			var total int64
			for _, g := range grants {
				units[g.Customer] += g.Cost
				total += g.Cost
			}
			if total < 990 { // 10 windows of 100, less rounding
				t.Errorf("granted %d units in 10s, want about 1000: not work-conserving", total)
			}
			for _, c := range tc.custs {
				got := float64(units[c.name]) / float64(total)
				if got < c.want-0.01 || got > c.want+0.01 {
					t.Errorf("%s got %.3f of the units, want %.3f", c.name, got, c.want)
				}
			}
		})
	}
}

// No interval of length Window ever holds more than Rate units, whatever
// the arrivals, costs, weights and burst.
func TestFairWindowBound(t *testing.T) {
	for _, burst := range []int64{1, 10, 50, 100} {
		r := rand.New(rand.NewPCG(uint64(burst), 7))
		s := newSched(t, Config{Rate: 100, Burst: burst, MaxQueue: 100_000})
		var grants []Grant
		now := t0
		id := uint64(0)
		for range 5_000 {
			// 1.5 times the rate on average: queues build and drain.
			mean := float64(burst+1) / 2 / 150 * float64(time.Second)
			now = now.Add(time.Duration(r.ExpFloat64() * mean))
			id++
			c := Customer(rune('a' + r.IntN(5)))
			enqueue(t, s, now, id, c, 1+r.Int64N(4), 1+r.Int64N(burst))
			g, _ := s.Next(now)
			grants = append(grants, g...)
		}
		grants = append(grants, drain(s, now, now.Add(time.Hour))...)
		if s.Len() != 0 {
			t.Fatalf("burst %d: %d requests still waiting", burst, s.Len())
		}
		checkWindow(t, grants, 100, time.Second)
	}
}

// Each customer's requests go in the order they came.
func TestFairFIFOPerCustomer(t *testing.T) {
	s := newSched(t, Config{Rate: 10})
	for id := uint64(1); id <= 30; id++ {
		enqueue(t, s, t0, id, Customer("abc"[id%3:id%3+1]), 1, 1)
	}
	last := map[Customer]uint64{}
	for _, g := range drain(s, t0, t0.Add(time.Minute)) {
		if g.ID < last[g.Customer] {
			t.Fatalf("%s: %d after %d", g.Customer, g.ID, last[g.Customer])
		}
		last[g.Customer] = g.ID
	}
}

func TestFairCancel(t *testing.T) {
	s := newSched(t, Config{Rate: 10, Burst: 1})
	enqueue(t, s, t0, 1, "a", 1, 1)
	enqueue(t, s, t0, 2, "a", 1, 1)
	enqueue(t, s, t0, 3, "b", 1, 1)
	if g, _ := s.Next(t0); len(g) != 1 || g[0].ID != 1 {
		t.Fatalf("first grants %+v, want id 1", g)
	}
	if s.Cancel(1) {
		t.Error("Cancel of a granted request reported it waiting")
	}
	if !s.Cancel(2) || s.Cancel(2) {
		t.Error("Cancel(2) did not withdraw it exactly once")
	}
	g := drain(s, t0, t0.Add(time.Minute))
	if len(g) != 1 || g[0].ID != 3 {
		t.Fatalf("after cancel got %+v, want only id 3", g)
	}
	if s.Len() != 0 || len(s.queues) != 0 || len(s.groups) != 0 || s.busy.len() != 0 {
		t.Errorf("state left behind: %d waiting, %d queues, %d groups, %d busy", s.Len(), len(s.queues), len(s.groups), s.busy.len())
	}
}

func TestFairEnqueueErrors(t *testing.T) {
	s := newSched(t, Config{Rate: 10, Burst: 5, MaxQueue: 2})
	enqueue(t, s, t0, 1, "a", 1, 1)
	enqueue(t, s, t0, 2, "a", 1, 1)
	if err := s.Enqueue(t0, Request{ID: 3, Customer: "a", Weight: 1, Cost: 1}); !errors.Is(err, ErrQueueFull) {
		t.Errorf("third request of a: %v, want ErrQueueFull", err)
	}
	enqueue(t, s, t0, 3, "b", 1, 1) // another customer's queue is its own
	for _, r := range []Request{
		{ID: 4, Customer: "c", Weight: 0, Cost: 1},
		{ID: 4, Customer: "c", Weight: MaxWeight + 1, Cost: 1},
		{ID: 4, Customer: "c", Weight: 1, Cost: 0},
		{ID: 4, Customer: "c", Weight: 1, Cost: 6},
		{ID: 3, Customer: "c", Weight: 1, Cost: 1},
	} {
		if err := s.Enqueue(t0, r); err == nil {
			t.Errorf("Enqueue(%+v) succeeded", r)
		}
	}
}

// The estimate follows fluid fair sharing: a light customer behind heavy
// backlogs waits little, a heavy one its backlog's share.
func TestFairEstimate(t *testing.T) {
	s := newSched(t, Config{Rate: 100, Burst: 10, MaxQueue: 1000})
	if d := s.Estimate(t0, "a", "", 1, 1); d != 0 {
		t.Errorf("idle upstream: estimate %v, want 0", d)
	}
	id := uint64(0)
	for _, c := range []Customer{"h1", "h2"} {
		for range 500 {
			id++
			enqueue(t, s, t0, id, c, 1, 1)
		}
	}
	// Light: its 1 unit, 1 of each heavy one's, less the 10 the bucket holds.
	if d := s.Estimate(t0, "light", "", 1, 1); d != 0 {
		t.Errorf("light customer: estimate %v, want 0", d)
	}
	// h1 holds 500: 500 + 500 of h2 + 1 - 10 units at 10ms.
	if d, want := s.Estimate(t0, "h1", "", 1, 1), 9910*time.Millisecond; d != want {
		t.Errorf("heavy customer: estimate %v, want %v", d, want)
	}
	// A customer owing nothing goes first, whatever its weight and cost:
	// 10 units, less the 10 the bucket holds.
	if d, want := s.Estimate(t0, "w4", "", 4, 10), time.Duration(0); d != want {
		t.Errorf("weighted customer: estimate %v, want %v", d, want)
	}
	// The estimate is close to what happens.
	enqueue(t, s, t0, 9999, "light", 1, 1)
	for _, g := range drain(s, t0, t0.Add(time.Minute)) {
		if g.ID == 9999 && g.Waited > 100*time.Millisecond {
			t.Errorf("light request waited %v, estimated 0", g.Waited)
		}
	}
}

// TestStats: the longest queues first, at most top of them, and the units
// granted in the last window, which leave it as the window passes.
func TestStats(t *testing.T) {
	s := newSched(t, Config{Rate: 10, Window: time.Second, Burst: 2})
	enqueue(t, s, t0, 1, "a", 1, 1)
	enqueue(t, s, t0, 2, "a", 1, 1)
	enqueue(t, s, t0, 3, "b", 2, 1)
	enqueue(t, s, t0, 4, "b", 2, 1)
	enqueue(t, s, t0, 5, "b", 2, 1)
	enqueue(t, s, t0, 6, "c", 1, 1)
	if g, _ := s.Next(t0); len(g) != 2 {
		t.Fatalf("burst 2 released %d", len(g))
	}
	st := s.Stats(t0, 2)
	if st.Waiting != 4 || st.Customers != 3 || st.Granted != 2 || st.Utilisation != 0.2 {
		t.Fatalf("stats %+v", st)
	}
	if len(st.Queues) != 2 || st.Queues[0].Customer != "b" || st.Queues[0].Waiting != 2 || st.Queues[0].Weight != 2 || st.Queues[1].Waiting != 1 {
		t.Fatalf("queues %+v", st.Queues)
	}
	if st := s.Stats(t0.Add(time.Second), 0); st.Granted != 0 || len(st.Queues) != 0 {
		t.Fatalf("a window later: %+v", st)
	}
}

// TestFairGroupsShareTheirWeight: a group (a tenant) gets its weight's
// share whatever the number of its customers: ten backlogged customers of
// one group and one of another split the upstream evenly, not ten to one;
// and a group that names a new customer for every request cannot jump the
// rotation with each: it still gets about half.
func TestFairGroupsShareTheirWeight(t *testing.T) {
	cfg := Config{Rate: 100, Window: time.Second, Burst: 10, MaxQueue: 5000}
	byGroup := func(grants []Grant, groupOf func(Customer) string) map[string]int64 {
		got := map[string]int64{}
		for _, g := range grants {
			got[groupOf(g.Customer)] += g.Cost
		}
		return got
	}
	groupOf := func(c Customer) string { return strings.SplitN(string(c), "/", 2)[0] }

	s := newSched(t, cfg)
	id := uint64(0)
	for k := range 10 {
		for range 200 {
			id++
			if err := s.Enqueue(t0, Request{ID: id, Customer: Customer("many/" + string(rune('a'+k))), Group: "many", Weight: 1, Cost: 1}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for range 2000 {
		id++
		if err := s.Enqueue(t0, Request{ID: id, Customer: "one/x", Group: "one", Weight: 1, Cost: 1}); err != nil {
			t.Fatal(err)
		}
	}
	got := byGroup(drain(s, t0, t0.Add(10*time.Second)), groupOf)
	if total := got["many"] + got["one"]; total < 990 || got["many"] < total*49/100 || got["many"] > total*51/100 {
		t.Fatalf("ten customers of one group and one of another: %v, want an even split of about 1000", got)
	}

	// One customer per request: each request of group "fresh" under a new
	// name, enqueued as the last one goes, against a backlogged "one".
	s = newSched(t, cfg)
	for range 2000 {
		id++
		if err := s.Enqueue(t0, Request{ID: id, Customer: "one/x", Group: "one", Weight: 1, Cost: 1}); err != nil {
			t.Fatal(err)
		}
	}
	var grants []Grant
	now := t0
	for n := 0; now.Before(t0.Add(10 * time.Second)); n++ {
		for range 3 { // three new names waiting at any time
			id++
			if err := s.Enqueue(now, Request{ID: id, Customer: Customer("fresh/" + strings.Repeat("k", 1+n%50) + string(rune('a'+id%26))), Group: "fresh", Weight: 1, Cost: 1}); err != nil {
				t.Fatal(err)
			}
		}
		g, wake := s.Next(now)
		grants = append(grants, g...)
		if wake.IsZero() {
			break
		}
		now = wake
	}
	got = byGroup(grants, groupOf)
	if total := got["fresh"] + got["one"]; got["fresh"] > total*55/100 {
		t.Fatalf("a group naming new customers against a backlogged one: %v, want at most about half", got)
	}
}

// grantsOf returns the grants of customer c.
func grantsOf(gs []Grant, c Customer) []Grant {
	var out []Grant
	for _, g := range gs {
		if g.Customer == c {
			out = append(out, g)
		}
	}
	return out
}

// A Cap bounds what each customer is released in any Window, however idle
// the upstream; under it, customers share the rate fairly as before.
func TestCapBoundsEachCustomer(t *testing.T) {
	s := newSched(t, Config{Rate: 100, Window: time.Second, Burst: 10, Cap: 60})
	id := uint64(0)
	for range 400 {
		id++
		enqueue(t, s, t0, id, "alone", 1, 1)
	}
	gs := drain(s, t0, t0.Add(3*time.Second-time.Nanosecond))
	checkWindow(t, gs, 60, time.Second)
	if len(gs) < 170 {
		t.Errorf("alone, the customer got %d in 3s, want about 180: its Cap of 60 a second", len(gs))
	}

	// Two customers: their fair shares, 50 each, are under the Cap.
	s = newSched(t, Config{Rate: 100, Window: time.Second, Burst: 10, Cap: 60})
	for range 400 {
		id++
		enqueue(t, s, t0, id, "a", 1, 1)
		id++
		enqueue(t, s, t0, id, "b", 1, 1)
	}
	gs = drain(s, t0, t0.Add(3*time.Second-time.Nanosecond))
	checkWindow(t, gs, 100, time.Second)
	for _, c := range []Customer{"a", "b"} {
		mine := grantsOf(gs, c)
		checkWindow(t, mine, 60, time.Second)
		if len(mine) < 140 || len(mine) > 160 {
			t.Errorf("customer %s got %d in 3s, want about 150: half the rate, under the Cap", c, len(mine))
		}
	}
}

// A customer cannot pass its Cap by letting its queue drain and coming
// back: its releases count for a Window whether it waits or not.
func TestCapOutlivesTheQueue(t *testing.T) {
	s := newSched(t, Config{Rate: 100, Window: time.Second, Burst: 10, Cap: 2})
	enqueue(t, s, t0, 1, "a", 1, 1)
	enqueue(t, s, t0, 2, "a", 1, 1)
	if gs := drain(s, t0, t0); len(gs) != 2 {
		t.Fatalf("released %d at 0, want both", len(gs))
	}
	now := t0.Add(100 * time.Millisecond)
	enqueue(t, s, now, 3, "a", 1, 1)
	g, wake := s.Next(now)
	if len(g) != 0 || !wake.Equal(t0.Add(time.Second)) {
		t.Fatalf("at 100ms: released %d, wake at %v; want none until 1s, when the first release leaves the window", len(g), wake.Sub(t0))
	}
	if d := s.Estimate(now, "a", "", 1, 1); d < 900*time.Millisecond {
		t.Errorf("a's next request at 100ms: estimate %v, want at least the 900ms the Cap holds it", d)
	}
	if d := s.Estimate(now, "b", "", 1, 1); d != 0 {
		t.Errorf("another customer's request: estimate %v, want 0", d)
	}
	if g, _ := s.Next(t0.Add(time.Second)); len(g) != 1 || g[0].ID != 3 {
		t.Errorf("at 1s: released %v, want request 3", g)
	}
}

// A Cap over the rate, or a request costing more than the Cap, is refused
// with an error naming the Cap.
func TestCapValidation(t *testing.T) {
	if _, err := NewScheduler(Config{Rate: 10, Cap: 11}); err == nil || !strings.Contains(err.Error(), "Cap 11") {
		t.Errorf("Cap over Rate: %v, want an error naming Cap", err)
	}
	s := newSched(t, Config{Rate: 100, Burst: 10, Cap: 4})
	err := s.Admit(t0, Request{ID: 1, Customer: "a", Weight: 1, Cost: 5}, 0)
	if err == nil || !strings.Contains(err.Error(), "Cap (4)") {
		t.Errorf("a request costing 5 under a Cap of 4: %v, want an error naming the Cap", err)
	}
	if s.Len() != 0 {
		t.Errorf("%d waiting after a refused request, want 0", s.Len())
	}
}

// A scheduler that does not measure demand (one node: TrackDemand is never
// called) keeps none, so any number of groups may come and go: it never
// refuses a new one for having seen too many.
func TestNoDemandKeptUntracked(t *testing.T) {
	s := newSched(t, Config{Rate: 1000, Window: time.Second, Burst: 1})
	for i := range maxAsking + 10 {
		c := Customer(fmt.Sprint("c", i))
		if err := s.Admit(t0, Request{ID: uint64(i + 1), Customer: c, Weight: 1, Cost: 1}, 0); err != nil {
			t.Fatalf("group %d: %v", i, err)
		}
		s.Cancel(uint64(i + 1))
	}
	if len(s.asked) != 0 || s.Demands(t0.Add(time.Second)) != nil {
		t.Errorf("%d groups' demand kept without TrackDemand, want none", len(s.asked))
	}
}

// A heavy group whose requests are refused, so that its queue drains, is
// not light when it asks again, even after a sweep of the groups that no
// longer owe anything: it asked more than its share, whatever it got.
func TestHeavyGroupNotLightAfterSweep(t *testing.T) {
	s := newSched(t, Config{Rate: 10, Burst: 1, MaxQueue: 1000})
	now := t0
	id := uint64(0)
	for range 20 { // a tenant that keeps the upstream busy
		id++
		enqueue(t, s, now, id, "busy", 1, 1)
	}
	id++
	if err := s.Admit(now, Request{ID: id, Customer: "heavy", Weight: 1, Cost: 1}, time.Second); err != nil {
		t.Fatalf("heavy's first request: %v", err)
	}
	for range 30 { // refused: it asks far more than its share
		id++
		if err := s.Admit(now, Request{ID: id, Customer: "heavy", Weight: 1, Cost: 1}, 50*time.Millisecond); !errors.Is(err, ErrShortage) {
			t.Fatalf("heavy's request behind its backlog: %v, want ErrShortage", err)
		}
	}
	drain(s, now, now.Add(300*time.Millisecond)) // heavy's one request goes
	now = now.Add(300 * time.Millisecond)
	// Groups come and go, past the size that sweeps the groups owing
	// nothing.
	for i := range 200 {
		id++
		enqueue(t, s, now, id, Customer(fmt.Sprint("passing", i)), 1, 1)
		s.Next(now)
		now = now.Add(time.Millisecond)
	}
	id++
	if err := s.Admit(now, Request{ID: id, Customer: "heavy", Weight: 1, Cost: 1}, 0); err != nil {
		t.Fatal(err)
	}
	if q := s.queues["heavy"]; q == nil || len(q.reqs) != 1 || q.reqs[0].light {
		t.Errorf("heavy group asking again after the sweep: queued %+v, want one request, not light", q)
	}
}
