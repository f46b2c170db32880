package main

import "testing"

// TestUnknownFieldNamedByItsPath: a member that no field takes, deep in a
// body, is named by its whole path.
func TestUnknownFieldNamedByItsPath(t *testing.T) {
	p := start(t, "--store", "memory")
	const policy = `{"name":"p","algorithm":"fixed_window","limit":3,"window":"60s"}`
	for body, field := range map[string]string{
		`{"tenant":"acme","checks":[{"policy":` + policy + `},{"policy":{"name":"p","algorithm":"fixed_window","limit":3,"windw":"60s"}}]}`: "checks[1].policy.windw",
		`{"tenant":"acme","checks":[{"key":"k","policy":` + policy + `,"kye":"k"}]}`:                                                        "checks[0].kye",
	} {
		if code, out := p.call(t, "", "POST", "/v1/check", body); code != 400 || out["field"] != field {
			t.Errorf("%s: %d %v, want 400 naming %s", body, code, out, field)
		}
	}
	if code, out := p.call(t, "", "POST", "/v1/tenants", `{"id":"acme","overrides":{"chat":{"limit":3,"windw":"1s"}}}`); code != 400 || out["field"] != "overrides.chat.windw" {
		t.Errorf("tenant: %d %v, want 400 naming overrides.chat.windw", code, out)
	}
}
