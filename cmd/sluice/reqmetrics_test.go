package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/coder/websocket"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// sample is one line of /metrics: a series and its value.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

var (
	sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)`)
	labelPair  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)
)

// scrape reads p's /metrics: its samples, and the metric families it
// declares (# TYPE lines).
func scrape(t *testing.T, p *process) ([]sample, map[string]string) {
	t.Helper()
	resp, err := http.Get("http://" + p.addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("/metrics: %s %s", resp.Status, b)
	}
	var out []sample
	types := map[string]string{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			types[f[2]] = f[3]
			continue
		}
		m := sampleLine.FindStringSubmatch(line)
		if m == nil || strings.HasPrefix(line, "#") {
			continue
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			t.Fatalf("/metrics line %q: %v", line, err)
		}
		s := sample{name: m[1], labels: map[string]string{}, value: v}
		for _, l := range labelPair.FindAllStringSubmatch(m[2], -1) {
			s.labels[l[1]] = l[2]
		}
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out, types
}

// find returns the samples of name whose labels include want's.
func find(samples []sample, name string, want map[string]string) []sample {
	var out []sample
	for _, s := range samples {
		if s.name != name {
			continue
		}
		match := true
		for k, v := range want {
			if s.labels[k] != v {
				match = false
			}
		}
		if match {
			out = append(out, s)
		}
	}
	return out
}

// sum is the sum of the samples of name whose labels include want's.
func sum(samples []sample, name string, want map[string]string) float64 {
	var n float64
	for _, s := range find(samples, name, want) {
		n += s.value
	}
	return n
}

// TestRequestMetricsServe: a real server counts every HTTP request by its
// route's pattern, method and status, and times each into a histogram
// whose count is the requests sent; a path that matched no route counts
// as "unmatched", with nothing of the path in any label; gRPC calls count
// by full method and code; an upstream's grants, refusals and queue move
// with real acquires.
func TestRequestMetricsServe(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(cfg, []byte("upstreams:\n  partner-api: {rate: 1, window: 1m, maxWait: 1m}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	grpcAddr := freeAddr(t)
	p := start(t, "--store", "memory", "--config", cfg, "--grpc-addr", grpcAddr)

	const allowed, refused = 7, 3
	body := `{"tenant":"acme","checks":[{"key":"u1","policy":{"name":"chat","algorithm":"fixed_window","limit":7,"window":"1h"}}]}`
	for i := range allowed + refused {
		want := 200
		if i >= allowed {
			want = 429
		}
		if resp := p.check(t, body); resp.StatusCode != want {
			t.Fatalf("check %d: %s, want %d", i, resp.Status, want)
		}
	}
	// A path no route has, carrying what could be a tenant id and a key.
	if resp, err := http.Get("http://" + p.addr + "/v1/nothing/secret-tenant/secret-key"); err != nil || resp.StatusCode != 404 {
		t.Fatalf("an unknown path: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}

	r := dialRLS(t, grpcAddr)
	health := healthpb.NewHealthClient(r.conn)
	const healthCalls = 4
	for range healthCalls {
		if _, err := health.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	err := r.conn.Invoke(context.Background(), "/made.Up/Method", &healthpb.HealthCheckRequest{}, &healthpb.HealthCheckResponse{})
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("a made-up method: %v", err)
	}

	acquire := func(ctx context.Context, body string) int {
		req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+p.addr+"/v1/upstreams/partner-api/acquire", strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := acquire(context.Background(), `{"tenant":"acme","key":"u1"}`); code != 200 {
		t.Fatalf("first acquire: %d", code)
	}
	if code := acquire(context.Background(), `{"tenant":"acme","key":"u2","maxWait":"100ms"}`); code != 429 {
		t.Fatalf("second acquire: %d, want 429", code)
	}
	// A third waits its turn, a minute away: the queue holds it until its
	// client goes.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- acquire(ctx, `{"tenant":"globex","key":"u1","maxWait":"1m"}`) }()
	upstream := map[string]string{"upstream": "partner-api"}
	waitFor(t, "a request in the upstream's queue", func() bool {
		samples, _ := scrape(t, p)
		return sum(samples, "sluice_upstream_queue_depth", upstream) == 1
	})
	cancel()
	<-done
	waitFor(t, "the queue empty and the withdrawal counted", func() bool {
		samples, _ := scrape(t, p)
		return sum(samples, "sluice_upstream_queue_depth", upstream) == 0 &&
			sum(samples, "sluice_upstream_refusals_total", map[string]string{"upstream": "partner-api", "reason": "cancelled"}) == 1 &&
			sum(samples, "sluice_http_requests_total", map[string]string{"route": "/v1/upstreams/{name}/acquire", "code": "499"}) == 1
	})

	samples, types := scrape(t, p)
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"sluice_http_requests_total", map[string]string{"route": "/v1/check", "method": "POST", "code": "200"}, allowed},
		{"sluice_http_requests_total", map[string]string{"route": "/v1/check", "method": "POST", "code": "429"}, refused},
		{"sluice_http_request_duration_seconds_count", map[string]string{"route": "/v1/check", "method": "POST", "code": "200"}, allowed},
		{"sluice_http_request_duration_seconds_count", map[string]string{"route": "/v1/check", "method": "POST", "code": "429"}, refused},
		{"sluice_http_request_duration_seconds_bucket", map[string]string{"route": "/v1/check", "method": "POST", "code": "200", "le": "+Inf"}, allowed},
		{"sluice_http_requests_total", map[string]string{"route": "unmatched", "method": "GET", "code": "404"}, 1},
		{"sluice_http_requests_total", map[string]string{"route": "/v1/upstreams/{name}/acquire", "method": "POST", "code": "200"}, 1},
		{"sluice_http_requests_total", map[string]string{"route": "/v1/upstreams/{name}/acquire", "method": "POST", "code": "429"}, 1},
		{"sluice_http_requests_total", map[string]string{"route": "/v1/upstreams/{name}/acquire", "method": "POST", "code": "499"}, 1}, // its client went
		{"sluice_grpc_requests_total", map[string]string{"method": "/grpc.health.v1.Health/Check", "code": "OK"}, healthCalls},
		{"sluice_grpc_request_duration_seconds_count", map[string]string{"method": "/grpc.health.v1.Health/Check", "code": "OK"}, healthCalls},
		{"sluice_grpc_requests_total", map[string]string{"method": "unknown", "code": "Unimplemented"}, 1},
		{"sluice_upstream_grants_total", upstream, 1},
		{"sluice_upstream_wait_seconds_count", upstream, 1},
		{"sluice_upstream_refusals_total", map[string]string{"upstream": "partner-api", "reason": "estimate"}, 1},
		{"sluice_decisions_total", map[string]string{"outcome": "denied"}, refused},
	} {
		if got := sum(samples, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	// Buckets fine enough for a p99: 22 of them (with +Inf) a series.
	if n := len(find(samples, "sluice_http_request_duration_seconds_bucket", map[string]string{"route": "/v1/check", "code": "200"})); n != 22 {
		t.Errorf("%d buckets, want 22", n)
	}
	for _, name := range []string{"sluice_http_request_duration_seconds", "sluice_grpc_request_duration_seconds", "sluice_upstream_wait_seconds"} {
		if types[name] != "histogram" {
			t.Errorf("%s is a %q, want a histogram", name, types[name])
		}
	}
	for _, s := range samples {
		for _, v := range s.labels {
			if strings.Contains(v, "secret") {
				t.Errorf("a label carries the path sent: %s %v", s.name, s.labels)
			}
		}
	}
}

// TestDecisionTenantLabelsServe: with --metrics-tenant-labels 2, a real
// server's decisions carry their tenant for the first two tenants decided
// on and "(other)" for the rest, never a third tenant; a deleted tenant's
// series go. Without the flag, no decision has a tenant.
func TestDecisionTenantLabelsServe(t *testing.T) {
	check := func(p *process, tenant string) {
		t.Helper()
		body := `{"tenant":"` + tenant + `","checks":[{"key":"u1","policy":{"name":"chat","algorithm":"fixed_window","limit":100,"window":"1h"}}]}`
		if resp := p.check(t, body); resp.StatusCode != 200 {
			t.Fatalf("check of %s: %s", tenant, resp.Status)
		}
	}
	tenantsOf := func(p *process) map[string]float64 {
		samples, _ := scrape(t, p)
		out := map[string]float64{}
		for _, s := range find(samples, "sluice_decisions_total", nil) {
			out[s.labels["tenant"]] += s.value
		}
		return out
	}

	off := start(t, "--store", "memory")
	check(off, "acme")
	if got := tenantsOf(off); len(got) != 1 || got[""] != 1 {
		t.Errorf("without the flag: decisions by tenant %v, want one unlabelled", got)
	}

	p := start(t, "--store", "memory", "--metrics-tenant-labels", "2")
	for _, id := range []string{"acme", "globex"} {
		if code, out := p.call(t, "", "POST", "/v1/tenants", `{"id":"`+id+`"}`); code != 201 {
			t.Fatal(code, out)
		}
	}
	for _, tenant := range []string{"acme", "acme", "globex", "initech", "umbrella", "initech"} {
		check(p, tenant)
	}
	want := map[string]float64{"acme": 2, "globex": 1, "(other)": 3}
	if got := tenantsOf(p); len(got) != len(want) || got["acme"] != 2 || got["globex"] != 1 || got["(other)"] != 3 {
		t.Errorf("decisions by tenant %v, want %v", got, want)
	}
	if code, out := p.call(t, "", "DELETE", "/v1/tenants/acme", ""); code != 200 {
		t.Fatal(code, out)
	}
	// acme's place is free: the next tenant decided on takes it.
	check(p, "hooli")
	want = map[string]float64{"globex": 1, "hooli": 1, "(other)": 3}
	if got := tenantsOf(p); len(got) != len(want) || got["globex"] != 1 || got["hooli"] != 1 || got["(other)"] != 3 {
		t.Errorf("after acme's deletion: decisions by tenant %v, want %v", got, want)
	}
}

// TestUpgradeMetricsServe: a WebSocket connect counts as a 101 of route
// /v1/ws, timed to its handshake, while its connection is still open, and
// an event stream as a 200 once its header is sent, while it still
// streams: a connection's life is not a request's latency.
func TestUpgradeMetricsServe(t *testing.T) {
	p := start(t, "--config", "../../examples/sluice.yaml")
	demoConnection(t, p)
	samples, _ := scrape(t, p)
	ws101 := map[string]string{"route": "/v1/ws", "method": "GET", "code": "101"}
	if n := sum(samples, "sluice_http_requests_total", ws101); n != 1 {
		t.Errorf("upgrades counted while the connection is open: %v, want 1", n)
	}
	if n := sum(samples, "sluice_http_request_duration_seconds_count", ws101); n != 1 {
		t.Errorf("upgrades timed while the connection is open: %v, want 1", n)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+p.addr+"/v1/tenants/demo/insight/stream", nil)
	resp, err := http.DefaultClient.Do(req) // returns at the header
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream: %s %s", resp.Status, resp.Header.Get("Content-Type"))
	}
	samples, _ = scrape(t, p)
	stream := map[string]string{"route": "/v1/tenants/{id}/insight/stream", "method": "GET", "code": "200"}
	if n := sum(samples, "sluice_http_request_duration_seconds_count", stream); n != 1 {
		t.Errorf("streams timed while streaming: %v, want 1", n)
	}
}

// demoConnection opens a WebSocket connection to a new session of tenant
// demo (examples/sluice.yaml's), closed when the test ends.
func demoConnection(t *testing.T, p *process) *websocket.Conn {
	t.Helper()
	code, out := p.call(t, "", "PUT", "/v1/tenants/demo/sessions", "")
	if code != 201 {
		t.Fatal(code, out)
	}
	ws, status := dialWS(t, p, "demo", out["id"].(string))
	if status != 101 {
		t.Fatalf("connect: %d", status)
	}
	t.Cleanup(func() { ws.CloseNow() })
	return ws
}
