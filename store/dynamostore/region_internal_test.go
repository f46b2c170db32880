package dynamostore

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/dynamostore/dynamotest"
)

func item(lim int64) *regionItem {
	return &regionItem{lim: lim, total: map[string]int64{}, pend: map[string]int64{}, from: map[string]int64{}, wrote: 1}
}

// What an item gives, window by window, only grows from one version to
// the next: a second gift waits for the first to take effect, and is then
// added to the total, so a lagging replica never counts more than the
// giver does.
func TestAddGiftsOnlyGrow(t *testing.T) {
	it := item(100)
	if !addGifts(it, map[string]int64{"b": 40}, 10, 2) {
		t.Fatal("the first gift was not added")
	}
	v1 := *it
	v1.total, v1.pend, v1.from = cloneMap(it.total), cloneMap(it.pend), cloneMap(it.from)
	if addGifts(it, map[string]int64{"b": 5}, 20, 9) {
		t.Fatalf("a gift while one is pending (from 10, now 9) was added: %+v", it)
	}
	if !addGifts(it, map[string]int64{"b": 5}, 20, 10) {
		t.Fatal("a gift once the first took effect was not added")
	}
	for _, w := range []int64{0, 10, 15, 20, 30} {
		if old, cur := v1.gave("b", w, 100), it.gave("b", w, 100); cur < old {
			t.Errorf("window %d: the new version gives %d, the old %d: a lagging replica would count more", w, cur, old)
		}
	}
	if g := it.gave("b", 15, 100); g != 40 {
		t.Errorf("window 15: gives %d, want the first gift, 40", g)
	}
	if g := it.gave("b", 20, 100); g != 45 {
		t.Errorf("window 20: gives %d, want both, 45", g)
	}
}

// Allotments sum to at most the limit in every window; gifts made under
// another limit, or in an item near its TTL, count for nothing to their
// receiver.
func TestAllottedSumsToTheLimit(t *testing.T) {
	s := &Store{region: "a", regions: []string{"a", "b", "c"}}
	a, b := item(100), item(100)
	addGifts(a, map[string]int64{"b": 20, "c": 10}, 10, 0)
	addGifts(b, map[string]int64{"c": 5}, 10, 0)
	items := map[string]*regionItem{"a": a, "b": b}
	for _, w := range []int64{0, 10} {
		sum := int64(0)
		for _, r := range s.regions {
			sum += s.allotted(items, r, 100, w)
		}
		if sum > 100 {
			t.Errorf("window %d: allotments sum to %d, over 100", w, sum)
		}
	}
	if got := s.allotted(items, "b", 100, 10); got != 33+20-5 {
		t.Errorf("b from window 10: %d, want 48", got)
	}
	// The limit fell to 60: every gift made under 100 counts for nothing.
	for _, r := range s.regions {
		if got, want := s.allotted(items, r, 60, 10), baseShare(60, indexOf(s.regions, r), 3); got != want {
			t.Errorf("limit 60: %s holds %d, want its even part %d", r, got, want)
		}
	}
	// An item near its TTL: its receivers count its gifts for nothing.
	a.wrote = 10 - int64(allotmentTTL)
	if got := s.allotted(items, "b", 100, 10); got != 33-5 {
		t.Errorf("b, a's item near its TTL: %d, want 28", got)
	}
}

func indexOf(rs []string, r string) int {
	for i, x := range rs {
		if x == r {
			return i
		}
	}
	return -1
}

