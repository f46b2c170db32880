package dynamostore

import (
	"context"
	"errors"
	"math/big"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/store/dynamostore/dynamotest"
)

// slidingFixture is k stores on one new table, all reaching it through
// one counting proxy, a client of the table that bypasses the proxy (for
// the test's own reads), and a leased sliding window of a minute.
type slidingFixture struct {
	nodes []*Store
	px    *dynamotest.FaultProxy
	db    API
	table string
	p     sluice.Policy
	key   sluice.Key
	start time.Time
}

func newSlidingFixture(t *testing.T, k int, limit int64) *slidingFixture {
	t.Helper()
	first, px := proxied(t)
	f := &slidingFixture{
		nodes: []*Store{first}, px: px, db: dynamotest.Client(t), table: first.table,
		p:     sluice.Policy{Name: "msgs", Algorithm: sluice.SlidingWindow, Limit: limit, Window: time.Minute, Leased: true},
		start: time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC),
	}
	if err := f.p.Validate(); err != nil {
		t.Fatal(err)
	}
	f.key = sluice.Key{Tenant: "acme", Policy: f.p.Name, Value: "k"}
	f.nodes = append(f.nodes, moreNodes(t, first, k-1)...)
	return f
}

// moreNodes returns n more stores on first's table, through its client.
func moreNodes(t *testing.T, first *Store, n int) []*Store {
	t.Helper()
	var nodes []*Store
	for range n {
		s, err := New(first.db, Options{Table: first.table})
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, s)
	}
	return nodes
}

// apply decides one hit on node i (modulo the nodes) at now.
func (f *slidingFixture) apply(ctx context.Context, i int, now time.Time) (sluice.Decision, error) {
	dst := make([]sluice.Decision, 1)
	err := f.nodes[i%len(f.nodes)].Apply(ctx, now, []sluice.Op{{Key: f.key, Policy: &f.p, Hits: 1}}, dst)
	return dst[0], err
}

