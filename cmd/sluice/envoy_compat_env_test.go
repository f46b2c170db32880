package main

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/sluicehq/sluice/store/dynamostore/dynamotest"
)

// compatYAML is a domain of the tests of the compatible mode: 2 an hour
// for each value of k.
const compatYAML = `domain: compat
descriptors:
  - key: k
    rate_limit:
      unit: hour
      requests_per_unit: 2
`

// compatRuntime writes the reference's runtime layout under a new root,
// ROOT/ratelimit/config/compat.yaml, and returns ROOT.
func compatRuntime(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "compat.yaml"), []byte(compatYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

// compatEnv is an environment of only env, and what a process of the
// tests needs of the test's (none of the reference's variables, which the
// machine's may hold).
func compatEnv(env ...string) []string {
	for _, k := range []string{"GOCOVERDIR", "TMPDIR", "GORACE"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// hostPortEnv returns the variables HOST and PORT (with prefix, "" or
// "GRPC_") of a free loopback address, and the address.
func hostPortEnv(t *testing.T, prefix string) (string, []string) {
	addr := freeAddr(t)
	host, port, _ := net.SplitHostPort(addr)
	return addr, []string{prefix + "HOST=" + host, prefix + "PORT=" + port}
}

// startProgram runs prog (the binary, or a link to it) with args and only
// env, as a process serving HTTP on addr, and waits until /healthz
// answers there.
func startProgram(t *testing.T, prog, addr string, env []string, args ...string) *process {
	t.Helper()
	p := &process{addr: addr, done: make(chan error, 1), exited: make(chan struct{})}
	p.cmd = exec.Command(prog, args...)
	p.cmd.Env = env
	p.launch(t)
	waitFor(t, "sluice to serve /healthz on "+addr, func() bool {
		select {
		case <-p.exited:
			t.Fatalf("sluice exited before serving:\n%s", p.log())
		default:
		}
		_, err := httpGet("http://" + addr + "/healthz")
		return err == nil
	})
	return p
}

// ratelimitLink returns a link named ratelimit to the binary under test,
// as the image's /bin/ratelimit.
func ratelimitLink(t *testing.T) string {
	link := filepath.Join(t.TempDir(), "ratelimit")
	if err := os.Symlink(binary, link); err != nil {
		t.Fatal(err)
	}
	return link
}

// grpcHealth returns the gRPC health of service at addr.
func grpcHealth(t *testing.T, r *rls, service string) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	resp, err := healthpb.NewHealthClient(r.conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		t.Fatalf("health of %q: %v", service, err)
	}
	return resp.Status
}

// postJSON posts body to p's /json with the token, if any, and returns the
// status and the body.
func postJSON(t *testing.T, p *process, token, body string) (int, string) {
	t.Helper()
	code, b := p.raw(t, token, "POST", "/json", body)
	return code, string(b)
}

// overallCode returns the overallCode of a /json answer.
func overallCode(t *testing.T, body string) string {
	t.Helper()
	var resp struct{ OverallCode string }
	if err := json.Unmarshal([]byte(body), &resp); err != nil {
		t.Fatalf("the answer %q is not JSON: %v", body, err)
	}
	return resp.OverallCode
}

// TestEnvoyCompatAsRatelimit: run as ratelimit (the image's
// /bin/ratelimit), with a Deployment's environment of the reference and
// nothing else, sluice serves the reference's ports and runtime layout:
// gRPC health under "ratelimit", decisions by the configuration of
// $RUNTIME_ROOT/$RUNTIME_SUBDIRECTORY/config, the headers of
// $LIMIT_RESPONSE_HEADERS_ENABLED, /healthcheck and /json.
func TestEnvoyCompatAsRatelimit(t *testing.T) {
	httpAddr, env := hostPortEnv(t, "")
	grpcAddr, grpcEnv := hostPortEnv(t, "GRPC_")
	env = append(env, grpcEnv...)
	env = append(env, "RUNTIME_ROOT="+compatRuntime(t), "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
		"LIMIT_RESPONSE_HEADERS_ENABLED=true", "USE_STATSD=true", "LOCAL_CACHE_SIZE_IN_BYTES=1000", "BACKEND_TYPE=redis",
		"LOG_LEVEL=info", "SLUICE_STORE=memory")
	p := startProgram(t, ratelimitLink(t), httpAddr, compatEnv(env...))
	r := dialRLS(t, grpcAddr)

	for _, svc := range []string{"", "ratelimit"} {
		if st := grpcHealth(t, r, svc); st != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("gRPC health of %q: %v, want SERVING", svc, st)
		}
	}
	for i, want := range []rlspb.RateLimitResponse_Code{ok, ok, over} {
		resp := r.ask("compat", desc("k", "a"))
		if resp.OverallCode != want {
			t.Errorf("call %d: %v, want %v", i+1, resp.OverallCode, want)
		}
		if !hasHeader(resp, "RateLimit-Limit") {
			t.Errorf("call %d: headers %v, want RateLimit-Limit ($LIMIT_RESPONSE_HEADERS_ENABLED=true)", i+1, resp.ResponseHeadersToAdd)
		}
	}

	if body, err := httpGet("http://" + httpAddr + "/healthcheck"); err != nil || body != "OK" {
		t.Errorf("/healthcheck: %q %v, want OK", body, err)
	}
	if code, body := postJSON(t, p, "", `{"domain": "compat", "descriptors": [{"entries": [{"key": "k", "value": "a"}]}]}`); code != http.StatusTooManyRequests || overallCode(t, body) != "OVER_LIMIT" {
		t.Errorf("/json over the limit: %d %s, want 429 OVER_LIMIT", code, body)
	}
	if code, body := postJSON(t, p, "", `{"domain": "compat", "descriptors": [{"entries": [{"key": "k", "value": "b"}]}]}`); code != http.StatusOK || overallCode(t, body) != "OK" {
		t.Errorf("/json within the limit: %d %s, want 200 OK", code, body)
	}
	// /json and gRPC count on the same counters.
	if resp := r.ask("compat", desc("k", "b")); resp.Statuses[0].LimitRemaining != 0 {
		t.Errorf("after one /json call and one gRPC call on b: %d left, want 0", resp.Statuses[0].LimitRemaining)
	}
	if code, _ := postJSON(t, p, "", `{"domain": `); code != http.StatusBadRequest {
		t.Errorf("/json with bad JSON: %d, want 400", code)
	}
	if !strings.Contains(p.log(), "$USE_STATSD=true") {
		t.Error("no word at the start that statsd is not sent")
	}
}

// hasHeader reports whether resp adds the header name.
func hasHeader(resp *rlspb.RateLimitResponse, name string) bool {
	for _, h := range resp.GetResponseHeadersToAdd() {
		if h.GetKey() == name {
			return true
		}
	}
	return false
}

// TestEnvoyCompatExplicitWins: with $SLUICE_ENVOY_COMPAT, the flags given
// win over the reference's variables: the addresses, and the headers.
func TestEnvoyCompatExplicitWins(t *testing.T) {
	httpAddr, grpcAddr := freeAddr(t), freeAddr(t)
	env := compatEnv("SLUICE_ENVOY_COMPAT=true", "SLUICE_GRPC_ADDR="+grpcAddr, "HOST=127.0.0.1", "PORT=1", "GRPC_HOST=127.0.0.1", "GRPC_PORT=1",
		"RUNTIME_ROOT="+compatRuntime(t), "RUNTIME_SUBDIRECTORY=ratelimit", "LIMIT_RESPONSE_HEADERS_ENABLED=true")
	p := startProgram(t, binary, httpAddr, env, "serve", "--store", "memory", "--addr", httpAddr, "--envoy-response-headers=false")
	r := dialRLS(t, grpcAddr)
	resp := r.ask("compat", desc("k", "a"))
	if resp.OverallCode != ok || hasHeader(resp, "RateLimit-Limit") {
		t.Errorf("%v, headers %v; want OK and none (--envoy-response-headers=false)", resp.OverallCode, resp.ResponseHeadersToAdd)
	}
	// The variables no flag overrides are read: the configuration's.
	wantStatus(t, "k=a", resp.Statuses[0], ok, 2, 1)
	if code, _ := p.raw(t, "", "GET", "/healthcheck", ""); code != http.StatusOK {
		t.Errorf("/healthcheck: %d, want 200", code)
	}
}

// TestEnvoyCompatRefused: in the compatible mode, a value the reference
// would not read, or a setting Sluice does not offer, stops the start with
// exit status 2 and the variable named; out of it, the reference's
// variables are not read at all.
func TestEnvoyCompatRefused(t *testing.T) {
	root := compatRuntime(t)
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	_, heldPort, _ := net.SplitHostPort(held.Addr().String())
	for _, tc := range []struct {
		env  string
		want []string
	}{
		// A failure of the start names the variables of its flag.
		{"GRPC_PORT=" + heldPort, []string{"address already in use", "$GRPC_HOST, $GRPC_PORT"}},
		{"PORT=abc", []string{"$PORT", "integer"}},
		{"SHADOW_MODE=maybe", []string{"$SHADOW_MODE", "true or false"}},
		{"BACKEND_TYPE=memcache", []string{"$BACKEND_TYPE", "memcached"}},
		{"CONFIG_TYPE=GRPC_XDS_SOTW", []string{"$CONFIG_TYPE", "xDS"}},
		{"GRPC_UDS=/tmp/ratelimit.sock", []string{"$GRPC_UDS"}},
		{"RUNTIME_SUBDIRECTORY=nowhere", []string{filepath.Join(root, "nowhere", "config"), "$RUNTIME_ROOT", "$RUNTIME_SUBDIRECTORY"}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		env := compatEnv("RUNTIME_ROOT="+root, "RUNTIME_SUBDIRECTORY=ratelimit", "GRPC_HOST=127.0.0.1", "GRPC_PORT=0", tc.env)
		cmd := exec.CommandContext(ctx, binary, "serve", "--envoy-compat", "--store", "memory", "--addr", "127.0.0.1:0")
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		cancel()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
			t.Errorf("%s: %v, want exit 2\n%s", tc.env, err, out)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(string(out), w) {
				t.Errorf("%s: %q does not say %q", tc.env, out, w)
			}
		}
	}

	t.Run("LOG_FORMAT=json", func(t *testing.T) {
		// The error at the start is a JSON line, as the rest of the log.
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		defer cancel()
		out, err := runBinary(ctx, []string{"SLUICE_ENVOY_COMPAT=true", "LOG_FORMAT=json", "PORT=abc"}, "serve", "--store", "memory")
		var line struct{ Level, Err string }
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || json.Unmarshal([]byte(out), &line) != nil ||
			line.Level != "ERROR" || !strings.Contains(line.Err, "$PORT") {
			t.Errorf("%v: %q, want exit 2 and a JSON line naming $PORT", err, out)
		}
	})
	t.Run("not read out of the mode", func(t *testing.T) {
		addr := freeAddr(t)
		startProgram(t, binary, addr, compatEnv("PORT=abc", "SHADOW_MODE=maybe", "BACKEND_TYPE=memcache", "RUNTIME_ROOT=/nowhere"),
			"serve", "--store", "memory", "--addr", addr)
	})
}

// TestEnvoyCompatClosedAPI: in the compatible mode off loopback without an
// admin key, serve starts, as the reference does, and --addr serves
// /healthcheck, /json, /healthz and /readyz alone: nothing of Sluice's
// HTTP API opens. /json takes the gRPC token, when set, as gRPC does. With
// an admin key, the API is served, behind it.
func TestEnvoyCompatClosedAPI(t *testing.T) {
	_, port, _ := net.SplitHostPort(freeAddr(t))
	grpcAddr, grpcEnv := hostPortEnv(t, "GRPC_")
	const token = "compat-grpc-token-0123456789"
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := append(grpcEnv, "HOST=0.0.0.0", "PORT="+port, "RUNTIME_ROOT="+compatRuntime(t), "RUNTIME_SUBDIRECTORY=ratelimit",
		"SLUICE_STORE=memory", "SLUICE_GRPC_TOKEN_FILE="+tokenFile)
	addr := net.JoinHostPort("127.0.0.1", port)
	p := startProgram(t, ratelimitLink(t), addr, compatEnv(env...))

	for _, route := range []struct{ method, path string }{{"POST", "/v1/check"}, {"GET", "/v1/tenants"}, {"GET", "/v1/policies"}, {"GET", "/dashboard"}, {"GET", "/metrics"}} {
		if code, body := p.raw(t, "", route.method, route.path, `{}`); code != http.StatusNotFound || !strings.Contains(string(body), "admin key") {
			t.Errorf("%s %s: %d %s, want 404 naming the admin key", route.method, route.path, code, body)
		}
	}
	for _, path := range []string{"/healthz", "/readyz", "/healthcheck"} {
		if code, _ := p.raw(t, "", "GET", path, ""); code != http.StatusOK {
			t.Errorf("GET %s: %d, want 200", path, code)
		}
	}
	req := `{"domain": "compat", "descriptors": [{"entries": [{"key": "k", "value": "j"}]}]}`
	if code, _ := postJSON(t, p, "", req); code != http.StatusUnauthorized {
		t.Errorf("/json without the token: %d, want 401", code)
	}
	if code, _ := postJSON(t, p, "wrong-token-0123456789", req); code != http.StatusUnauthorized {
		t.Errorf("/json with a wrong token: %d, want 401", code)
	}
	if code, body := postJSON(t, p, token, req); code != http.StatusOK || overallCode(t, body) != "OK" {
		t.Errorf("/json with the token: %d %s, want 200 OK", code, body)
	}
	// Nothing was counted by the refused calls: one of 2 is spent.
	r := dialRLS(t, grpcAddr)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
	ctx, cancel := context.WithTimeout(ctx, patience)
	defer cancel()
	resp, err := r.c.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "compat", Descriptors: []*ratelimitpb.RateLimitDescriptor{desc("k", "j")}})
	if err != nil || resp.Statuses[0].LimitRemaining != 0 {
		t.Errorf("gRPC after /json: %v %v, want 0 left", resp, err)
	}

	t.Run("with an admin key", func(t *testing.T) {
		_, port, _ := net.SplitHostPort(freeAddr(t))
		env := append(slices.Clone(env), "PORT="+port, "GRPC_PORT=0", "SLUICE_ADMIN_KEY="+testAdminKey)
		p := startProgram(t, ratelimitLink(t), net.JoinHostPort("127.0.0.1", port), compatEnv(env...))
		if code, _ := p.raw(t, "", "GET", "/v1/policies", ""); code != http.StatusUnauthorized {
			t.Errorf("the API without the key: %d, want 401", code)
		}
		if code, _ := p.raw(t, testAdminKey, "GET", "/v1/policies", ""); code != http.StatusOK {
			t.Errorf("the API with the key: %d, want 200", code)
		}
		if code, _ := p.raw(t, "", "GET", "/healthcheck", ""); code != http.StatusOK {
			t.Errorf("/healthcheck: %d, want 200", code)
		}
	})
}

