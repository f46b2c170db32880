package metrics

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// gather returns c's series as "name{label=value,...}" (labels in their
// order, empty ones left out) -> the counter's value or the histogram's
// count.
func gather(t *testing.T, c prometheus.Collector) map[string]float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				if l.GetValue() != "" {
					ls = append(ls, l.GetName()+"="+l.GetValue())
				}
			}
			var v float64
			switch {
			case m.Counter != nil:
				v = m.GetCounter().GetValue()
			case m.Gauge != nil:
				v = m.GetGauge().GetValue()
			case m.Histogram != nil:
				v = float64(m.GetHistogram().GetSampleCount())
			}
			out[f.GetName()+"{"+strings.Join(ls, ",")+"}"] = v
		}
	}
	return out
}

// wantSeries fails t unless got has exactly want's series and values.
func wantSeries(t *testing.T, got, want map[string]float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("series %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
}

// TestLatencyBuckets: the request histograms' bounds run from 100µs to
// 10s, rising, no step more than ×2, fine enough to read a p99 SLO.
func TestLatencyBuckets(t *testing.T) {
	b := latencyBuckets
	if b[0] != 0.0001 || b[len(b)-1] != 10 {
		t.Errorf("bounds %v..%v, want 0.0001..10", b[0], b[len(b)-1])
	}
	for i := 1; i < len(b); i++ {
		if r := b[i] / b[i-1]; r <= 1 || r > 2.0000001 {
			t.Errorf("step %v -> %v is ×%.2f, want more than 1 and at most 2", b[i-1], b[i], r)
		}
	}
}

// TestHTTPObserve: requests are counted and timed by route, method and
// code; an unmatched route and a made-up method each fold into one value.
func TestHTTPObserve(t *testing.T) {
	h := NewHTTP()
	for range 3 {
		h.Observe("/v1/check", "POST", 200, time.Millisecond)
	}
	h.Observe("/v1/check", "POST", 429, 2*time.Millisecond)
	h.Observe("", "GET", 404, time.Millisecond)
	h.Observe("", "BREW", 404, time.Millisecond)
	h.Observe("", "PROPFIND", 404, time.Millisecond)
	got := gather(t, h)
	want := map[string]float64{
		"sluice_http_requests_total{code=200,method=POST,route=/v1/check}":            3,
		"sluice_http_requests_total{code=429,method=POST,route=/v1/check}":            1,
		"sluice_http_requests_total{code=404,method=GET,route=unmatched}":             1,
		"sluice_http_requests_total{code=404,method=other,route=unmatched}":           2,
		"sluice_http_request_duration_seconds{code=200,method=POST,route=/v1/check}":  3,
		"sluice_http_request_duration_seconds{code=429,method=POST,route=/v1/check}":  1,
		"sluice_http_request_duration_seconds{code=404,method=GET,route=unmatched}":   1,
		"sluice_http_request_duration_seconds{code=404,method=other,route=unmatched}": 2,
	}
	wantSeries(t, got, want)
}

// TestGRPCInterceptors: a real gRPC server's calls are counted by full
// method and code, through the unary and stream interceptors; a method no
// service has counts as "unknown".
func TestGRPCInterceptors(t *testing.T) {
	g := NewGRPC()
	gs := grpc.NewServer(grpc.ChainUnaryInterceptor(g.UnaryInterceptor), grpc.ChainStreamInterceptor(g.StreamInterceptor),
		grpc.UnknownServiceHandler(func(any, grpc.ServerStream) error { return status.Error(codes.Unimplemented, "no") }))
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	g.Known(gs.GetServiceInfo())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(ln)
	defer gs.Stop()
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx := context.Background()
	client := healthpb.NewHealthClient(cc)
	for range 2 {
		if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{Service: "nope"}); status.Code(err) != codes.NotFound {
		t.Fatalf("check of an unknown service: %v", err)
	}
	err = cc.Invoke(ctx, "/made.Up/Method", &healthpb.HealthCheckRequest{}, &healthpb.HealthCheckResponse{})
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("a made-up method: %v", err)
	}
	got := gather(t, g)
	want := map[string]float64{
		"sluice_grpc_requests_total{code=OK,method=/grpc.health.v1.Health/Check}":                 2,
		"sluice_grpc_requests_total{code=NotFound,method=/grpc.health.v1.Health/Check}":           1,
		"sluice_grpc_requests_total{code=Unimplemented,method=unknown}":                           1,
		"sluice_grpc_request_duration_seconds{code=OK,method=/grpc.health.v1.Health/Check}":       2,
		"sluice_grpc_request_duration_seconds{code=NotFound,method=/grpc.health.v1.Health/Check}": 1,
		"sluice_grpc_request_duration_seconds{code=Unimplemented,method=unknown}":                 1,
	}
	wantSeries(t, got, want)
	// An error that is no status counts as Unknown, as gRPC answers it.
	g.Observe("/grpc.health.v1.Health/Check", errors.New("boom"), 0)
	if got := gather(t, g)["sluice_grpc_requests_total{code=Unknown,method=/grpc.health.v1.Health/Check}"]; got != 1 {
		t.Errorf("a plain error counted %v times under Unknown, want 1", got)
	}
}
