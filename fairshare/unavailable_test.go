package fairshare_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/fairshare"
	"github.com/sluicehq/sluice/store/memstore"
)

// sharedNode is one node of an upstream shared through ledger l.
func sharedNode(t *testing.T, cfg fairshare.Config, l fairshare.Ledger) *fairshare.Upstream {
	t.Helper()
	u, err := fairshare.NewUpstream(cfg, fairshare.Options{Ledger: l})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { u.Close() })
	return u
}

// isUnavailable fails the test unless err is ErrUnavailable, of kind
// unavailable: a fault, never a shortage.
func isUnavailable(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, fairshare.ErrUnavailable) || sluice.KindOf(err) != sluice.KindUnavailable || errors.Is(err, fairshare.ErrShortage) {
		t.Fatalf("%s: %v (kind %v), want fairshare.ErrUnavailable", what, err, sluice.KindOf(err))
	}
}

// A node whose store fails serves on the share it holds while it may,
// then refuses with ErrUnavailable (503), not ErrShortage (429): its
// share lapsed for a fault, not for other customers. Requests that were
// waiting are refused as it lapses, not at their maxWait; later ones at
// once; one that waits without limit waits on.
func TestUpstreamStoreDownIsUnavailable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := fairshare.Config{Rate: 10, Window: time.Second, Burst: 1}
		st := memstore.New(memstore.Options{})
		ttl := fairshare.DefaultTTL(cfg.Window)
		l, err := fairshare.NewLimiterLedger(engine.New(st, engine.Options{}), "partner", cfg, sluice.NamedLease|1, ttl)
		if err != nil {
			t.Fatal(err)
		}
		u := sharedNode(t, cfg, l)
		ctx := context.Background()
		synctest.Wait() // the first step claims the share

		// While the store answers, customer a asks 25 units at once (the
		// node releases 10 a second), each within its estimate, then b,
		// new, 10, which go between a's: a's last ones are now due after
		// the node must stop releasing (Share.Stop) unless it renews its
		// claim. Then the store fails (closed: every write answers
		// ErrStoreClosed), before the node's next step.
		type result struct {
			at  time.Duration
			err error
		}
		var (
			mu      sync.Mutex
			results []result
			wg      sync.WaitGroup
		)
		start := time.Now()
		for i := range 35 {
			c := fairshare.Customer("a")
			if i >= 25 {
				c = "b"
			}
			wg.Go(func() {
				_, err := u.Acquire(ctx, c, "", 1, 1, 30*time.Second)
				mu.Lock()
				results = append(results, result{time.Since(start), err})
				mu.Unlock()
			})
			synctest.Wait() // admitted in this order
		}
		st.Close()
		wg.Wait()
		granted, refused := 0, 0
		for _, r := range results {
			switch {
			case r.err == nil:
				granted++
			case r.at == 0:
				t.Errorf("refused at once (%v): it was admitted while the store answered", r.err)
			default:
				refused++
				isUnavailable(t, "a request waiting when the share lapsed", r.err)
				if r.at > ttl {
					t.Errorf("a waiting request was refused %v after the store failed, want within the ledger's TTL %v", r.at, ttl)
				}
			}
		}
		if refused == 0 || granted == 0 {
			t.Fatalf("%d granted, %d refused: want both", granted, refused)
		}

		// Later requests with a maxWait are refused at once; one without
		// waits for the store.
		for _, maxWait := range []time.Duration{time.Millisecond, time.Minute} {
			start := time.Now()
			_, err := u.Acquire(ctx, "c", "", 1, 1, maxWait)
			isUnavailable(t, "a request after the share lapsed", err)
			if d := time.Since(start); d != 0 {
				t.Errorf("refused after %v, want at once", d)
			}
		}
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if _, err := u.Acquire(wctx, "c", "", 1, 1, 0); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("a request without a wait limit: %v, want to wait until its context ends", err)
		}
	})
}

