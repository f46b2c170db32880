package httpapi

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/sluicehq/sluice/engine"
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
