package server

import (
	"net/http"
	"strings"
	"time"

	"github.com/sluicehq/sluice/metrics"
)

// frontMetrics are the front doors' metrics: the HTTP API's requests, the
// gRPC service's calls and the fair-share upstreams' acquires.
type frontMetrics struct {
	http      *metrics.HTTP
	grpc      *metrics.GRPC
	upstreams *metrics.Upstreams
}

func newFrontMetrics() frontMetrics {
	return frontMetrics{http: metrics.NewHTTP(), grpc: metrics.NewGRPC(), upstreams: metrics.NewUpstreams()}
}

// requestMetrics counts and times every request into m, by the pattern of
// the route it matched (routePath's: never the path sent, whose segments
// carry tenant ids, lease tokens and session ids), its method and its
// status. A request's latency runs to the end of its handler, but for a
// WebSocket upgrade (101) or an event stream, which hold their handler
// for the connection's life: theirs runs to their header, and they are
// counted then, not when the connection ends. A handler that panics
// counts as a 500; a request whose client went before any answer (an
// upstream's waiter withdrawn) as 499, nginx's "client closed request".
func requestMetrics(m *metrics.HTTP, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mw := &metricsWriter{ResponseWriter: w, m: m, r: r, start: time.Now()}
		defer func() {
			if v := recover(); v != nil {
				mw.observe(http.StatusInternalServerError)
				panic(v)
			}
			if r.Context().Err() != nil {
				mw.observe(statusClientGone) // if nothing was written
			}
			mw.observe(http.StatusOK) // nothing written: net/http answers 200
		}()
		next.ServeHTTP(mw, r)
	})
}

// statusClientGone is the status counted for a request whose client went
// before it was answered.
const statusClientGone = 499

// metricsWriter observes its request once: at a streaming answer's
// header, or at the handler's end. Unwrap lets http.ResponseController
// and the WebSocket upgrade reach the connection.
type metricsWriter struct {
	http.ResponseWriter
	m        *metrics.HTTP
	r        *http.Request
	start    time.Time
	status   int
	observed bool
}

// observe counts the request with its status, or with status if it wrote
// none, once.
func (w *metricsWriter) observe(status int) {
	if w.observed {
		return
	}
	w.observed = true
	if w.status != 0 {
		status = w.status
	}
	route := ""
	if w.r.Pattern != "" {
		route = routePath(w.r)
	}
	w.m.Observe(route, w.r.Method, status, time.Since(w.start))
}

func (w *metricsWriter) WriteHeader(code int) {
	// Informational answers (100, 103) come before the final one; 101
	// is final, for an upgrade.
	if w.status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.status = code
		if code == http.StatusSwitchingProtocols || strings.HasPrefix(w.Header().Get("Content-Type"), "text/event-stream") {
			w.observe(code) // a stream: its latency is its header's
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *metricsWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

func (w *metricsWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