// A node just started has no share until its first step: a request that
// comes before it waits for it, and is granted, not refused for a
// shortage by an estimate of no rate.
func TestUpstreamColdStartWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := fairshare.Config{Rate: 10, Window: time.Second, Burst: 1}
		st := memstore.New(memstore.Options{})
		defer st.Close()
		l, err := fairshare.NewLimiterLedger(engine.New(st, engine.Options{}), "partner", cfg, sluice.NamedLease|1, fairshare.DefaultTTL(cfg.Window))
		if err != nil {
			t.Fatal(err)
		}
		u := sharedNode(t, cfg, &lateLedger{l, 50 * time.Millisecond})
		start := time.Now()
		if _, err := u.Acquire(context.Background(), "a", "", 1, 1, time.Second); err != nil {
			t.Fatalf("a request before the first step: %v, want granted", err)
		}
		if d := time.Since(start); d < 100*time.Millisecond {
			t.Errorf("granted after %v, before the first step's two writes", d)
		}
	})
}

// lateLedger answers each call after a delay, as a store far away.
type lateLedger struct {
	fairshare.Ledger
	delay time.Duration
}

func (l *lateLedger) Publish(ctx context.Context, now time.Time, d fairshare.Demand) (fairshare.Demand, int, error) {
	time.Sleep(l.delay)
	return l.Ledger.Publish(ctx, now, d)
}

func (l *lateLedger) Claim(ctx context.Context, now time.Time, units int64) (bool, int64, error) {
	time.Sleep(l.delay)
	return l.Ledger.Claim(ctx, now, units)
}

// switchLedger is a ledger whose store fails while down is set, as a
// store that cannot be reached, then comes back.
type switchLedger struct {
	fairshare.Ledger
	down atomic.Bool
}

var errUnreachable = &sluice.Error{Kind: sluice.KindUnavailable, Message: "store unreachable"}

func (l *switchLedger) Publish(ctx context.Context, now time.Time, d fairshare.Demand) (fairshare.Demand, int, error) {
	if l.down.Load() {
		return fairshare.Demand{}, 0, errUnreachable
	}
	return l.Ledger.Publish(ctx, now, d)
}

func (l *switchLedger) Claim(ctx context.Context, now time.Time, units int64) (bool, int64, error) {
	if l.down.Load() {
		return false, 0, errUnreachable
	}
	return l.Ledger.Claim(ctx, now, units)
}

// A node that starts while its store cannot be reached refuses for the
// fault (a request that came before its first step, as that step
// fails), and serves again at its first step after the store is back;
// with the store up and the node's share spent, a request is refused
// for a shortage again.
func TestUpstreamStoreBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := fairshare.Config{Rate: 1, Window: time.Hour}
		st := memstore.New(memstore.Options{})
		defer st.Close()
		inner, err := fairshare.NewLimiterLedger(engine.New(st, engine.Options{}), "partner", cfg, sluice.NamedLease|1, fairshare.DefaultTTL(cfg.Window))
		if err != nil {
			t.Fatal(err)
		}
		l := &switchLedger{Ledger: inner}
		l.down.Store(true)
		u := sharedNode(t, cfg, &lateLedger{l, 50 * time.Millisecond})
		ctx := context.Background()
		// Before the node's first step, which fails, and after it.
		for _, when := range []string{"before", "after"} {
			_, err = u.Acquire(ctx, "a", "", 1, 1, time.Second)
			isUnavailable(t, "a request while the store is down, "+when+" the first step", err)
		}

		l.down.Store(false)
		time.Sleep(2 * fairshare.DefaultInterval) // past the next step and its writes
		synctest.Wait()
		if _, err := u.Acquire(ctx, "a", "", 1, 1, time.Second); err != nil {
			t.Fatalf("with the store back: %v", err)
		}
		// The hour's one unit is spent: a shortage, honestly.
		if _, err := u.Acquire(ctx, "a", "", 1, 1, time.Second); !errors.Is(err, fairshare.ErrShortage) {
			t.Fatalf("with the hour's unit spent: %v, want ErrShortage", err)
		}
	})
}
