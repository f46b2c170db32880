package dynamostore

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/store/dynamostore/dynamotest"
	"github.com/sluicehq/sluice/store/storetest"
)

// outcomes counts an engine's decisions by outcome.
type outcomes struct{ n [6]atomic.Int64 }

func (o *outcomes) Decided(_ string, x engine.Outcome) { o.n[x].Add(1) }
func (o *outcomes) StoreDone(time.Duration, error)     {}
func (o *outcomes) get(x engine.Outcome) int64         { return o.n[x].Load() }

// hotKeyRun is one burst of clients on one key over nodes.
type hotKeyRun struct {
	admitted, denied, failOpen, failClosed int64
	decisions, writes, reads               int64
	elapsed                                time.Duration
}

// hotKey starts clients at once over the engines (one per node), each
// asking once for one hit of p on one key, and counts what they were
// answered and what the table was asked, through px.
func hotKey(t testing.TB, px *dynamotest.FaultProxy, engines []*engine.Engine, obs *outcomes, p sluice.Policy, key string, clients int) hotKeyRun {
	t.Helper()
	before := [6]int64{}
	for i := range before {
		before[i] = obs.get(engine.Outcome(i))
	}
	writes, reads := px.Writes(), px.Requests("GetItem")
	start := make(chan struct{})
	var wg sync.WaitGroup
	var other atomic.Value
	for c := range clients {
		e := engines[c%len(engines)]
		wg.Go(func() {
			<-start
			_, err := e.Check(context.Background(), sluice.Request{Tenant: "acme", Hits: 1, Checks: []sluice.Check{{Policy: p, Key: key}}})
			if err != nil {
				other.Store(err)
			}
		})
	}
	t0 := time.Now()
	close(start)
	wg.Wait()
	elapsed := time.Since(t0)
	if err, _ := other.Load().(error); err != nil {
		t.Fatal(err)
	}
	d := func(x engine.Outcome) int64 { return obs.get(x) - before[x] }
	return hotKeyRun{
		admitted: d(engine.Allowed), denied: d(engine.Denied), failOpen: d(engine.FailedOpen), failClosed: d(engine.FailedClosed),
		decisions: int64(clients), writes: px.Writes() - writes, reads: px.Requests("GetItem") - reads, elapsed: elapsed,
	}
}

// hotKeyNodes returns n engines, each on its own store (a node) on one new
// table reached through a fault proxy, and the observer of them all. The
// engines' clock stands still at now, so that no window rolls and no
// bucket refills during a run, and they give a decision the timeout: the
// generous deadline of a test on a shared machine, so that contention, not
// slowness, is what is at stake.
func hotKeyNodes(t testing.TB, n int, now time.Time, timeout time.Duration) (*dynamotest.FaultProxy, []*Store, []*engine.Engine, *outcomes) {
	t.Helper()
	first, px := proxied(t)
	stores := []*Store{first}
	for range n - 1 {
		s, err := New(first.db, Options{Table: first.table})
		if err != nil {
			t.Fatal(err)
		}
		stores = append(stores, s)
	}
	obs := &outcomes{}
	var engines []*engine.Engine
	for _, s := range stores {
		engines = append(engines, engine.New(s, engine.Options{Now: func() time.Time { return now }, Timeout: timeout, Observer: obs}))
	}
	return px, stores, engines, obs
}

