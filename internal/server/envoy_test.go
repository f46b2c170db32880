package server

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// TestEnvoyHealthy: with HealthNeedsConfig, Healthy and the gRPC health
// follow the configuration in force: not serving with no domain (none
// loaded at start, or every one gone on a reload), serving with one; a
// reload that fails changes nothing. Without it, always healthy.
func TestEnvoyHealthy(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "config")
	log := slog.New(slog.DiscardHandler)
	c, err := loadEnvoy(EnvoyConfig{Dir: dir, StartWithoutConfig: true, HealthNeedsConfig: true}, log)
	if err != nil {
		t.Fatal(err)
	}
	hs := health.NewServer()
	c.health.serve(hs)
	step := func(what string, healthy bool) {
		t.Helper()
		c.watcher.Poll()
		c.watcher.Poll()
		want := healthpb.HealthCheckResponse_NOT_SERVING
		if healthy {
			want = healthpb.HealthCheckResponse_SERVING
		}
		if c.Healthy() != healthy {
			t.Errorf("%s: Healthy %v, want %v", what, c.Healthy(), healthy)
		}
		for _, name := range []string{"", "envoy.service.ratelimit.v3.RateLimitService", "ratelimit"} {
			r, err := hs.Check(context.Background(), &healthpb.HealthCheckRequest{Service: name})
			if err != nil || r.Status != want {
				t.Errorf("%s: gRPC health of %q %v, %v; want %v", what, name, r.GetStatus(), err, want)
			}
		}
	}
	step("no configuration", false)
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	step("an empty directory", false)
	write := func(name, yaml string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("d.yaml", "domain: d\n")
	step("a domain", true)
	write("bad.yaml", "domain: [\n")
	step("a bad file", true)
	os.Remove(filepath.Join(dir, "bad.yaml"))
	os.Remove(filepath.Join(dir, "d.yaml"))
	step("every domain gone", false)

	c, err = loadEnvoy(EnvoyConfig{Dir: dir}, log)
	if err != nil || !c.Healthy() {
		t.Errorf("without HealthNeedsConfig: %v, %v", c.Healthy(), err)
	}
}