// TestEnvoyCompatHealthcheckStore: /healthcheck answers 500 while the
// store is not ready, as /readyz answers 503: a node on DynamoDB whose
// way to it (a count-proxy) is cut.
func TestEnvoyCompatHealthcheckStore(t *testing.T) {
	proxy := startCountProxy(t, dynamotest.Get(t).Endpoint)
	dir := filepath.Join(compatRuntime(t), "ratelimit", "config")
	p := nodesVia(t, 1, "http://"+proxy.addr, "--envoy-compat", "--grpc-addr", freeAddr(t), "--envoy-config", dir)[0]
	if code, body := p.raw(t, "", "GET", "/healthcheck", ""); code != http.StatusOK || string(body) != "OK" {
		t.Fatalf("/healthcheck: %d %q, want 200 OK", code, body)
	}
	if err := proxy.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-proxy.exited
	waitFor(t, "/healthcheck to answer 500 without the store", func() bool {
		code, _ := p.raw(t, "", "GET", "/healthcheck", "")
		return code == http.StatusInternalServerError
	})
	if code, _ := p.raw(t, "", "GET", "/readyz", ""); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz: %d, want 503 as /healthcheck's 500", code)
	}
}

// TestEnvoyCompatHealthcheckNeedsConfig: with the reference's
// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=true and
// FORCE_START_WITHOUT_INITIAL_CONFIG=true, a server started on a
// configuration directory with no domain serves, but /healthcheck answers
// 500 and gRPC health NOT_SERVING until a domain's file arrives, and 200
// and SERVING after.
func TestEnvoyCompatHealthcheckNeedsConfig(t *testing.T) {
	httpAddr, env := hostPortEnv(t, "")
	grpcAddr, grpcEnv := hostPortEnv(t, "GRPC_")
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	env = append(env, grpcEnv...)
	env = append(env, "RUNTIME_ROOT="+root, "RUNTIME_SUBDIRECTORY=ratelimit", "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=true",
		"FORCE_START_WITHOUT_INITIAL_CONFIG=true", "SLUICE_STORE=memory", "SLUICE_CONFIG_POLL=100ms")
	p := startProgram(t, ratelimitLink(t), httpAddr, compatEnv(env...))
	r := dialRLS(t, grpcAddr)
	if code, body := p.raw(t, "", "GET", "/healthcheck", ""); code != http.StatusInternalServerError {
		t.Errorf("/healthcheck with no domain: %d %q, want 500", code, body)
	}
	if st := grpcHealth(t, r, "ratelimit"); st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("gRPC health of ratelimit with no domain: %v, want NOT_SERVING", st)
	}
	writeFileAtomic(t, filepath.Join(dir, "compat.yaml"), []byte(compatYAML))
	waitFor(t, "/healthcheck to answer 200 once a domain loads", func() bool {
		code, _ := p.raw(t, "", "GET", "/healthcheck", "")
		return code == http.StatusOK
	})
	if st := grpcHealth(t, r, "ratelimit"); st != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("gRPC health of ratelimit with a domain: %v, want SERVING", st)
	}
	for i, want := range []rlspb.RateLimitResponse_Code{ok, ok, over} {
		if resp := r.ask("compat", desc("k", "a")); resp.OverallCode != want {
			t.Errorf("call %d: %v, want %v", i+1, resp.OverallCode, want)
		}
	}
}
