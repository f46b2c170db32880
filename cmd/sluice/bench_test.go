package main

import (
	"context"
	"os/exec"
	"strings"
	"testing"
)

// TestBench runs the load generator against a real server, briefly.
func TestBench(t *testing.T) {
	p := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*patience)
	defer cancel()
	out, err := exec.CommandContext(ctx, binary, "bench", "--url", "http://"+p.addr, "--workers", "4", "--keys", "10", "--duration", "1s").CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"decisions/s", "latency p50", "server CPU", "µs per decision"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("output lacks %q:\n%s", want, out)
		}
	}
	// Load goes only to loopback.
	out, err = exec.CommandContext(ctx, binary, "bench", "--url", "http://192.0.2.1:8080", "--duration", "1s").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "not on loopback") {
		t.Fatalf("non-loopback target accepted: %v\n%s", err, out)
	}
}

// TestBenchGRPC drives Envoy's rate limit service with `sluice bench
// --grpc`: every decision admitted, and counted by the server.
func TestBenchGRPC(t *testing.T) {
	grpcAddr := freeAddr(t)
	p := start(t, "--store", "memory", "--grpc-addr", grpcAddr, "--envoy-config", "../../bench/envoy")
	ctx, cancel := context.WithTimeout(context.Background(), 2*patience)
	defer cancel()
	out, err := exec.CommandContext(ctx, binary, "bench", "--url", "http://"+p.addr, "--grpc", grpcAddr,
		"--workers", "4", "--keys", "10", "--requests", "200", "--duration", "20s").CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"requests 200 ", "allowed 200, denied 0, errors 0", "server CPU", "load generator CPU"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("output lacks %q:\n%s", want, out)
		}
	}
	metrics, err := httpGet("http://" + p.addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if want := `sluice_decisions_total{outcome="allowed",policy="inline"} 200`; !strings.Contains(metrics, want) {
		t.Errorf("/metrics lacks %s", want)
	}
	out, err = exec.CommandContext(ctx, binary, "bench", "--url", "http://"+p.addr, "--grpc", "192.0.2.1:8081", "--duration", "1s").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "not on loopback") {
		t.Fatalf("non-loopback --grpc accepted: %v\n%s", err, out)
	}
}

// TestMetrics: /metrics counts decisions by policy and outcome, shows the
// configuration reloads at 0 before the first one, and /readyz answers for
// the store.
func TestMetrics(t *testing.T) {
	p := start(t, "--config", "../../examples/sluice.yaml")
	for range 11 {
		p.call(t, "", "POST", "/v1/check", `{"tenant":"t","endpoint":"models","key":{"user":"u"}}`)
	}
	p.call(t, "", "POST", "/v1/check", `{"tenant":"t","checks":[{"policy":{"name":"mine","algorithm":"fixed_window","limit":1,"window":"1m"}}]}`)
	resp, err := httpGet("http://" + p.addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`sluice_decisions_total{outcome="allowed",policy="models"} 10`,
		`sluice_decisions_total{outcome="denied",policy="models"} 1`,
		`sluice_decisions_total{outcome="allowed",policy="inline"} 1`,
		`sluice_store_seconds_count`,
		`sluice_config_reloads_total{result="ok"} 0`,
		`sluice_config_reloads_total{result="rejected"} 0`,
		`process_cpu_seconds_total`,
	} {
		if !strings.Contains(resp, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if code, out := p.call(t, "", "GET", "/readyz", ""); code != 200 || out["status"] != "ready" {
		t.Fatalf("readyz: %d %v", code, out)
	}
}
