package dynamostore

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/dynamostore/dynamotest"
)

// TestEmulatorStopAndStart: under load, the emulator is killed and started
// again on the same data. While it is gone, decisions fail fast with
// KindUnavailable within their deadline (the engine's fail modes take it
// from there) and no goroutines pile up; when it is back, the same store
// recovers by itself and the counts are still exact.
func TestEmulatorStopAndStart(t *testing.T) {
	srv := dynamotest.StartOwn(t)
	db := dynamotest.NewClient(srv.Endpoint)
	table := dynamotest.TableName(t)
	if err := CreateTable(dynamotest.Context(t), db, table); err != nil {
		t.Fatal(err)
	}
	s, err := New(db, Options{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	p := sluice.Policy{Name: "p", Algorithm: sluice.FixedWindow, Limit: 1_000_000, Window: 8760 * time.Hour}
	k := sluice.Key{Tenant: "acme", Policy: "p", Value: "k"}
	now := time.Now()

	var admitted, unavailable, slow atomic.Int64
	var other atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			dst := make([]sluice.Decision, 1)
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				start := time.Now()
				err := s.Apply(ctx, now, []sluice.Op{{Key: k, Policy: &p, Hits: 1}}, dst)
				cancel()
				if time.Since(start) > time.Second {
					slow.Add(1)
				}
				switch {
				case err == nil && dst[0].Allowed:
					admitted.Add(1)
				case sluice.KindOf(err) == sluice.KindUnavailable:
					unavailable.Add(1)
					time.Sleep(10 * time.Millisecond)
				case err != nil:
					other.Store(err)
				}
			}
		})
	}
	time.Sleep(300 * time.Millisecond)
	before := runtime.NumGoroutine()
	srv.Stop()
	time.Sleep(time.Second)
	during := runtime.NumGoroutine()
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	atRestart := admitted.Load()
	deadline := time.Now().Add(10 * time.Second)
	for admitted.Load() < atRestart+50 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	wg.Wait()

	if err, _ := other.Load().(error); err != nil {
		t.Fatalf("an error not marked unavailable: %v", err)
	}
	if unavailable.Load() == 0 {
		t.Fatal("no decision failed while the emulator was gone")
	}
	if slow.Load() > 0 {
		t.Fatalf("%d decisions took over 1s against a 200ms deadline", slow.Load())
	}
	if admitted.Load() < atRestart+50 {
		t.Fatalf("the store did not recover: %d admitted after the restart", admitted.Load()-atRestart)
	}
	if during > before+20 {
		t.Fatalf("goroutines piled up while the emulator was gone: %d before, %d during", before, during)
	}
	// Every admitted hit is counted, none twice. A write in flight when
	// the emulator died may have landed with its answer lost: the client
	// saw unavailable, the table counts it (erring on the safe side), at
	// most one per worker.
	dst := make([]sluice.Decision, 1)
	if err := s.Apply(context.Background(), now, []sluice.Op{{Key: k, Policy: &p}}, dst); err != nil {
		t.Fatal(err)
	}
	if used := p.Limit - dst[0].Remaining; used < admitted.Load() || used > admitted.Load()+8 {
		t.Fatalf("the table counts %d hits, the clients saw %d admitted", used, admitted.Load())
	}
}
