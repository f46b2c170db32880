package metrics

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// latencyBuckets are the request latency histograms' bounds: 100µs to 10s,
// 1, 2, 3 and 5 of each decade. No step is more than ×2, so a quantile
// read by histogram_quantile's interpolation inside a bucket is off by
// less than the bucket's width, and every round SLO threshold (1ms, 5ms,
// 10ms, 50ms, 100ms, 300ms, 1s...) is a bound, read exactly. The
// histograms are also native (exponential, factor 1.1) for a Prometheus
// that scrapes them.
var latencyBuckets = []float64{
	0.0001, 0.0002, 0.0003, 0.0005,
	0.001, 0.002, 0.003, 0.005,
	0.01, 0.02, 0.03, 0.05,
	0.1, 0.2, 0.3, 0.5,
	1, 2, 3, 5,
	10,
}

func latencyHistogram(name, help string, labels ...string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: name, Help: help, Buckets: latencyBuckets,
		NativeHistogramBucketFactor:     1.1,
		NativeHistogramMaxBucketNumber:  160,
		NativeHistogramMinResetDuration: time.Hour,
	}, labels)
}

// HTTP is the HTTP API's request metrics. It implements
// prometheus.Collector and is safe for concurrent use.
//
//	sluice_http_requests_total{route, method, code}            requests answered
//	sluice_http_request_duration_seconds{route, method, code}  their latency
//
// route is the pattern of the route the request matched (its path,
// /v1/tenants/{id}/keys), never the path sent, which carries tenant ids,
// lease tokens and session ids; a request that matched no route (404, or
// 405 for a known path) is "unmatched". method is one of HTTP's own, or
// "other"; code the status answered. The label sets are bounded by the
// routes and the statuses the server answers.
type HTTP struct {
	collectorSet
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	// series holds the counter and histogram of each httpKey, made on its
	// first request, as WithLabelValues would: found without hashing the
	// labels or formatting the code.
	series sync.Map
}

type httpKey struct {
	route, method string
	code          int
}

// requestSeries are one label set's counter and histogram.
type requestSeries struct {
	requests prometheus.Counter
	duration prometheus.Observer
}

func (s *requestSeries) observe(took time.Duration) {
	s.requests.Inc()
	s.duration.Observe(took.Seconds())
}

var _ prometheus.Collector = (*HTTP)(nil)

// NewHTTP returns the HTTP API's request metrics.
func NewHTTP() *HTTP {
	h := &HTTP{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_http_requests_total", Help: "HTTP requests answered, by route pattern, method and status code.",
		}, []string{"route", "method", "code"}),
		duration: latencyHistogram("sluice_http_request_duration_seconds",
			"HTTP request latency, by route pattern, method and status code: to the answer's end, or for a WebSocket upgrade or an event stream to its header.",
			"route", "method", "code"),
	}
	h.collectorSet = collectorSet{h.requests, h.duration}
	return h
}

// httpMethods are the methods counted by their own label.
var httpMethods = map[string]bool{"GET": true, "HEAD": true, "POST": true, "PUT": true, "PATCH": true, "DELETE": true, "OPTIONS": true}

// Observe counts a request answered with code after took, of route (the
// matched pattern's path; "" for none).
func (h *HTTP) Observe(route, method string, code int, took time.Duration) {
	if route == "" {
		route = "unmatched"
	}
	if !httpMethods[method] {
		method = "other"
	}
	k := httpKey{route, method, code}
	v, ok := h.series.Load(k)
	if !ok {
		c := strconv.Itoa(code)
		v, _ = h.series.LoadOrStore(k, &requestSeries{h.requests.WithLabelValues(route, method, c), h.duration.WithLabelValues(route, method, c)})
	}
	v.(*requestSeries).observe(took)
}

// GRPC is the gRPC server's call metrics (Envoy's rate limit service,
// health, reflection). It implements prometheus.Collector and is safe for
// concurrent use.
//
//	sluice_grpc_requests_total{method, code}            calls ended
//	sluice_grpc_request_duration_seconds{method, code}  their latency
//
// method is the full method name (/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit)
// of a registered service (Known), else "unknown"; code the status code's
// name (OK, Unauthenticated, ...).
type GRPC struct {
	collectorSet
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec

	mu    sync.RWMutex
	known map[string]bool
	// series holds the counter and histogram of each grpcKey, as
	// HTTP.series does.
	series sync.Map
}

type grpcKey struct {
	method string
	code   codes.Code
}

var _ prometheus.Collector = (*GRPC)(nil)

// NewGRPC returns the gRPC server's call metrics, which know no method
// until Known.
func NewGRPC() *GRPC {
	g := &GRPC{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_grpc_requests_total", Help: "gRPC calls ended, by full method name and status code.",
		}, []string{"method", "code"}),
		duration: latencyHistogram("sluice_grpc_request_duration_seconds",
			"gRPC call latency, by full method name and status code: to a unary call's answer, or a stream's end.",
			"method", "code"),
	}
	g.collectorSet = collectorSet{g.requests, g.duration}
	return g
}

// Known takes the methods of a server's registered services
// (grpc.Server.GetServiceInfo) as the method label's values.
func (g *GRPC) Known(services map[string]grpc.ServiceInfo) {
	known := map[string]bool{}
	for svc, info := range services {
		for _, m := range info.Methods {
			known["/"+svc+"/"+m.Name] = true
		}
	}
	g.mu.Lock()
	g.known = known
	g.mu.Unlock()
}

// Observe counts a call of method ended with err after took.
func (g *GRPC) Observe(method string, err error, took time.Duration) {
	g.mu.RLock()
	if !g.known[method] {
		method = "unknown"
	}
	g.mu.RUnlock()
	k := grpcKey{method, status.Code(err)}
	v, ok := g.series.Load(k)
	if !ok {
		c := k.code.String()
		v, _ = g.series.LoadOrStore(k, &requestSeries{g.requests.WithLabelValues(method, c), g.duration.WithLabelValues(method, c)})
	}
	v.(*requestSeries).observe(took)
}

// UnaryInterceptor counts and times unary calls; chained first, it sees
// the calls other interceptors refuse.
func (g *GRPC) UnaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := next(ctx, req)
	g.Observe(info.FullMethod, err, time.Since(start))
	return resp, err
}

// StreamInterceptor counts and times streams, to their end.
func (g *GRPC) StreamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, next grpc.StreamHandler) error {
	start := time.Now()
	err := next(srv, ss)
	g.Observe(info.FullMethod, err, time.Since(start))
	return err
}
