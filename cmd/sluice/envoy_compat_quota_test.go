package main

import "testing"

// compatQuotas is a regular limit and two quota-mode ones, as the
// reference's example configuration has them. The compatible mode's tests
// count in years, whose windows (aligned to the Unix epoch) no test
// straddles but once a year.
const compatQuotas = `domain: quotas
descriptors:
  - key: regular
    rate_limit: {unit: year, requests_per_unit: 5}
  - key: service
    value: service_1
    quota_mode: true
    rate_limit: {unit: year, requests_per_unit: 1}
  - key: service
    value: service_2
    quota_mode: true
    rate_limit: {unit: year, requests_per_unit: 2}
`

// TestEnvoyCompatQuotaMode: a configuration with quota_mode loads, and a
// request is over only when every quota-mode descriptor of it is over (or
// a regular one is); all-or-nothing, an admitted request consumes from
// every descriptor that admits it.
func TestEnvoyCompatQuotaMode(t *testing.T) {
	r, _ := startCompat(t, map[string]string{"quotas.yaml": compatQuotas})
	regular, s1, s2 := desc("regular", "a"), desc("service", "service_1"), desc("service", "service_2")
	resp := r.ask("quotas", regular, s1, s2)
	wantStatus(t, "first, regular", resp.Statuses[0], ok, 5, 4)
	wantStatus(t, "first, service_1", resp.Statuses[1], ok, 1, 0)
	resp = r.ask("quotas", regular, s1, s2)
	if resp.OverallCode != ok {
		t.Errorf("second: overall %v, want OK: service_2 is within its quota", resp.OverallCode)
	}
	wantStatus(t, "second, regular", resp.Statuses[0], ok, 5, 3)
	wantStatus(t, "second, service_1", resp.Statuses[1], over, 1, 0)
	wantStatus(t, "second, service_2", resp.Statuses[2], ok, 2, 0)
	resp = r.ask("quotas", regular, s1, s2)
	if resp.OverallCode != over {
		t.Errorf("third: overall %v, want OVER_LIMIT: every quota is over", resp.OverallCode)
	}
	wantStatus(t, "third, regular: not consumed", resp.Statuses[0], ok, 5, 3)
}

// TestEnvoyCompatGlobalQuotaMode: with --envoy-quota-mode every
// descriptor is a quota-mode one: a regular limit over does not deny while
// another descriptor is within its limit.
func TestEnvoyCompatGlobalQuotaMode(t *testing.T) {
	r, _ := startCompat(t, map[string]string{"quotas.yaml": compatQuotas}, "--envoy-quota-mode")
	regular, s2 := desc("regular", "b"), desc("service", "service_2")
	for range 5 {
		r.ask("quotas", regular)
	}
	resp := r.ask("quotas", regular, s2)
	if resp.OverallCode != ok {
		t.Errorf("regular over beside service_2: overall %v, want OK in quota mode", resp.OverallCode)
	}
	wantStatus(t, "regular", resp.Statuses[0], over, 5, 0)
	wantStatus(t, "service_2", resp.Statuses[1], ok, 2, 1)
	if resp := r.ask("quotas", regular); resp.OverallCode != over {
		t.Errorf("regular over alone: overall %v, want OVER_LIMIT", resp.OverallCode)
	}
}
