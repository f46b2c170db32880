package server

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/metrics"
)

// TestRequestMetrics: behind the request log, as the server chains them,
// each request counts once by its route's pattern, never its path: one
// answered, one that wrote nothing (200), one that panicked (500), and
// one no route has.
func TestRequestMetrics(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/tenants/{id}", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNotFound) })
	mux.HandleFunc("DELETE /v1/tenants/{id}", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("POST /v1/check", func(http.ResponseWriter, *http.Request) { panic("boom") })
	m := metrics.NewHTTP()
	h := requestLog(slog.New(slog.DiscardHandler), requestMetrics(m, mux))
	serve := func(method, path string) {
		defer func() { _ = recover() }() // the panic, passed on for net/http
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(method, path, nil))
	}
	serve("GET", "/v1/tenants/acme-secret")
	serve("GET", "/v1/tenants/globex")
	serve("DELETE", "/v1/tenants/acme-secret")
	serve("POST", "/v1/check")
	serve("GET", "/v1/nowhere/acme-secret")

	reg := metrics.NewRegistry()
	if err := reg.Register(m); err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	reg.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	out := w.Body.String()
	for _, want := range []string{
		`sluice_http_requests_total{code="404",method="GET",route="/v1/tenants/{id}"} 2`,
		`sluice_http_requests_total{code="200",method="DELETE",route="/v1/tenants/{id}"} 1`,
		`sluice_http_requests_total{code="500",method="POST",route="/v1/check"} 1`,
		`sluice_http_requests_total{code="404",method="GET",route="unmatched"} 1`,
		`sluice_http_request_duration_seconds_count{code="500",method="POST",route="/v1/check"} 1`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %s in\n%s", want, out)
		}
	}
	if strings.Contains(out, "secret") {
		t.Error("a label carries a path's segment")
	}
}
