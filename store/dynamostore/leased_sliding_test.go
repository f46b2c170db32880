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

// slidingNodes returns k stores on one new table, all reaching it through
// one counting proxy, and a client of the table that bypasses the proxy
// (for the test's own reads).
func slidingNodes(t *testing.T, k int) ([]*Store, *dynamotest.FaultProxy, API, string) {
	t.Helper()
	first, px := proxied(t)
	nodes := []*Store{first}
	for range k - 1 {
		s, err := New(first.db, Options{Table: first.table})
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, s)
	}
	return nodes, px, dynamotest.Client(t), first.table
}

// slidingEstimate is the sliding window's estimate at t of a window of w
// with curr hits in the aligned window at start and prev in the one
// before: curr + floor(prev·(start+w−t)/w), as algo.SlidingWindow counts.
func slidingEstimate(start, w, curr, prev, t int64) int64 {
	q := new(big.Int).Mul(big.NewInt(prev), big.NewInt(min(start+w-t, w)))
	return curr + q.Quo(q, big.NewInt(w)).Int64()
}

// tableEstimate reads the key's item, past the proxy, and returns the
// sliding window's estimate of it at t.
func tableEstimate(t *testing.T, db API, table string, k *sluice.Key, w, at int64) int64 {
	t.Helper()
	s := &Store{db: db, table: table}
	v, err := s.read(context.Background(), counterPK(k))
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
// Limit·(1−K/MaxLeaseShare), and the writes are a small fraction of the
// decisions.
func TestLeasedSlidingWindowSaturated(t *testing.T) {
	const k = 3
	nodes, px, db, table := slidingNodes(t, k)
	p := sluice.Policy{Name: "msgs", Algorithm: sluice.SlidingWindow, Limit: 3000, Window: time.Minute, Leased: true}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	key := sluice.Key{Tenant: "acme", Policy: p.Name, Value: "k"}
	w := int64(p.Window)
	start := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	log := admittedLog{w: w, limit: p.Limit, by: map[int64]int64{}}
	dst := make([]sluice.Decision, 1)
	const rate = 150 // decisions a second, over the nodes: 3x the limit's 50/s
	decisions := 3 * 60 * rate
	writes := px.Writes()
	before := px.Total()
	for i := range decisions {
		now := start.Add(time.Duration(i) * time.Second / rate)
		if err := nodes[i%k].Apply(context.Background(), now, []sluice.Op{{Key: key, Policy: &p, Hits: 1}}, dst); err != nil {
			t.Fatal(err)
		}
		if dst[0].Allowed {
			log.admit(t, now.UnixNano(), 1)
		}
		if n := px.Writes(); n != writes {
			writes = n
			if est := tableEstimate(t, db, table, &key, w, now.UnixNano()); est > p.Limit {
				t.Fatalf("decision %d: the table's estimate is %d, over the limit %d", i, est, p.Limit)
			}
		}
	}
	floor := p.Limit - k*(p.Limit/MaxLeaseShare)
	for win := start.UnixNano(); win < start.Add(3*time.Minute).UnixNano(); win += w {
		if got := log.by[win]; got < floor {
			t.Errorf("window at %v admitted %d, want at least %d (Limit less one batch per node)", time.Unix(0, win).UTC(), got, floor)
		}
	}
	reqs := px.Total() - before
	per := float64(reqs) / float64(decisions)
	t.Logf("admitted by window %v; %d requests for %d decisions (%.4f each)", log.by, reqs, decisions, per)
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
			nodes, px, _, _ := slidingNodes(t, 3)
			p := sluice.Policy{Name: "msgs", Algorithm: sluice.SlidingWindow, Limit: tc.limit, Window: time.Minute, Leased: true}
			key := sluice.Key{Tenant: "acme", Policy: p.Name, Value: "k"}
			start := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
			dst := make([]sluice.Decision, 1)
			before := px.Total()
			for i := range tc.n {
				now := start.Add(time.Duration(i) * time.Second / time.Duration(tc.rate))
				if err := nodes[i%3].Apply(context.Background(), now, []sluice.Op{{Key: key, Policy: &p, Hits: 1}}, dst); err != nil {
					t.Fatal(err)
				}
				if !dst[0].Allowed {
					t.Fatalf("decision %d denied under the limit: %+v", i, dst[0])
				}
			}
			reqs := px.Total() - before
			per := float64(reqs) / float64(tc.n)
			t.Logf("%d requests for %d decisions at %d/s: %.4f each (PutItem %d, UpdateItem %d, GetItem %d)",
				reqs, tc.n, tc.rate, per, px.Requests("PutItem"), px.Requests("UpdateItem"), px.Requests("GetItem"))
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
	nodes, px, db, table := slidingNodes(t, 1)
	s := nodes[0]
	p := sluice.Policy{Name: "msgs", Algorithm: sluice.SlidingWindow, Limit: 10_000, Window: time.Minute, Leased: true}
	key := sluice.Key{Tenant: "acme", Policy: p.Name, Value: "k"}
	start := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	dst := make([]sluice.Decision, 1)
	at := func(i int) time.Time { return start.Add(time.Duration(i) * time.Millisecond) }
	admitted := 0
	// 100 a second for a while: the node's batches grow to its rate.
	i := 0
	for ; i < 300; i += 10 {
		if err := s.Apply(context.Background(), at(i), []sluice.Op{{Key: key, Policy: &p, Hits: 1}}, dst); err != nil || !dst[0].Allowed {
			t.Fatalf("%d: %+v %v", i, dst[0], err)
		}
		admitted++
	}
	held := s.leases.m[counterPK(&key)].left
	if held < 2 {
		t.Fatalf("the node holds %d hits of its batch; want a batch of its rate", held)
	}
	// The store turns slow: every request now takes longer than a
	// decision's deadline.
	px.SetLatency(5 * time.Second)
	failed := 0
	for range held + 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		err := s.Apply(ctx, at(i), []sluice.Op{{Key: key, Policy: &p, Hits: 1}}, dst)
		cancel()
		i += 10
		switch {
		case err != nil:
			var e *sluice.Error
			if !errors.As(err, &e) || e.Kind != sluice.KindUnavailable {
				t.Fatalf("a refill that timed out: %v, want KindUnavailable", err)
			}
			failed++
		case dst[0].Allowed:
			admitted++
		default:
			t.Fatalf("a slow store reported as a limit: %+v", dst[0])
		}
	}
	px.SetLatency(0)
	if failed != 3 {
		t.Fatalf("%d decisions failed past a batch of %d, want 3", failed, held)
	}
	if est := tableEstimate(t, db, table, &key, int64(p.Window), at(i).UnixNano()); est < int64(admitted) {
		t.Fatalf("admitted %d, the table counts %d: admitted past what was taken", admitted, est)
	}
}

