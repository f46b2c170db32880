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
	"github.com/sluicehq/sluice/store/memstore"
)

// BenchmarkCheck is POST /v1/check in process, the body of `sluice bench`:
// what the API adds to a decision, without the network.
func BenchmarkCheck(b *testing.B) {
	s := memstore.New(memstore.Options{})
	defer s.Close()
	h := New(Options{Limiter: engine.New(s, engine.Options{}), Tenants: &memstore.Tenants{}})
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
// server decides it: with its metrics alone, and with the dashboard's
// insight.Recorder too, fresh and after a simulated hour of the key (10
// million decisions told to the recorder, whose sample then holds an hour
// of the key, coarsened). A fake clock steps 360ns a decision.
func BenchmarkCheckRecorded(b *testing.B) {
	const step = time.Hour / 10_000_000
	body := []byte(`{"tenant":"bench","checks":[{"key":"user-hot","policy":{"name":"bench","algorithm":"fixed_window","limit":1000000000,"window":"1m"}}]}`)
	for _, tc := range []struct {
		name     string
		recorder bool
		warm     time.Duration
	}{
		{name: "metrics"},
		{name: "metrics+recorder", recorder: true},
		{name: "metrics+recorder-hour", recorder: true, warm: time.Hour},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var ns atomic.Int64
			ns.Store(time.Unix(3_000_000, 0).UnixNano())
			clock := func() time.Time { return time.Unix(0, ns.Load()) }
			metrics := NewMetrics(func(string) bool { return false })
			var obs engine.Observer = metrics
			var rec *insight.Recorder
			if tc.recorder {
				rec = insight.NewRecorder(insight.RecorderOptions{Now: clock})
				c := sluice.Check{Policy: sluice.Policy{Name: "bench"}, Key: "user-hot", Space: sluice.SpaceInline}
				for range int(tc.warm / step) {
					rec.DecidedKey("bench", &c, 1, engine.Allowed)
					ns.Add(int64(step))
				}
				obs = engine.Observers(metrics, rec)
			}
			s := memstore.New(memstore.Options{Now: clock})
			defer s.Close()
			h := New(Options{Limiter: engine.New(s, engine.Options{Now: clock, Observer: obs}), Tenants: &memstore.Tenants{}, Now: clock})
			w := &benchWriter{h: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				r := httptest.NewRequest(http.MethodPost, "/v1/check", bytes.NewReader(body))
				r.Host = "127.0.0.1:8080"
				clear(w.h)
				w.code = 0
				h.ServeHTTP(w, r)
				if w.code != http.StatusOK {
					b.Fatalf("status %d", w.code)
				}
				ns.Add(int64(step))
			}
			if rec != nil {
				if top := rec.TopKeys("bench", "", time.Time{}, 1); len(top.Hits) != 1 {
					b.Fatalf("the recorder kept no key: %+v", top)
				}
			}
		})
	}
}