// TestHotKeyContentionIsNotAFault: three nodes on one table, 64 clients
// on each, all at once on one key of a policy of 30 (a fixed window a day
// long, three times, and once each other algorithm): exactly 30 admitted,
// and not one decision falls to the fail mode, on a table that answers
// failed conditions with the item and on one that answers them without it
// (as some DynamoDB-compatible servers do). Contention is not a fault:
// each node combines its concurrent decisions on the key into one
// conditional write, so only the nodes contend, and a write lost to
// another node is decided again from the item that won, without counting
// against the attempts allowed for faults. The writes per decision are
// reported.
func TestHotKeyContentionIsNotAFault(t *testing.T) {
	policies := []sluice.Policy{{Name: "fixed", Algorithm: sluice.FixedWindow, Limit: 30, Window: 24 * time.Hour}}
	for _, p := range storetest.Policies(30) {
		if p.Algorithm != sluice.FixedWindow {
			p.Window, p.LeaseTTL = 24*time.Hour, time.Hour
			if p.Algorithm == sluice.Concurrency {
				p.Window = 0
			}
			policies = append(policies, p)
		}
	}
	for _, drop := range []bool{false, true} {
		name := "items returned"
		if drop {
			name = "items dropped"
		}
		t.Run(name, func(t *testing.T) {
			px, stores, engines, obs := hotKeyNodes(t, 3, time.Now(), patience)
			px.DropConditionItems(drop)
			var conflicts int64
			for _, p := range policies {
				rounds := 1
				if p.Name == "fixed" {
					rounds = 3
				}
				for round := range rounds {
					r := hotKey(t, px, engines, obs, p, fmt.Sprint("k", round), 3*64)
					t.Logf("%s, round %d: %d decisions in %v: %d admitted, %d denied, %d failed open, %d failed closed; %d writes (%.3f per decision, %.2f per admitted), %d reads",
						p.Name, round, r.decisions, r.elapsed.Round(time.Millisecond), r.admitted, r.denied, r.failOpen, r.failClosed,
						r.writes, float64(r.writes)/float64(r.decisions), float64(r.writes)/float64(max(r.admitted, 1)), r.reads)
					if r.failOpen != 0 || r.failClosed != 0 {
						t.Errorf("%s, round %d: %d decisions failed open and %d closed on a healthy, contended table", p.Name, round, r.failOpen, r.failClosed)
					}
					if r.admitted != 30 {
						t.Errorf("%s, round %d: admitted %d at a limit of 30", p.Name, round, r.admitted)
					}
				}
			}
			for _, s := range stores {
				st := s.Stats()
				conflicts += st.Conflicts
				if st.GaveUp != 0 {
					t.Errorf("a store gave up %d decisions", st.GaveUp)
				}
				waitIdle(t, s)
			}
			if conflicts == 0 {
				t.Error("no write lost to another node's: the nodes did not contend")
			}
			if drop && px.Dropped() == 0 {
				t.Error("no item dropped: the test tested nothing")
			}
		})
	}
}

// patience bounds a decision in these tests: generous, since the machines
// that run them are shared, yet bounded, so that a hang fails.
const patience = 30 * time.Second

// BenchmarkHotKey measures one hot key across three nodes (three stores on
// one table, each behind its own engine): 64 clients a node ask for one
// hit each, over and over, of a fixed window that admits them all, with a
// decision's deadline of 50ms (the configuration's default) and of 1s (to
// tell contention from a starved machine). It reports the decisions a
// second across the nodes, the table's requests per decision (writes and
// reads), the mean batch a node decided in one write, and the decisions
// that fell to the fail mode (their share, and their count). See
// docs/benchmarks.md.
func BenchmarkHotKey(b *testing.B) {
	for _, deadline := range []time.Duration{50 * time.Millisecond, time.Second} {
		b.Run(fmt.Sprint("deadline=", deadline), func(b *testing.B) { benchmarkHotKey(b, deadline) })
	}
}

func benchmarkHotKey(b *testing.B, deadline time.Duration) {
	first := newStore(b)
	var stores []*Store
	var engines []*engine.Engine
	obs := &outcomes{}
	for n := range 3 {
		s := first
		if n > 0 {
			var err error
			if s, err = New(first.db, Options{Table: first.table}); err != nil {
				b.Fatal(err)
			}
		}
		stores = append(stores, s)
		engines = append(engines, engine.New(s, engine.Options{Timeout: deadline, Observer: obs}))
	}
	p := sluice.Policy{Name: "hot", Algorithm: sluice.FixedWindow, Limit: sluice.MaxLimit, Window: 24 * time.Hour}
	req := sluice.Request{Tenant: "acme", Hits: 1, Checks: []sluice.Check{{Policy: p, Key: "k"}}}
	// Warm: the key exists and every node remembers it.
	for _, e := range engines {
		if _, err := e.Check(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
	var before []StatsSnapshot
	for _, s := range stores {
		before = append(before, s.Stats())
	}
	failedBefore := obs.get(engine.FailedOpen) + obs.get(engine.FailedClosed)
	var client atomic.Int64
	b.SetParallelism(3 * 64 / runtime.GOMAXPROCS(0))
	start := time.Now()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		e := engines[client.Add(1)%int64(len(engines))]
		for pb.Next() {
			if _, err := e.Check(context.Background(), req); err != nil {
				b.Error(err)
				return
			}
		}
	})
	elapsed := time.Since(start)
	b.StopTimer()
	var writes, reads, batched, batches int64
	for i, s := range stores {
		st := s.Stats()
		writes += st.WriteAttempts - before[i].WriteAttempts
		reads += st.Reads - before[i].Reads
		batched += st.Batched - before[i].Batched
		batches += st.Batches - before[i].Batches
	}
	failed := obs.get(engine.FailedOpen) + obs.get(engine.FailedClosed) - failedBefore
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
	b.ReportMetric(float64(writes)/float64(b.N), "writes/op")
	b.ReportMetric(float64(reads)/float64(b.N), "reads/op")
	b.ReportMetric(float64(failed)/float64(b.N), "failmode/op")
	b.ReportMetric(float64(failed), "failmode")
	if batches > 0 {
		b.ReportMetric(float64(batched)/float64(batches), "batch")
	}
}
