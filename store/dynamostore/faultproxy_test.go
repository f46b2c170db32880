package dynamostore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/dynamostore/dynamotest"
	"github.com/sluicehq/sluice/store/storetest"
)

// proxied returns a fault proxy to the package's emulator, and a new
// table's store that reaches the table through it.
func proxied(t testing.TB) (*Store, *dynamotest.FaultProxy) {
	t.Helper()
	px := dynamotest.NewFaultProxy(t, dynamotest.Get(t).Endpoint)
	db := dynamotest.NewClient(px.Endpoint)
	table := dynamotest.TableName(t)
	if err := CreateTable(dynamotest.Context(t), db, table); err != nil {
		t.Fatal(err)
	}
	s, err := New(db, Options{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	return s, px
}

// TestConformanceDroppedItems runs every conformance suite again through a
// proxy that drops the item from every failed single-item condition, as
// some DynamoDB-compatible servers do, with a one-key cache so that nearly
// every write starts stale and fails its condition first.
func TestConformanceDroppedItems(t *testing.T) {
	drop := func(t *testing.T) *Store {
		s, px := proxied(t)
		px.DropConditionItems(true)
		return s
	}
	t.Run("Store", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) sluice.Store {
			s := drop(t)
			s.cache = newCache(1)
			return s
		})
	})
	t.Run("Tenants", func(t *testing.T) {
		storetest.RunTenants(t, func(t *testing.T) sluice.TenantStore { return drop(t) })
	})
	t.Run("Sessions", func(t *testing.T) {
		storetest.RunSessions(t, func(t *testing.T) sluice.SessionStore { return drop(t) })
	})
	t.Run("Registry", func(t *testing.T) {
		storetest.RunRegistry(t, func(t *testing.T) sluice.Registry { return drop(t) })
	})
}

// TestConformanceInjectedFaults runs the store suite through a proxy that
// drops items from failed conditions and answers 3% of the writes with a
// throttle or a transaction conflict: the store retries them within its
// attempts and every answer is still exact. The suite treats any error as
// a failure, so the attempts are raised from 4 to 8 here: with 4, a few
// decisions in the suite's thousands meet enough faults in a row to fail
// unavailable, as they should (TestRetriesAreTheStores).
func TestConformanceInjectedFaults(t *testing.T) {
	storetest.Run(t, func(t *testing.T) sluice.Store {
		s, px := proxied(t)
		s.max = 8
		px.DropConditionItems(true)
		px.SetFaultRate(0.03)
		return s
	})
}

// TestFailedWriteWithoutItem: node a remembers a key, node b writes it,
// and a's next write fails its condition with no item returned. a reads the
// key once and decides from it: the key is not taken for absent, which
// would condition every later write on attribute_not_exists and wedge it.
func TestFailedWriteWithoutItem(t *testing.T) {
	for _, p := range storetest.Policies(10) {
		if p.Algorithm == sluice.Concurrency {
			p.LeaseTTL = time.Hour
		}
		t.Run(p.Name, func(t *testing.T) {
			a, px := proxied(t)
			px.DropConditionItems(true)
			b, err := New(a.db, Options{Table: a.table})
			if err != nil {
				t.Fatal(err)
			}
			k := sluice.Key{Tenant: "acme", Policy: p.Name, Value: "k"}
			now := time.Now()
			dst := make([]sluice.Decision, 1)
			for i, s := range []*Store{a, b, a, b, a} {
				before := px.Writes()
				if err := s.Apply(context.Background(), now, []sluice.Op{{Key: k, Policy: &p, Hits: 1}}, dst); err != nil {
					t.Fatalf("decision %d: %v", i, err)
				}
				if !dst[0].Allowed || dst[0].Remaining != int64(9-i) {
					t.Fatalf("decision %d: %+v, want allowed with %d remaining", i, dst[0], 9-i)
				}
				if n := px.Writes() - before; n > 2 {
					t.Fatalf("decision %d: %d write attempts", i, n)
				}
			}
			if px.Dropped() == 0 {
				t.Fatal("no item dropped: the test tested nothing")
			}
		})
	}
}

// TestTouchSessionWithoutItem: a touch that fails its condition because
// the session already lasts longer, answered without the item, reads the
// session rather than reporting a live session gone.
func TestTouchSessionWithoutItem(t *testing.T) {
	s, px := proxied(t)
	px.DropConditionItems(true)
	ctx := context.Background()
	t0 := time.Now()
	x := sluice.Session{Tenant: "acme", ID: "s1", CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}
	if err := s.CreateSession(ctx, x); err != nil {
		t.Fatal(err)
	}
	got, err := s.TouchSession(ctx, t0, "acme", "s1", t0.Add(time.Minute))
	if err != nil || !got.ExpiresAt.Equal(x.ExpiresAt.UTC().Truncate(0)) && got.ExpiresAt.UnixNano() != x.ExpiresAt.UnixNano() {
		t.Fatalf("touch of a live session: %+v, %v", got, err)
	}
	if px.Dropped() == 0 {
		t.Fatal("no item dropped: the test tested nothing")
	}
}

