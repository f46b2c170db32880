package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluicehq/sluice/store/redisstore/redistest"
)

// TestEnvoyHealthFollowsRedis: a real sluice serve --store redis, its
// redis-server killed (SIGKILL) then started again on its port. The
// rate limit service's gRPC health ("" and "ratelimit") turns
// NOT_SERVING, then SERVING again, in the default mode and the
// compatible one; there /healthcheck answers 500, then 200.
func TestEnvoyHealthFollowsRedis(t *testing.T) {
	for _, compat := range []bool{false, true} {
		t.Run(fmt.Sprintf("compat=%v", compat), func(t *testing.T) {
			t.Parallel()
			rs := redistest.StartOwn(t)
			httpAddr, grpcAddr := freeAddr(t), freeAddr(t)
			argv := []string{"serve", "--addr", httpAddr, "--grpc-addr", grpcAddr, "--store", "redis",
				"--redis-url", "redis://" + rs.Addr, "--envoy-config", t.TempDir(), "--data-dir", filepath.Join(t.TempDir(), "data")}
			if compat {
				argv = append(argv, "--envoy-compat")
			}
			if _, err := launch(t, httpAddr, []string{"USE_STATSD=false"}, argv...); err != nil {
				t.Fatal(err)
			}
			hc := healthpb.NewHealthClient(dialRLS(t, grpcAddr).conn)
			step := func(what string, want healthpb.HealthCheckResponse_ServingStatus, code int) {
				t.Helper()
				for _, name := range []string{"", "ratelimit"} {
					waitFor(t, fmt.Sprintf("%s: the health of %q %v", what, name, want), func() bool {
						ctx, cancel := context.WithTimeout(context.Background(), patience)
						defer cancel()
						r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: name})
						return err == nil && r.GetStatus() == want
					})
				}
				if compat {
					waitFor(t, fmt.Sprintf("%s: /healthcheck %d", what, code), func() bool {
						return healthcheckCode(t, httpAddr) == code
					})
				}
			}
			step("redis up", healthpb.HealthCheckResponse_SERVING, 200)
			rs.Stop() // SIGKILL
			step("redis killed", healthpb.HealthCheckResponse_NOT_SERVING, 500)
			if err := rs.Restart(); err != nil {
				t.Fatal(err)
			}
			step("redis back", healthpb.HealthCheckResponse_SERVING, 200)
		})
	}
}

// healthcheckCode is the status of GET /healthcheck at addr, 0 if none.
func healthcheckCode(t *testing.T, addr string) int {
	t.Helper()
	client := &http.Client{Timeout: patience}
	defer client.CloseIdleConnections()
	resp, err := client.Get("http://" + addr + "/healthcheck")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// restartRedis starts the suite case's redis-server ("plain") again on
// its port, after stopRedis: the store recovers.
func restartRedis(r *suiteRun) error {
	if r.redis.kind != "plain" {
		return fmt.Errorf("restartRedis: a %q redis; only plain ones restart", r.redis.kind)
	}
	_, port, _ := net.SplitHostPort(r.redis.addr)
	cmd := exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", r.t.TempDir())
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	r.t.Cleanup(func() { cmd.Process.Kill(); <-exited })
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "Ready to accept connections") {
				close(ready)
				break
			}
		}
		io.Copy(io.Discard, out)
		cmd.Wait()
		close(exited)
	}()
	select {
	case <-ready:
		return nil
	case <-exited:
		return fmt.Errorf("redis-server exited before it was ready on %s", r.redis.addr)
	case <-time.After(patience):
		return fmt.Errorf("redis-server not ready on %s within %v", r.redis.addr, patience)
	}
}