// TestCounterPKEpoch: a counter key of epoch zero has the partition key it
// had before keys had epochs (counters written before an upgrade are found
// after it); an epoch comes after the tenant's "#", which the tenant's IAM
// policy (dynamodb:LeadingKeys "tenant#*") still covers.
func TestCounterPKEpoch(t *testing.T) {
	k := sluice.Key{Tenant: "acme", Space: sluice.SpaceInline, Algorithm: sluice.SlidingWindow, Policy: "p", Value: "u"}
	if got, want := counterPK(&k), "acme#c1#2#p#u:u"; got != want {
		t.Errorf("counterPK of epoch 0 = %q, want %q", got, want)
	}
	k.Epoch = 36
	if got, want := counterPK(&k), "acme#e10#c1#2#p#u:u"; got != want {
		t.Errorf("counterPK of epoch 36 = %q, want %q", got, want)
	}
}

// A node's first refresh of a key whose traffic has just begun in its
// region publishes no demand and gives nothing away: its rate is not
// known yet, and publishing 0 would give the units its traffic is about to
// need to a region that asked first.
func TestFirstRefreshGivesNothing(t *testing.T) {
	db := dynamotest.NewClient(dynamotest.Get(t).Endpoint)
	table := dynamotest.TableName(t)
	ctx := dynamotest.Context(t)
	if err := CreateTable(ctx, db, table); err != nil {
		t.Fatal(err)
	}
	regions := []string{"a", "b", "c"}
	open := func(r string) *Store {
		s, err := New(db, Options{Table: table, Region: r, Regions: regions, Rebalance: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	a, b := open("a"), open("b")
	p := &sluice.Policy{Name: "api", Algorithm: sluice.FixedWindow, Limit: 100, Window: time.Second}
	k := sluice.Key{Tenant: "acme", Policy: p.Name, Algorithm: p.Algorithm, Value: "k"}
	pk := counterPK(&k)
	// Region a asks for 150 a window.
	now := time.Now().UnixNano()
	busy := &regionItem{lim: 100, rates: map[string]float64{"n": 150}, seen: map[string]int64{"n": now}, wrote: now,
		total: map[string]int64{}, pend: map[string]int64{}, from: map[string]int64{}}
	if err := a.writeAllotment(ctx, pk, 0, busy); err != nil {
		t.Fatal(err)
	}
	// b's traffic begins.
	dst := []sluice.Decision{{}}
	if err := b.Apply(ctx, time.Now(), []sluice.Op{{Key: k, Policy: p, Hits: 1}}, dst); err != nil || !dst[0].Allowed {
		t.Fatalf("b's first decision: %+v, %v", dst[0], err)
	}
	items, err := b.readAllotments(ctx, pk)
	if err != nil {
		t.Fatal(err)
	}
	it := items["b"]
	if it == nil {
		t.Fatal("b wrote no allotment item")
	}
	if g := it.total["a"] + it.pend["a"]; g != 0 {
		t.Errorf("b gave a %d units at its first refresh, want none", g)
	}
	if r, ok := it.rates[b.node]; ok {
		t.Errorf("b published a demand of %v at its first refresh, want none", r)
	}
}

// A region whose demand has left keeps its even part for the demand's
// return if it came back before, while one that never had demand, or
// whose demand left for the first time, keeps nothing; a region whose
// demand is steady keeps only the tenth of its part it always had, and no
// region's part passes its demand while another's is under its own.
func TestFairPartsKeepForReturningDemand(t *testing.T) {
	s := &Store{region: "a", regions: []string{"a", "b", "c"}, rebalance: time.Second}
	now := int64(time.Hour)
	demand := func(rate, peak float64) *regionItem {
		return &regionItem{rates: map[string]float64{"n": rate}, peaks: map[string]float64{"n": peak}, seen: map[string]int64{"n": now}}
	}
	returning := func(it *regionItem, ago time.Duration) *regionItem {
		it.backs = map[string]int64{"n": now - int64(ago)}
		return it
	}
	for _, c := range []struct {
		name       string
		rate, peak float64 // region a's
		b, c       *regionItem
		want       []float64
	}{
		{"all in a, b and c never busy", 200, 200, demand(0, 0), nil, []float64{100, 0, 0}},
		{"moved once from b to a", 200, 200, demand(0, 200), demand(0, 0), []float64{100, 0, 0}},
		{"moved from b to a, b's demand came back 10s ago", 200, 200, returning(demand(0, 200), 10*time.Second), demand(0, 0), []float64{67, 33, 0}},
		{"moved from b to a, b's demand came back 40s ago", 200, 200, returning(demand(0, 200), 40*time.Second), demand(0, 0), []float64{100, 0, 0}},
		{"moving among all three", 200, 200, returning(demand(0, 200), 5*time.Second), returning(demand(0, 200), 10*time.Second), []float64{34, 33, 33}},
		{"steady 160/30/10", 160, 160, demand(30, 30), demand(10, 10), []float64{75.3, 16.8, 7.8}},
		{"b's demand fell to 10 of 160, back before", 160, 160, returning(demand(10, 160), time.Second), demand(30, 30), []float64{54.2, 33, 12.8}},
		{"demand under the limit: the rest by demand", 20, 20, demand(10, 10), demand(0, 0), []float64{66.7, 33.3, 0}},
	} {
		fair := s.fairParts(map[string]*regionItem{"b": c.b, "c": c.c}, demand(c.rate, c.peak), 100, now)
		for i, w := range c.want {
			if fair == nil || fair[i] < w-0.5 || fair[i] > w+0.5 {
				t.Errorf("%s: fair parts %.1f, want %v", c.name, fair, c.want)
				break
			}
		}
	}
}

// The idle refresh looks at a key whose traffic has just stopped every
// period, so that its units follow the demand, and at one idle for longer
// than recentDemand periods only once a second, for the store's cost: a
// node that decided once on many keys does not read each of them every
// period for ten minutes.
func TestIdleRefreshSlowsForLongIdleKeys(t *testing.T) {
	db := dynamotest.NewClient(dynamotest.Get(t).Endpoint)
	table := dynamotest.TableName(t)
	ctx := dynamotest.Context(t)
	if err := CreateTable(ctx, db, table); err != nil {
		t.Fatal(err)
	}
	const period = 50 * time.Millisecond
	s, err := New(db, Options{Table: table, Region: "a", Regions: []string{"a", "b"}, Rebalance: period})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	p := &sluice.Policy{Name: "api", Algorithm: sluice.FixedWindow, Limit: 100, Window: time.Second}
	k := sluice.Key{Tenant: "acme", Policy: p.Name, Algorithm: p.Algorithm, Value: "k"}
	dst := []sluice.Decision{{}}
	if err := s.Apply(ctx, time.Now(), []sluice.Op{{Key: k, Policy: p, Hits: 1}}, dst); err != nil {
		t.Fatal(err)
	}
	base := k
	base.Region = ""
	s.allots.mu.Lock()
	e := s.allots.m[counterPK(&base)]
	s.allots.mu.Unlock()
	if e == nil {
		t.Fatal("no copy of the key's allotments after a decision")
	}
	// The key was last decided on a minute ago (within the ten minutes the
	// idle refresh looks, past recentDemand periods).
	e.lock <- struct{}{}
	e.decided = time.Now().Add(-time.Minute)
	<-e.lock
	refreshed := func() time.Time {
		e.lock <- struct{}{}
		defer func() { <-e.lock }()
		return e.refreshed
	}
	seen := map[time.Time]bool{}
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(period / 5) {
		seen[refreshed()] = true
	}
	// Once a second over 3 s is 3 or 4 copies (and the one before); every
	// period (50 ms) would be about 60.
	if len(seen) > 6 {
		t.Errorf("the copy of a key idle for a minute was read %d times in 3 s at a period of %v, want about once a second", len(seen)-1, period)
	}
	if len(seen) < 2 {
		t.Errorf("the copy of a key idle for a minute was not read again in 3 s")
	}
}

// A node's demand, measured every period, is steady under the noise of
// Poisson arrivals (each change of more than a tenth is a write of its
// region's item), yet follows a real change at once: a region whose
// demand rises from 5 to 80 a window, or stops, publishes it at the next
// refresh, not a second later.
func TestNextRate(t *testing.T) {
	const (
		period = 250 * time.Millisecond
		window = time.Second
		span   = time.Second
	)
	rng := rand.New(rand.NewPCG(1, 2))
	poisson := func(mean float64) int64 {
		// Knuth's method: fine for the means here.
		l, k, p := math.Exp(-mean), int64(0), 1.0
		for {
			p *= rng.Float64()
			if p <= l {
				return k
			}
			k++
		}
	}
	for _, perWindow := range []float64{4, 20, 100, 400} {
		rate, published, writes := perWindow, perWindow, 0
		const periods = 400
		for range periods {
			rate = nextRate(rate, poisson(perWindow*float64(period)/float64(window)), period, 0, window, span)
			if moved(published, rate, 100) {
				writes++
				published = rate
			}
		}
		// Averaging a period alone (half the last, half the new, as
		// before) wrote at about every second refresh at 20-100 a window.
		if writes > periods/5 {
			t.Errorf("steady demand of %v a window: %d writes in %d refreshes, want at most a fifth", perWindow, writes, periods)
		}
	}
	if r := nextRate(5, 20, period, 0, window, span); r < 60 {
		t.Errorf("demand rising from 5 to 80 a window: %.1f after one period, want at least 60", r)
	}
	if r := nextRate(100, 0, period, period, window, span); r != 0 {
		t.Errorf("demand of 100 a window stopping: %.1f after one period, want 0", r)
	}
	if r := nextRate(4, 0, period, period, window, span); r <= 0 {
		t.Errorf("demand of 4 a window, one period without a hit: %.1f, want it kept above 0", r)
	}
	if r := nextRate(4, 0, period, span, window, span); r <= 0 {
		t.Errorf("demand of 4 a window, a second without a hit: %.1f, want it kept above 0 (one burst a window leaves that)", r)
	}
	if r := nextRate(4, 0, period, 2*span, window, span); r != 0 {
		t.Errorf("demand of 4 a window, two seconds without a hit: %.1f, want 0", r)
	}
}

// A node's demand that arrives as one burst a window, measured every
// period, does not pass for demand that leaves and comes back (which
// keeps the region's even part from the regions that need it), while
// demand that leaves for a few seconds and returns does.
func TestObserveBurstsAreNotReturns(t *testing.T) {
	const (
		period = 250 * time.Millisecond
		window = time.Second
		span   = time.Second
		recent = 30 * period
	)
	// run feeds e the hits asked in each period of [from, to) by asked.
	run := func(e *allotment, from, to time.Duration, asked func(at time.Duration) int64) {
		base := time.Unix(1e6, 0)
		for at := from; at < to; at += period {
			n := asked(at)
			if n > 0 {
				e.lastAsked = base.Add(at)
			}
			wall := base.Add(at + period)
			e.observe(nextRate(e.rate, n, period, wall.Sub(e.lastAsked), window, span), wall, recent)
		}
	}
	bursts := &allotment{}
	run(bursts, 0, 30*time.Second, func(at time.Duration) int64 {
		if at%window == 0 {
			return 5 // 5 a window, all in its first period
		}
		return 0
	})
	if !bursts.back.IsZero() {
		t.Errorf("demand of 5 a window in one burst was taken for demand that came back (peak %.1f, rate %.1f)", bursts.peak, bursts.rate)
	}
	moved := &allotment{}
	run(moved, 0, 20*time.Second, func(at time.Duration) int64 {
		if at >= 5*time.Second && at < 8*time.Second {
			return 0 // gone to another region for 3 s
		}
		return 25 // 100 a window
	})
	if moved.back.IsZero() {
		t.Errorf("demand of 100 a window gone for 3 s and back was not taken for demand that came back")
	}
}
