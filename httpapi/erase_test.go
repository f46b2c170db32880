package httpapi

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestErase: the admin erases a tenant's key's counters, and nothing of
// another tenant's key of the same value; a tenant's key may erase none,
// not even its own tenant's (an erase would lift the operator's limits);
// bad input names its field; the audit trail records the erase by the
// key's part names, never the key nor a hash of it (which a tenant could
// reverse by trying values).
func TestErase(t *testing.T) {
	s := newService(t)
	remaining := func(key, user string) string {
		t.Helper()
		resp := s.request(t, key, "POST", "/v1/check", `{"endpoint":"models","key":{"user":"`+user+`"}}`)
		resp.Body.Close()
		return resp.Header.Get("X-RateLimit-Remaining")
	}
	for range 3 {
		remaining(s.beta, "mallory")
		remaining(s.acme, "mallory")
	}
	erase := `{"parts":{"user":"mallory"}}`
	for _, key := range []string{s.acme, s.beta} {
		if code, out := s.do(t, key, "POST", "/v1/tenants/beta/erase", erase); code != 403 {
			t.Errorf("a tenant's key erasing beta's key: %d %v, want 403", code, out)
		}
	}
	if code, out := s.do(t, "", "POST", "/v1/tenants/beta/erase", erase); code != 401 {
		t.Errorf("no key: %d %v, want 401", code, out)
	}
	for body, field := range map[string]string{
		`{}`:                              "parts",
		`{"parts":{"nobody":"x"}}`:        "parts",
		`{"key":"user=x","keyValue":"x"}`: "parts",
		`{"inline":[{"name":"a","algorithm":"fixed_window"}]}`:               "inline",
		`{"keyValue":"x","inline":[{"name":"","algorithm":"fixed_window"}]}`: "inline[0].name",
	} {
		if code, out := s.do(t, adminKey, "POST", "/v1/tenants/beta/erase", body); code != 400 || out["field"] != field {
			t.Errorf("erase %s: %d %v, want 400 naming %s", body, code, out, field)
		}
	}
	if r := remaining(s.beta, "mallory"); r != "6" {
		t.Fatalf("refused erases changed the count: %s remaining, want 6", r)
	}
	code, out := s.do(t, adminKey, "POST", "/v1/tenants/beta/erase", erase)
	if code != 200 || out["counters"] != float64(1) || out["keyCount"] != float64(1) || jsonOf(t, out["partNames"]) != `["user"]` || out["keys"] != nil {
		t.Fatalf("the admin erases beta's mallory: %d %v, want 200, one counter, one key of part user, and no trace of it", code, out)
	}
	if r := remaining(s.beta, "mallory"); r != "9" {
		t.Errorf("after the erase: %s remaining, want a full limit's 9", r)
	}
	if r := remaining(s.acme, "mallory"); r != "46" {
		t.Errorf("acme's mallory after beta's erase: %s remaining, want 46", r)
	}
	_, audit := s.do(t, adminKey, "GET", "/v1/tenants/beta/audit", "")
	if e := audit["entries"].([]any)[0].(map[string]any); e["action"] != "erase" || strings.Contains(jsonOf(t, e), "mallory") || strings.Contains(jsonOf(t, e), "sha256") {
		t.Errorf("the trail's last entry: %v, want the erase, without the key or a hash of it", e)
	}
	if code, out := s.do(t, adminKey, "POST", "/v1/tenants/acme/erase", erase); code != 200 || out["counters"] != float64(1) {
		t.Errorf("the admin erases acme's mallory: %d %v", code, out)
	}
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