// TestLeasedSlidingWindowHostile: a tenant sending far past its limit
// raises its batches no further than MaxLeaseShare of its own limit.
func TestLeasedSlidingWindowHostile(t *testing.T) {
	nodes, _, _, _ := slidingNodes(t, 1)
	s := nodes[0]
	p := sluice.Policy{Name: "msgs", Algorithm: sluice.SlidingWindow, Limit: 1000, Window: time.Minute, Leased: true}
	key := sluice.Key{Tenant: "acme", Policy: p.Name, Value: "k"}
	start := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	dst := make([]sluice.Decision, 1)
	most := int64(0)
	for i := range 2000 { // 100,000 a second
		now := start.Add(time.Duration(i) * 10 * time.Microsecond)
		if err := s.Apply(context.Background(), now, []sluice.Op{{Key: key, Policy: &p, Hits: 1}}, dst); err != nil {
			t.Fatal(err)
		}
		if e := s.leases.m[counterPK(&key)]; e.left+1 > most && dst[0].Allowed {
			most = e.left + 1
		}
	}
	if most > p.Limit/MaxLeaseShare {
		t.Fatalf("a batch of %d, want at most %d", most, p.Limit/MaxLeaseShare)
	}
}

// TestLeasedSlidingWindowRetryAfter: a denial of a leased sliding window
// says when the request's own hits would be admitted, as the algorithm
// does from the table's state, not when a whole batch would; and a denial
// while the node waits to ask the table again is never earlier than that.
func TestLeasedSlidingWindowRetryAfter(t *testing.T) {
	nodes, _, _, _ := slidingNodes(t, 1)
	s := nodes[0]
	p := sluice.Policy{Name: "msgs", Algorithm: sluice.SlidingWindow, Limit: 500, Window: time.Minute, Leased: true}
	key := sluice.Key{Tenant: "acme", Policy: p.Name, Value: "k"}
	start := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	dst := make([]sluice.Decision, 1)
	// 500 a second: batches of 10 (2% of the limit), the window full in
	// a second, then a second more of denials.
	denials := 0
	for i := range 1000 {
		now := start.Add(time.Duration(i) * 2 * time.Millisecond)
		if err := s.Apply(context.Background(), now, []sluice.Op{{Key: key, Policy: &p, Hits: 1}}, dst); err != nil {
			t.Fatal(err)
		}
		if dst[0].Allowed {
			continue
		}
		v, err := s.read(context.Background(), counterPK(&key))
		if err != nil {
			t.Fatal(err)
		}
		_, want := algo.SlidingWindow(&p, v.state, now.UnixNano(), 1)
		if want.Allowed || dst[0].RetryAfter < want.RetryAfter || denials == 0 && dst[0].RetryAfter != want.RetryAfter {
			t.Fatalf("denial %d, at %d: Retry-After %v, the algorithm says %v for one hit (allowed %v)", denials, i, dst[0].RetryAfter, want.RetryAfter, want.Allowed)
		}
		denials++
	}
	if denials < 400 {
		t.Fatalf("%d denials of 1000 at a limit of 500", denials)
	}
}