// TestRetriesAreTheStores: throttles and transaction conflicts are retried
// by the store, with backoff, the SDK sending each write once: a write that
// fails MaxAttempts-1 times succeeds on its last attempt, and one that fails
// MaxAttempts times fails the decision, unavailable, after exactly
// MaxAttempts requests (the SDK's own retries would make 3 requests of
// each, and would not retry a TransactionConflictException at all).
func TestRetriesAreTheStores(t *testing.T) {
	single := sluice.Policy{Name: "fw", Algorithm: sluice.FixedWindow, Limit: 100, Window: time.Hour}
	bucket := sluice.Policy{Name: "tb", Algorithm: sluice.TokenBucket, Limit: 100, Window: time.Hour}
	for _, tc := range []struct {
		kind string
		ops  func(v string) []sluice.Op
	}{
		{"ThrottlingException", nil},
		{"ProvisionedThroughputExceededException", nil},
		{"TransactionConflictException", nil},
		{"TransactionCanceledException", nil},
	} {
		for _, shape := range []string{"put", "gcra", "transaction"} {
			if tc.kind == "TransactionCanceledException" && shape != "transaction" {
				continue
			}
			t.Run(tc.kind+"/"+shape, func(t *testing.T) {
				s, px := proxied(t)
				n := 0
				ops := func() []sluice.Op {
					n++
					v := fmt.Sprint(n)
					switch shape {
					case "put":
						return []sluice.Op{{Key: sluice.Key{Tenant: "acme", Policy: "fw", Value: v}, Policy: &single, Hits: 1}}
					case "gcra":
						return []sluice.Op{{Key: sluice.Key{Tenant: "acme", Policy: "tb", Value: v}, Policy: &bucket, Hits: 1}}
					}
					return []sluice.Op{
						{Key: sluice.Key{Tenant: "acme", Policy: "fw", Value: v}, Policy: &single, Hits: 1},
						{Key: sluice.Key{Tenant: "acme", Policy: "tb", Value: v}, Policy: &bucket, Hits: 1},
					}
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()

				const max = 4 // Options.MaxAttempts's default
				px.FailNext(max-1, tc.kind)
				before := px.Writes()
				o := ops()
				dst := make([]sluice.Decision, len(o))
				if err := s.Apply(ctx, time.Now(), o, dst); err != nil || !dst[0].Allowed {
					t.Fatalf("after %d faults: %+v, %v", max-1, dst, err)
				}
				if got := px.Writes() - before; got != int64(max) {
					t.Fatalf("%d write requests, want %d", got, max)
				}

				px.FailNext(max, tc.kind)
				before = px.Writes()
				o = ops()
				err := s.Apply(ctx, time.Now(), o, dst)
				if sluice.KindOf(err) != sluice.KindUnavailable {
					t.Fatalf("after %d faults: %+v, %v; want unavailable", max, dst, err)
				}
				if got := px.Writes() - before; got != int64(max) {
					t.Fatalf("%d write requests, want %d", got, max)
				}
			})
		}
	}
}

// TestTurnWaitEndsAtDeadline: a decision waiting behind this node's
// other decision on the same key, which is itself waiting on a slow table,
// gives up at its own deadline, unavailable, while the other is still in
// flight: the key's turn is waited for with the context.
func TestTurnWaitEndsAtDeadline(t *testing.T) {
	s, px := proxied(t)
	p := sluice.Policy{Name: "fw", Algorithm: sluice.FixedWindow, Limit: 100, Window: time.Hour}
	ops := []sluice.Op{{Key: sluice.Key{Tenant: "acme", Policy: "fw", Value: "k"}, Policy: &p, Hits: 1}}
	now := time.Now()
	px.SetLatency(3 * time.Second)
	slowDone := make(chan error, 1)
	go func() {
		slowDone <- s.Apply(context.Background(), now, ops, make([]sluice.Decision, 1))
	}()
	// Wait until the slow decision's write is at the proxy: it holds the
	// key's turn.
	for px.Writes() == 0 {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := s.Apply(ctx, now, ops, make([]sluice.Decision, 1))
	select {
	case <-slowDone:
		t.Fatalf("the waiting decision returned (%v) only after the slow one", err)
	default:
	}
	if sluice.KindOf(err) != sluice.KindUnavailable {
		t.Fatalf("waiting decision: %v, want unavailable", err)
	}
	if err := <-slowDone; err != nil {
		t.Fatal(err)
	}
}
