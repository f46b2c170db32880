package httpapi

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/insight"
	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/tenancy"
)

// BenchmarkCheck is POST /v1/check in process, the body of `sluice bench`:
// what the API adds to a decision, without the network.
func BenchmarkCheck(b *testing.B) {
	s := memstore.New(memstore.Options{})
	defer s.Close()
	h := New(Options{Limiter: engine.New(s, engine.Options{}), Tenancy: newTenancy(tenancy.Options{})})
	bodies := make([][]byte, 1000)
	for i := range bodies {
		bodies[i] = []byte(`{"tenant":"bench","checks":[{"key":"user-` + strconv.Itoa(i) + `","policy":{"name":"bench","algorithm":"fixed_window","limit":1000000,"window":"1m"}}]}`)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		w := &benchWriter{h: http.Header{}}
		for pb.Next() {
			r := httptest.NewRequest(http.MethodPost, "/v1/check", bytes.NewReader(bodies[i%len(bodies)]))
			r.Host = "127.0.0.1:8080" // as a client of a server without an admin key names it
			i++
			clear(w.h)
			w.code = 0
			h.ServeHTTP(w, r)
			if w.code != http.StatusOK {
				b.Fatalf("status %d", w.code)
			}
		}
	})
}

// benchWriter is a ResponseWriter that keeps the status and drops the body.
type benchWriter struct {
	h    http.Header
	code int
}

func (w *benchWriter) Header() http.Header { return w.h }
func (w *benchWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}
func (w *benchWriter) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return len(b), nil
}

// BenchmarkCheckRecorded is a hot key's POST /v1/check in process, as the
// server decides it, on two servers side by side: one with its metrics
// alone, and one with the dashboard's insight.Recorder too, fresh and
// after a simulated hour of the key (10 million decisions told to the
// recorder, whose sample then holds an hour of the key, coarsened). A
// fake clock steps 360ns a decision.
//
// The servers take turns, a block of decisions each, timed apart: a
// shared machine's noise falls on both alike, where two benchmarks run
// one after the other differ by more than the recorder costs. ns/op is
// the recorded decision; plain-ns/op the decision without the recorder,
// and overhead-% the difference.
func BenchmarkCheckRecorded(b *testing.B) {
	for _, tc := range []struct {
		name string
		warm time.Duration
	}{
		{name: "fresh"},
		{name: "hour", warm: time.Hour},
	} {
		b.Run(tc.name, func(b *testing.B) {
			plain, recorded := newCheckServer(b, 0, false), newCheckServer(b, tc.warm, true)
			const block = 64
			var tPlain, tRecorded time.Duration
			for b.Loop() {
				t0 := time.Now()
				for range block {
					plain.check(b)
				}
				t1 := time.Now()
				for range block {
					recorded.check(b)
				}
				tPlain, tRecorded = tPlain+t1.Sub(t0), tRecorded+time.Since(t1)
			}
			n := float64(b.N * block)
			b.ReportMetric(float64(tRecorded.Nanoseconds())/n, "ns/op")
			b.ReportMetric(float64(tPlain.Nanoseconds())/n, "plain-ns/op")
			b.ReportMetric(100*(float64(tRecorded)/float64(tPlain)-1), "overhead-%")
			if top := recorded.rec.TopKeys("bench", "", time.Time{}, 1); len(top.Hits) != 1 {
				b.Fatalf("the recorder kept no key: %+v", top)
			}
		})
	}
}

// checkServer is an API handler deciding one hot key, on a fake clock.
type checkServer struct {
	h    http.Handler
	w    *benchWriter
	ns   *atomic.Int64
	rec  *insight.Recorder
	step time.Duration
	body []byte
}

// newCheckServer returns a server with its metrics, and with an
// insight.Recorder if recorded, told warm's worth of the hot key first.
func newCheckServer(b *testing.B, warm time.Duration, recorded bool) *checkServer {
	const step = time.Hour / 10_000_000
	cs := &checkServer{w: &benchWriter{h: http.Header{}}, ns: new(atomic.Int64), step: step,
		body: []byte(`{"tenant":"bench","checks":[{"key":"user-hot","policy":{"name":"bench","algorithm":"fixed_window","limit":1000000000,"window":"1m"}}]}`)}
	cs.ns.Store(time.Unix(3_000_000, 0).UnixNano())
	clock := func() time.Time { return time.Unix(0, cs.ns.Load()) }
	decisions := metrics.NewDecisions(func(string) bool { return false })
	var obs engine.Observer = decisions
	if recorded {
		cs.rec = insight.NewRecorder(insight.RecorderOptions{Now: clock})
		c := sluice.Check{Policy: sluice.Policy{Name: "bench"}, Key: "user-hot", Space: sluice.SpaceInline}
		for range int(warm / step) {
			cs.rec.DecidedKey("bench", &c, 1, engine.Allowed)
			cs.ns.Add(int64(step))
		}
		obs = engine.Observers(decisions, cs.rec)
	}
	s := memstore.New(memstore.Options{Now: clock})
	b.Cleanup(func() { s.Close() })
	cs.h = New(Options{Limiter: engine.New(s, engine.Options{Now: clock, Observer: obs}), Tenancy: newTenancy(tenancy.Options{Now: clock}), Now: clock})
	return cs
}

// check decides the hot key once.
func (cs *checkServer) check(b *testing.B) {
	r := httptest.NewRequest(http.MethodPost, "/v1/check", bytes.NewReader(cs.body))
	r.Host = "127.0.0.1:8080"
	clear(cs.w.h)
	cs.w.code = 0
	cs.h.ServeHTTP(cs.w, r)
	if cs.w.code != http.StatusOK {
		b.Fatalf("status %d", cs.w.code)
	}
	cs.ns.Add(int64(cs.step))
}
