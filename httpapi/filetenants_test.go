package httpapi

import (
	"fmt"
	"strings"
	"testing"
)

// A tenant of the configuration file reads like a stored one, marked as
// the file's; its limits are the enforced ones, tier and overrides
// applied, as every tenant's are; a PUT of it answers 409 naming the
// file, and changes nothing.
func TestFileTenantsAndLimits(t *testing.T) {
	s := newService(t)
	code, out := s.do(t, adminKey, "GET", "/v1/tenants/demo", "")
	if code != 200 || out["source"] != "file" || out["tier"] != "free" {
		t.Fatalf("demo, of the file: %d %v", code, out)
	}
	if code, out := s.do(t, adminKey, "PUT", "/v1/tenants/demo", `{"tier":"premium"}`); code != 409 || !strings.Contains(out["message"].(string), "configuration file") {
		t.Fatalf("a PUT of the file's demo: %d %v, want 409 naming the file", code, out)
	}
	// A lift with nothing to lift makes no record.
	if code, out := s.do(t, adminKey, "DELETE", "/v1/tenants/demo/blocks?policy=chat&key=user%3Dnobody", ""); code != 200 || out["block"] != false {
		t.Fatalf("lifting nothing on the file's demo: %d %v", code, out)
	}
	if _, out := s.do(t, adminKey, "GET", "/v1/tenants/demo", ""); out["version"] != nil {
		t.Fatalf("a lift of nothing made demo a record: %v", out)
	}
	if _, out := s.do(t, adminKey, "GET", "/v1/tenants/demo", ""); out["tier"] != "free" {
		t.Fatalf("after a refused PUT: %v", out)
	}
	// It is blocked, and holds keys, like a stored tenant: a record of its
	// own holds them, and its limits stay the file's.
	check := func(key, user string) int {
		t.Helper()
		code, _ := s.do(t, key, "POST", "/v1/check", `{"tenant":"demo","endpoint":"chat","key":{"user":"`+user+`"}}`)
		return code
	}
	if code, out := s.do(t, adminKey, "POST", "/v1/tenants/demo/blocks", `{"policy":"chat","key":"user=mallory","seconds":600}`); code != 201 || out["key"] != "user=mallory" {
		t.Fatalf("blocking a key of the file's demo: %d %v", code, out)
	}
	if check(adminKey, "mallory") != 429 || check(adminKey, "bob") != 200 {
		t.Fatal("the file's demo: mallory's block does not hold, or holds bob")
	}
	code, out = s.do(t, adminKey, "POST", "/v1/tenants/demo/keys", `{"name":"ci"}`)
	if code != 201 {
		t.Fatalf("a key of the file's demo: %d %v", code, out)
	}
	demoKey := out["token"].(string)
	if code, out := s.do(t, demoKey, "GET", "/v1/tenants/demo/blocks", ""); code != 200 || len(out["blocks"].([]any)) != 1 {
		t.Fatalf("demo's key reading its blocks: %d %v", code, out)
	}
	if code, out := s.do(t, demoKey, "GET", "/v1/tenants/demo/keys", ""); code != 200 || len(out["keys"].([]any)) != 1 {
		t.Fatalf("demo's keys: %d %v", code, out)
	}
	if code, out := s.do(t, adminKey, "GET", "/v1/tenants/demo", ""); code != 200 || out["source"] != "file" || out["tier"] != "free" || out["version"] != float64(2) {
		t.Fatalf("demo with its record: %d %v, want the file's at version 2", code, out)
	}
	if code, out := s.do(t, adminKey, "PUT", "/v1/tenants/demo", `{"tier":"premium"}`); code != 409 || !strings.Contains(out["message"].(string), "configuration file") {
		t.Fatalf("a PUT of the file's demo with its record: %d %v, want 409 naming the file", code, out)
	}
	if code, out := s.do(t, adminKey, "GET", "/v1/tenants", ""); code != 200 || !strings.Contains(fmt.Sprint(out["tenants"]), "source:file") {
		t.Fatalf("the list: %d %v, want demo as the file's", code, out)
	}
	if code, out := s.do(t, adminKey, "PUT", "/v1/tenants/beta", `{"source":"file"}`); code != 400 || out["field"] != "source" {
		t.Fatalf("a body naming its source: %d %v, want 400 naming source", code, out)
	}
	// beta (stored, default tier free) gets premium and an override of
	// models: its limits say so, as its checks enforce.
	if code, out := s.do(t, adminKey, "PUT", "/v1/tenants/beta", `{"tier":"premium","overrides":{"models":{"limit":7}}}`); code != 200 {
		t.Fatal(code, out)
	}
	limits := func(tenant, key string) map[string]map[string]any {
		t.Helper()
		code, out := s.do(t, key, "GET", "/v1/tenants/"+tenant+"/limits", "")
		if code != 200 {
			t.Fatalf("%s's limits: %d %v", tenant, code, out)
		}
		byName := map[string]map[string]any{}
		for _, l := range out["limits"].([]any) {
			m := l.(map[string]any)
			byName[m["name"].(string)] = m
		}
		return byName
	}
	for _, tc := range []struct {
		tenant, key, policy string
		limit               float64
		from                string
	}{
		{"beta", s.beta, "chat", 100, "tier"},
		{"beta", s.beta, "models", 7, "tenant"},
		{"beta", adminKey, "costs", 20, "policy"},
		{"acme", adminKey, "chat", 500, "file"}, // stored acme, the file's override still applies
		{"demo", adminKey, "chat", 20, "policy"},
	} {
		if l := limits(tc.tenant, tc.key)[tc.policy]; l["limit"] != tc.limit || l["from"] != tc.from {
			t.Errorf("%s's %s: %v, want %v from %s", tc.tenant, tc.policy, l, tc.limit, tc.from)
		}
	}
	// What the limits say is what a check enforces.
	code, out = s.do(t, s.beta, "POST", "/v1/check", `{"endpoint":"models","key":{"user":"u"}}`)
	if code != 200 || out["limit"] != float64(7) {
		t.Errorf("beta's models check: %d %v, want a limit of 7", code, out)
	}
	if code, _ := s.do(t, s.beta, "GET", "/v1/tenants/acme/limits", ""); code != 403 {
		t.Errorf("beta reading acme's limits: %d, want 403", code)
	}
	if code, _ := s.do(t, adminKey, "GET", "/v1/tenants/nobody/limits", ""); code != 404 {
		t.Errorf("limits of a tenant nobody knows: %d, want 404", code)
	}
}

// A named check's errors name the request's own fields: its key parts
// (key) and its hits, not the inline checks it has none of.
func TestNamedCheckErrorsNameItsFields(t *testing.T) {
	s := newService(t)
	long := strings.Repeat("u", 2000)
	for body, want := range map[string]string{
		`{"endpoint":"chat","key":{"user":"` + long + `"}}`:       "key",
		`{"endpoint":"chat","key":{"user":"bob"},"hits":1000000}`: "hits",
	} {
		code, out := s.do(t, s.acme, "POST", "/v1/check", body)
		if code != 400 || out["field"] != want || strings.Contains(fmt.Sprint(out["message"]), "checks[") {
			t.Errorf("%.60s: %d %v, want 400 naming %s", body, code, out, want)
		}
	}
}
