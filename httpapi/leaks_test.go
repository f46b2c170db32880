package httpapi

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// A tenant sees its own things only: the operator's name behind a block
// (in its blocks and its audit trail) reads "admin", and no answer of its
// names the nodes' addresses (its insight: insighthttp's
// TestTenantSeesItsOwnInsightOnly).
func TestTenantSeesItsOwnOnly(t *testing.T) {
	s := newService(t)
	for range 3 {
		s.do(t, s.beta, "POST", "/v1/check", `{"endpoint":"chat","key":{"user":"beta-user"}}`)
	}
	s.do(t, s.acme, "POST", "/v1/check", `{"endpoint":"chat","key":{"user":"u1"}}`)
	req, _ := http.NewRequest("POST", s.srv.URL+"/v1/tenants/acme/blocks", strings.NewReader(`{"policy":"chat","parts":{"user":"mallory"},"seconds":600}`))
	req.Header.Set("Authorization", "Bearer "+adminKey)
	req.Header.Set(ActorHeader, "op-alice")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 201 {
		t.Fatalf("block: %d", resp.StatusCode)
	}
	seen := func(key, path string) string {
		t.Helper()
		resp := s.request(t, key, "GET", path, "")
		defer resp.Body.Close()
		var v any
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d %v", path, resp.StatusCode, err)
		}
		b, _ := json.Marshal(v)
		return string(b)
	}
	for _, path := range []string{"/v1/tenants/acme/blocks", "/v1/tenants/acme/audit"} {
		got := seen(s.acme, path)
		for _, leak := range []string{"op-alice", "hitsBound", "denialsBound", `"nodes"`, "beta"} {
			if strings.Contains(got, leak) {
				t.Errorf("acme's GET %s shows %s: %s", path, leak, got)
			}
		}
	}
	if got := seen(adminKey, "/v1/tenants/acme/audit"); !strings.Contains(got, "op-alice") {
		t.Errorf("the admin's audit trail lost the operator's name: %s", got)
	}
}
