package metrics

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/fairshare"
)

// TestUpstreams: a real fair-share upstream's grants, refusals by reason,
// queue depth and waits move its series; an upstream removed takes its
// series with it.
func TestUpstreams(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := NewUpstreams()
		u, err := fairshare.NewUpstream(fairshare.Config{Rate: 10, Burst: 1}, fairshare.Options{Observer: m.Observer("partner")})
		if err != nil {
			t.Fatal(err)
		}
		m.Live("partner", func() fairshare.Stats { return u.Stats(0) })
		series := func(name string) string { return name + "{upstream=partner}" }
		refused := func(reason string) string {
			return "sluice_upstream_refusals_total{reason=" + reason + ",upstream=partner}"
		}

		got := gather(t, m)
		for _, r := range fairshare.RefusedReasons {
			if v, ok := got[refused(r)]; !ok || v != 0 {
				t.Errorf("before any request, %s = %v (present %v), want 0", refused(r), v, ok)
			}
		}
		ctx := context.Background()
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() {
				if _, err := u.Acquire(ctx, "a", "", 1, 1, 0); err != nil {
					t.Error(err)
				}
			})
		}
		synctest.Wait()
		got = gather(t, m)
		granted := got[series("sluice_upstream_grants_total")]
		if depth := got[series("sluice_upstream_queue_depth")]; depth+granted != 20 || depth < 15 {
			t.Errorf("20 asked at 10/s at once: depth %v, granted %v", depth, granted)
		}
		if got[series("sluice_upstream_waiting_customers")] != 1 {
			t.Errorf("waiting customers %v, want 1", got[series("sluice_upstream_waiting_customers")])
		}
		// Behind 2s of its own backlog, with 1s to wait: refused at once.
		if _, err := u.Acquire(ctx, "a", "", 1, 1, time.Second); !errors.Is(err, fairshare.ErrShortage) {
			t.Errorf("over the estimate: %v", err)
		}
		if _, err := u.Acquire(ctx, "b", "", 0, 1, time.Second); err == nil {
			t.Error("weight 0 granted")
		}
		cctx, cancel := context.WithCancel(ctx)
		errc := make(chan error, 1)
		go func() {
			_, err := u.Acquire(cctx, "a", "", 1, 1, 0)
			errc <- err
		}()
		synctest.Wait()
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled: %v", err)
		}
		wg.Wait()
		u.Close()
		if _, err := u.Acquire(ctx, "a", "", 1, 1, 0); !errors.Is(err, fairshare.ErrClosed) {
			t.Errorf("after Close: %v", err)
		}
		got = gather(t, m)
		for k, want := range map[string]float64{
			series("sluice_upstream_grants_total"): 20,
			series("sluice_upstream_wait_seconds"): 20,
			series("sluice_upstream_queue_depth"):  0,
			refused("estimate"):                    1,
			refused("invalid"):                     1,
			refused("cancelled"):                   1,
			refused("closed"):                      1,
			refused("expired"):                     0,
			refused("queue_full"):                  0,
		} {
			if got[k] != want {
				t.Errorf("%s = %v, want %v", k, got[k], want)
			}
		}
		m.Remove("partner")
		if got := gather(t, m); len(got) != 0 {
			t.Errorf("after Remove: %v", got)
		}
	})
}