// must is apply that fails the test on an error.
func (f *slidingFixture) must(t *testing.T, i int, now time.Time) sluice.Decision {
	t.Helper()
	d, err := f.apply(context.Background(), i, now)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// lease is node i's batch of the key.
func (f *slidingFixture) lease(i int) *lease { return f.nodes[i].leases.m[counterPK(&f.key)] }

// slidingEstimate is the sliding window's estimate at t of a window of w
// with curr hits in the aligned window at start and prev in the one
// before: curr + floor(prev·(start+w−t)/w), as algo.SlidingWindow counts.
func slidingEstimate(start, w, curr, prev, t int64) int64 {
	q := new(big.Int).Mul(big.NewInt(prev), big.NewInt(min(start+w-t, w)))
	return curr + q.Quo(q, big.NewInt(w)).Int64()
}

// tableEstimate reads the key's item, past the proxy, and returns the
// sliding window's estimate of it at t.
func (f *slidingFixture) tableEstimate(t *testing.T, at int64) int64 {
	t.Helper()
	s := &Store{db: f.db, table: f.table}
	w := int64(f.p.Window)
	v, err := s.read(context.Background(), counterPK(&f.key))
	if err != nil {
		t.Fatal(err)
	}
	st := v.state
	if st.Algorithm != sluice.SlidingWindow {
		return 0
	}
	start := at - ((at%w)+w)%w
	switch {
	case st.Start == start:
		return slidingEstimate(start, w, st.Count, st.Prev, at)
	case st.Start == start-w:
		return slidingEstimate(start, w, 0, st.Count, at)
	}
	return 0
}

// admittedLog counts admitted hits by aligned window and checks, at each
// admission, the sliding estimate of what was admitted (by the admitted
// timestamps) against the limit.
type admittedLog struct {
	w, limit int64
	by       map[int64]int64 // aligned window start -> hits admitted in it
}

func (a *admittedLog) admit(t *testing.T, at, hits int64) {
	t.Helper()
	start := at - ((at%a.w)+a.w)%a.w
	a.by[start] += hits
	if est := slidingEstimate(start, a.w, a.by[start], a.by[start-a.w], at); est > a.limit {
		t.Fatalf("at %v: the admitted hits' sliding estimate is %d, over the limit %d", time.Unix(0, at).UTC(), est, a.limit)
	}
}

// TestLeasedSlidingWindowSaturated: three nodes admit from leased batches
// of a sliding window under demand three times its limit, for three
// windows. The table's estimate never passes the limit (it is checked
// after every write, where it peaks), the admitted hits' own sliding
// estimate never does either, every window admits at least
// Limit·(1−K/MaxLeaseShare), and the requests are a small fraction of the
// decisions: at its limit, a key costs at most a refill a LeasePeriod per
// node. The same again through a proxy that drops the item from every
// failed condition, as some DynamoDB-compatible servers do: each loss is
// then read.
//
// A window of a second (3,000 a second, three windows) admits at least
// Limit·(1−(K+1)/MaxLeaseShare): what it frees while the nodes wait to ask
// again (a fiftieth of the window) may go untaken too.
func TestLeasedSlidingWindowSaturated(t *testing.T) {
	t.Run("items returned", func(t *testing.T) { saturated(t, time.Minute, false) })
	t.Run("items dropped", func(t *testing.T) { saturated(t, time.Minute, true) })
	t.Run("a window of a second", func(t *testing.T) { saturated(t, time.Second, false) })
}

func saturated(t *testing.T, window time.Duration, drop bool) {
	const k = 3
	f := newSlidingFixture(t, k, 3000)
	f.p.Window = window
	f.px.DropConditionItems(drop)
	w := int64(f.p.Window)
	log := admittedLog{w: w, limit: f.p.Limit, by: map[int64]int64{}}
	// Three times the limit's rate, over the nodes, for three windows.
	step := window / time.Duration(3*f.p.Limit)
	decisions := 9 * int(f.p.Limit)
	writes := f.px.Writes()
	before := f.px.Total()
	for i := range decisions {
		now := f.start.Add(time.Duration(i) * step)
		if f.must(t, i, now).Allowed {
			log.admit(t, now.UnixNano(), 1)
		}
		if n := f.px.Writes(); n != writes {
			writes = n
			if est := f.tableEstimate(t, now.UnixNano()); est > f.p.Limit {
				t.Fatalf("decision %d: the table's estimate is %d, over the limit %d", i, est, f.p.Limit)
			}
		}
	}
	floor := f.p.Limit - k*(f.p.Limit/MaxLeaseShare)
	if window < MaxLeaseShare*LeasePeriod {
		floor -= f.p.Limit / MaxLeaseShare
	}
	for win := f.start.UnixNano(); win < f.start.Add(3*window).UnixNano(); win += w {
		if got := log.by[win]; got < floor {
			t.Errorf("window at %v admitted %d, want at least %d (Limit less the shortfall bound)", time.Unix(0, win).UTC(), got, floor)
		}
	}
	reqs := f.px.Total() - before
	per := float64(reqs) / float64(decisions)
	t.Logf("admitted by window %v; %d requests for %d decisions (%.4f each; %d items dropped)", log.by, reqs, decisions, per, f.px.Dropped())
	if per > 0.1 {
		t.Errorf("%.3f requests per decision under saturating demand, want at most 0.1", per)
	}
}

// TestLeasedSlidingWindowRequests: the store requests of a leased sliding
// window on three nodes, one decision at a time round the nodes: at a low
// rate (one a second over all three, so every decision is a batch of
// one, and each node's last sight of the item is two writes old) at most
// 1.1 per decision; at a high rate far fewer.
func TestLeasedSlidingWindowRequests(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rate  int // decisions a second over the nodes
		n     int
		limit int64
		most  float64
	}{
		{"low", 1, 120, 1000, 1.1},
		{"high", 3000, 15000, 1_000_000, 0.01},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newSlidingFixture(t, 3, tc.limit)
			before := f.px.Total()
			for i := range tc.n {
				if d := f.must(t, i, f.start.Add(time.Duration(i)*time.Second/time.Duration(tc.rate))); !d.Allowed {
					t.Fatalf("decision %d denied under the limit: %+v", i, d)
				}
			}
			reqs := f.px.Total() - before
			per := float64(reqs) / float64(tc.n)
			t.Logf("%d requests for %d decisions at %d/s: %.4f each (PutItem %d, UpdateItem %d, GetItem %d)",
				reqs, tc.n, tc.rate, per, f.px.Requests("PutItem"), f.px.Requests("UpdateItem"), f.px.Requests("GetItem"))
			if per > tc.most {
				t.Fatalf("%.3f requests per decision, want at most %v", per, tc.most)
			}
		})
	}
}

