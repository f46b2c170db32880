package fairshare

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

func newUpstream(t *testing.T, c Config) *Upstream {
	t.Helper()
	u, err := NewUpstream(c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { u.Close() })
	return u
}

// Many goroutines acquire at once; every one is served, at the rate, and
// weights 2:1 get 2:1 of the first half.
func TestFairUpstreamConcurrent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		u := newUpstream(t, Config{Rate: 100, Burst: 1})
		start := time.Now()
		var (
			wg    sync.WaitGroup
			mu    sync.Mutex
			order []Customer
		)
		for _, c := range []Customer{"a", "b"} {
			weight := int64(1)
			if c == "a" {
				weight = 2
			}
			for range 100 {
				wg.Go(func() {
					if _, err := u.Acquire(context.Background(), c, "", weight, 1, 0); err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					order = append(order, c)
					mu.Unlock()
				})
			}
		}
		wg.Wait()
		if el := time.Since(start); el < 1990*time.Millisecond || el > 2*time.Second {
			t.Errorf("200 units at 100/s took %v, want about 2s", el)
		}
		a := 0
		for _, c := range order[10:100] { // after the first arrivals settle
			if c == "a" {
				a++
			}
		}
		if a < 55 || a > 65 {
			t.Errorf("a (weight 2) got %d of 90 grants, want about 60", a)
		}
	})
}

func TestFairUpstreamShortageAndCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		u := newUpstream(t, Config{Rate: 10, Burst: 1})
		ctx := context.Background()
		// Fill a's queue with 20 waiters: 2s of work.
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() { u.Acquire(ctx, "a", "", 1, 1, 0) })
		}
		synctest.Wait()
		if _, err := u.Acquire(ctx, "a", "", 1, 1, time.Second); !errors.Is(err, ErrShortage) {
			t.Errorf("behind 2s of its own backlog with maxWait 1s: %v, want ErrShortage", err)
		}
		// b is light: its fair wait is short, so it is queued and served.
		start := time.Now()
		if w, err := u.Acquire(ctx, "b", "", 1, 1, time.Second); err != nil || w > 200*time.Millisecond {
			t.Errorf("light customer: waited %v, %v", w, err)
		}
		if time.Since(start) > 200*time.Millisecond {
			t.Errorf("light customer took %v", time.Since(start))
		}
		// A cancelled waiter is withdrawn: c's place goes, the queue moves.
		cctx, cancel := context.WithCancel(ctx)
		errc := make(chan error, 1)
		go func() {
			_, err := u.Acquire(cctx, "a", "", 1, 1, 0)
			errc <- err
		}()
		synctest.Wait()
		u.mu.Lock()
		before := u.s.Len()
		u.mu.Unlock()
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled waiter: %v", err)
		}
		u.mu.Lock()
		after := u.s.Len()
		u.mu.Unlock()
		if after != before-1 {
			t.Errorf("waiting %d before cancel, %d after: not withdrawn", before, after)
		}
		wg.Wait()
	})
}

func TestFairUpstreamClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		u, err := NewUpstream(Config{Rate: 1, Burst: 1}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if _, err := u.Acquire(ctx, "a", "", 1, 1, 0); err != nil {
			t.Fatal(err)
		}
		errc := make(chan error, 1)
		go func() {
			_, err := u.Acquire(ctx, "a", "", 1, 1, 0) // waits a second
			errc <- err
		}()
		synctest.Wait()
		u.Close()
		if err := <-errc; !errors.Is(err, ErrClosed) {
			t.Errorf("waiter at Close: %v, want ErrClosed", err)
		}
		if _, err := u.Acquire(ctx, "a", "", 1, 1, 0); !errors.Is(err, ErrClosed) {
			t.Errorf("after Close: %v, want ErrClosed", err)
		}
	})
}
