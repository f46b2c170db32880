package engine_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/insight"
	"github.com/sluicehq/sluice/store/memstore"
)

// hotStep is the time between a hot key's decisions: 10 million an hour.
const hotStep = time.Hour / 10_000_000

// noop is an engine.KeyObserver that does nothing.
type noop struct{}

func (noop) Decided(string, engine.Outcome)                          {}
func (noop) StoreDone(time.Duration, error)                          {}
func (noop) DecidedKey(string, *sluice.Check, int64, engine.Outcome) {}

// BenchmarkObserved is a hot key's decision through Engine.Allow on the
// memory store (a token bucket it never reaches, a fake clock stepping
// hotStep a decision): with no observer; with an observer doing nothing
// (an observer takes Check's path and times the store); and with the
// dashboard's insight.Recorder, fresh and after a simulated hour of the
// key's decisions (10 million, told to the recorder), when its sample
// holds an hour of the key, coarsened.
func BenchmarkObserved(b *testing.B) {
	p := sluice.Policy{Name: "api", Algorithm: sluice.TokenBucket, Limit: 1_000_000_000, Window: time.Second}
	for _, tc := range []struct {
		name     string
		recorder bool
		obs      engine.Observer
		warm     time.Duration
	}{
		{name: "none"},
		{name: "noop", obs: noop{}},
		{name: "recorder", recorder: true},
		{name: "recorder-hour", recorder: true, warm: time.Hour},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var ns atomic.Int64
			ns.Store(time.Unix(3_000_000, 0).UnixNano())
			clock := func() time.Time { return time.Unix(0, ns.Load()) }
			obs := tc.obs
			if tc.recorder {
				r := insight.NewRecorder(insight.RecorderOptions{Now: clock})
				c := sluice.Check{Policy: p, Key: "hot"}
				for range int(tc.warm / hotStep) {
					r.DecidedKey("acme", &c, 1, engine.Allowed)
					ns.Add(int64(hotStep))
				}
				obs = r
			}
			s := memstore.New(memstore.Options{Now: clock})
			defer s.Close()
			e := engine.New(s, engine.Options{Now: clock, Observer: obs})
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if d, err := e.Allow(ctx, "acme", &p, "hot", 1); err != nil || !d.Allowed {
					b.Fatal(d, err)
				}
				ns.Add(int64(hotStep))
			}
		})
	}
}
