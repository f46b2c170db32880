package httpapi

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/pseudo"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/tenancy"
)

// BenchmarkCheckKeys is POST /v1/check in process over 1,000 keys on two
// servers side by side: one with keys as sent, one with them
// pseudonymised (--pseudonymise-keys: an HMAC-SHA256 of each key). They
// take turns, a block of decisions each, timed apart, as
// BenchmarkCheckRecorded's do. ns/op is the pseudonymised decision;
// plain-ns/op the other, and overhead-% the difference.
func BenchmarkCheckKeys(b *testing.B) {
	k, err := pseudo.New([]byte("a-benchmark-secret-32-bytes-long"))
	if err != nil {
		b.Fatal(err)
	}
	bodies := make([][]byte, 1000)
	for i := range bodies {
		bodies[i] = []byte(`{"tenant":"bench","checks":[{"key":"user-` + strconv.Itoa(i) + `@example.com","policy":{"name":"bench","algorithm":"fixed_window","limit":1000000000,"window":"1m"}}]}`)
	}
	server := func(o tenancy.Options) http.Handler {
		s := memstore.New(memstore.Options{})
		b.Cleanup(func() { s.Close() })
		return New(Options{Limiter: engine.New(s, engine.Options{}), Tenancy: newTenancy(o)})
	}
	plain, hidden := server(tenancy.Options{}), server(tenancy.Options{Pseudonyms: k})
	w := &benchWriter{h: http.Header{}}
	i := 0
	check := func(h http.Handler) {
		r := httptest.NewRequest(http.MethodPost, "/v1/check", bytes.NewReader(bodies[i%len(bodies)]))
		r.Host = "127.0.0.1:8080"
		clear(w.h)
		w.code = 0
		h.ServeHTTP(w, r)
		if w.code != http.StatusOK {
			b.Fatalf("status %d", w.code)
		}
	}
	const block = 64
	var tPlain, tHidden time.Duration
	b.ReportAllocs()
	for b.Loop() {
		t0 := time.Now()
		for range block {
			check(plain)
			i++
		}
		i -= block // the same keys, on the other server
		t1 := time.Now()
		for range block {
			check(hidden)
			i++
		}
		tPlain, tHidden = tPlain+t1.Sub(t0), tHidden+time.Since(t1)
	}
	n := float64(b.N * block)
	b.ReportMetric(float64(tHidden.Nanoseconds())/n, "ns/op")
	b.ReportMetric(float64(tPlain.Nanoseconds())/n, "plain-ns/op")
	b.ReportMetric(100*(float64(tHidden)/float64(tPlain)-1), "overhead-%")
}
