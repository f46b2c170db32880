package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// upstreamConfig writes a configuration with one upstream that grants one
// unit a minute, and returns its path.
func upstreamConfig(t *testing.T) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(file, []byte("upstreams:\n  partner-api: {rate: 1, window: 1m}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// TestUpstreamServe: a configured upstream grants its unit (200), then,
// its minute spent, refuses a request that will not wait (429, with
// Retry-After and the reason).
func TestUpstreamServe(t *testing.T) {
	p := start(t, "--store", "memory", "--config", upstreamConfig(t))
	acquire := func(body string) (*http.Response, map[string]any) {
		t.Helper()
		resp, err := http.Post("http://"+p.addr+"/v1/upstreams/partner-api/acquire", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
		return resp, out
	}
	if resp, out := acquire(`{"tenant":"acme","key":"u1"}`); resp.StatusCode != 200 || out["granted"] != true {
		t.Fatalf("first: %s %v", resp.Status, out)
	}
	resp, out := acquire(`{"tenant":"acme","key":"u2","maxWait":"100ms"}`)
	if resp.StatusCode != 429 || out["reason"] != "shortage" || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("second: %s %v", resp.Status, out)
	}
}

// TestUpstreamRefusedOnDynamoDB: several nodes would each grant an
// upstream's whole rate, so serve refuses to start with both.
func TestUpstreamRefusedOnDynamoDB(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "serve", "--addr", freeAddr(t), "--store", "dynamodb", "--config", upstreamConfig(t))
	out, err := cmd.CombinedOutput()
	if err == nil || ctx.Err() != nil {
		t.Fatalf("serve exited with %v (context %v):\n%s", err, ctx.Err(), out)
	}
	if !strings.Contains(string(out), "--store dynamodb with upstreams configured (partner-api)") {
		t.Fatalf("the error does not say why:\n%s", out)
	}
}