// TestLeasedSlidingWindowSlowStore: a store whose refill times out fails
// the decision (KindUnavailable, for the policy's fail mode to answer)
// and never admits past the batch it holds; the table counts every hit
// admitted.
func TestLeasedSlidingWindowSlowStore(t *testing.T) {
	f := newSlidingFixture(t, 1, 10_000)
	at := func(i int) time.Time { return f.start.Add(time.Duration(i) * time.Millisecond) }
	admitted := 0
	// 100 a second for a while: the node's batches grow to its rate.
	i := 0
	for ; i < 300; i += 10 {
		if d := f.must(t, 0, at(i)); !d.Allowed {
			t.Fatalf("%d: %+v", i, d)
		}
		admitted++
	}
	held := f.lease(0).left
	if held < 2 {
		t.Fatalf("the node holds %d hits of its batch; want a batch of its rate", held)
	}
	// The store turns slow: every request now takes longer than a
	// decision's deadline.
	f.px.SetLatency(5 * time.Second)
	failed := 0
	for range held + 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		d, err := f.apply(ctx, 0, at(i))
		cancel()
		i += 10
		switch {
		case err != nil:
			var e *sluice.Error
			if !errors.As(err, &e) || e.Kind != sluice.KindUnavailable {
				t.Fatalf("a refill that timed out: %v, want KindUnavailable", err)
			}
			failed++
		case d.Allowed:
			admitted++
		default:
			t.Fatalf("a slow store reported as a limit: %+v", d)
		}
	}
	f.px.SetLatency(0)
	if failed != 3 {
		t.Fatalf("%d decisions failed past a batch of %d, want 3", failed, held)
	}
	if est := f.tableEstimate(t, at(i).UnixNano()); est < int64(admitted) {
		t.Fatalf("admitted %d, the table counts %d: admitted past what was taken", admitted, est)
	}
}

// TestLeasedSlidingWindowHostile: a tenant sending far past its limit
// raises its batches no further than MaxLeaseShare of its own limit.
func TestLeasedSlidingWindowHostile(t *testing.T) {
	f := newSlidingFixture(t, 1, 1000)
	most := int64(0)
	for i := range 2000 { // 100,000 a second
		if d := f.must(t, 0, f.start.Add(time.Duration(i)*10*time.Microsecond)); d.Allowed {
			most = max(most, f.lease(0).left+1)
		}
	}
	if most > f.p.Limit/MaxLeaseShare {
		t.Fatalf("a batch of %d, want at most %d", most, f.p.Limit/MaxLeaseShare)
	}
}

// TestLeasedSlidingWindowRetryAfter: a denial of a leased sliding window
// says when the request's own hits would be admitted, as the algorithm
// does from the table's state, not when a whole batch would; and a denial
// while the node waits to ask the table again is never earlier than that.
func TestLeasedSlidingWindowRetryAfter(t *testing.T) {
	f := newSlidingFixture(t, 1, 500)
	// 500 a second: batches of 10 (2% of the limit), the window full in
	// a second, then a second more of denials.
	denials := 0
	for i := range 1000 {
		now := f.start.Add(time.Duration(i) * 2 * time.Millisecond)
		d := f.must(t, 0, now)
		if d.Allowed {
			continue
		}
		v, err := f.nodes[0].read(context.Background(), counterPK(&f.key))
		if err != nil {
			t.Fatal(err)
		}
		_, want := algo.SlidingWindow(&f.p, v.state, now.UnixNano(), 1)
		if want.Allowed || d.RetryAfter < want.RetryAfter || denials == 0 && d.RetryAfter != want.RetryAfter {
			t.Fatalf("denial %d, at %d: Retry-After %v, the algorithm says %v for one hit (allowed %v)", denials, i, d.RetryAfter, want.RetryAfter, want.Allowed)
		}
		denials++
	}
	if denials < 400 {
		t.Fatalf("%d denials of 1000 at a limit of 500", denials)
	}
}
