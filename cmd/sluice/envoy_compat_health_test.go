package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// health returns the gRPC health of service, or an error's text.
func (r *rls) health(service string) string {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	h, err := healthpb.NewHealthClient(r.conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		return err.Error()
	}
	return h.Status.String()
}

// healthNames are the services the rate limit service's health answers
// for: the server's, its own and the reference's.
var healthNames = []string{"", "envoy.service.ratelimit.v3.RateLimitService", "ratelimit"}

// TestEnvoyCompatStartWithoutConfig: with --envoy-start-without-config,
// serve starts on a directory that is missing, or has a bad file; calls
// fail with the reference's Unknown error until the directory loads, then
// are answered. Without it, serve does not start.
func TestEnvoyCompatStartWithoutConfig(t *testing.T) {
	for _, bad := range []bool{false, true} {
		dir := filepath.Join(t.TempDir(), "config")
		if bad {
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			writeFileAtomic(t, filepath.Join(dir, "bad.yaml"), []byte("domain: quotas\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"))
		}
		if out, err := serveRefused(t, "--grpc-addr", "127.0.0.1:0", "--envoy-config", dir); err == nil {
			t.Errorf("bad %v: serve started without --envoy-start-without-config\n%s", bad, out)
		}
		grpcAddr := freeAddr(t)
		start(t, "--store", "memory", "--grpc-addr", grpcAddr, "--envoy-config", dir, "--config-poll", "100ms", "--envoy-start-without-config")
		r := dialRLS(t, grpcAddr)
		req := &rlspb.RateLimitRequest{Domain: "quotas", Descriptors: []*ratelimitpb.RateLimitDescriptor{desc("regular", "w")}}
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		_, err := r.c.ShouldRateLimit(ctx, req)
		cancel()
		if st, _ := status.FromError(err); st.Code() != codes.Unknown || st.Message() != "no rate limit configuration loaded" {
			t.Errorf("bad %v: a call before the configuration: %v", bad, err)
		}
		for _, name := range healthNames {
			if h := r.health(name); h != "SERVING" {
				t.Errorf("bad %v: health of %q %s, want SERVING without --envoy-health-needs-config", bad, name, h)
			}
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		os.Remove(filepath.Join(dir, "bad.yaml"))
		writeFileAtomic(t, filepath.Join(dir, "quotas.yaml"), []byte(compatQuotas))
		waitFor(t, "the configuration to load", func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), patience)
			defer cancel()
			_, err := r.c.ShouldRateLimit(ctx, req)
			return err == nil
		})
		wantStatus(t, "after the load", r.askReq(req).Statuses[0], ok, 5, 3)
	}
}

// TestEnvoyCompatHealthNeedsConfig: with --envoy-health-needs-config, the
// gRPC health, for "", the service and "ratelimit", is NOT_SERVING until a
// domain loads, SERVING then, and NOT_SERVING again when a reload leaves
// no domain.
func TestEnvoyCompatHealthNeedsConfig(t *testing.T) {
	dir := t.TempDir()
	grpcAddr := freeAddr(t)
	start(t, "--store", "memory", "--grpc-addr", grpcAddr, "--envoy-config", dir, "--config-poll", "100ms", "--envoy-health-needs-config")
	r := dialRLS(t, grpcAddr)
	allHealth := func(want string) func() bool {
		return func() bool {
			for _, name := range healthNames {
				if r.health(name) != want {
					return false
				}
			}
			return true
		}
	}
	if !allHealth("NOT_SERVING")() {
		var got []string
		for _, name := range healthNames {
			got = append(got, r.health(name))
		}
		t.Errorf("no domain: health %v, want NOT_SERVING", got)
	}
	writeFileAtomic(t, filepath.Join(dir, "quotas.yaml"), []byte(compatQuotas))
	waitFor(t, "SERVING once a domain loads", allHealth("SERVING"))
	if err := os.Remove(filepath.Join(dir, "quotas.yaml")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "NOT_SERVING once no domain is left", allHealth("NOT_SERVING"))
	if resp := r.ask("quotas", desc("regular", "x")); resp.OverallCode != ok || resp.Statuses[0].CurrentLimit != nil {
		t.Errorf("no domain left: %v, want OK without a limit", resp)
	}
	if h := r.health("no-such-service"); !strings.Contains(h, "NotFound") {
		t.Errorf("an unknown service: %s", h)
	}
}
