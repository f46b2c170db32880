package main

import (
	"strings"
	"testing"
)

// TestMetricsAuthServe: with tenant labels on, a real server with an admin
// key answers /metrics, which names tenants and their traffic, only to the
// admin key (401 without it or with a tenant's key), while its health
// endpoints stay open; without tenant labels /metrics stays open.
func TestMetricsAuthServe(t *testing.T) {
	const admin = "an-admin-key-for-the-metrics-tests"
	get := func(p *process, path, key string) (int, string) {
		t.Helper()
		code, b := p.raw(t, key, "GET", path, "")
		return code, string(b)
	}
	decide := func(p *process, tenant string) {
		t.Helper()
		body := `{"tenant":"` + tenant + `","checks":[{"key":"u1","policy":{"name":"chat","algorithm":"fixed_window","limit":100,"window":"1h"}}]}`
		if code, out := p.call(t, admin, "POST", "/v1/check", body); code != 200 {
			t.Fatalf("check of %s: %d %v", tenant, code, out)
		}
	}

	p := start(t, "--store", "memory", "--admin-key", admin, "--metrics-tenant-labels", "5")
	if code, out := p.call(t, admin, "POST", "/v1/tenants", `{"id":"acme"}`); code != 201 {
		t.Fatal(code, out)
	}
	_, key := p.call(t, admin, "POST", "/v1/tenants/acme/keys", `{}`)
	tenantKey, _ := key["token"].(string)
	if tenantKey == "" {
		t.Fatalf("no tenant key: %v", key)
	}
	decide(p, "acme")
	for _, k := range []string{"", "wrong", tenantKey} {
		if code, body := get(p, "/metrics", k); code != 401 || strings.Contains(body, "acme") {
			t.Errorf("labels on, /metrics with key %q: %d, want 401 naming no tenant:\n%.300s", k, code, body)
		}
	}
	code, body := get(p, "/metrics", admin)
	if code != 200 || !strings.Contains(body, `tenant="acme"`) {
		t.Errorf("labels on, /metrics with the admin key: %d, want 200 with acme's label:\n%s", code, grepLines(body, "sluice_decisions_total"))
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, _ := get(p, path, ""); code != 200 {
			t.Errorf("labels on, %s without a key: %d, want 200", path, code)
		}
	}

	off := start(t, "--store", "memory", "--admin-key", admin)
	decide(off, "acme")
	if code, body := get(off, "/metrics", ""); code != 200 || !strings.Contains(body, "sluice_decisions_total") || strings.Contains(body, `tenant="acme"`) {
		t.Errorf("labels off, /metrics without a key: %d, want 200 with decisions by no tenant:\n%s", code, grepLines(body, "sluice_decisions_total"))
	}
}
