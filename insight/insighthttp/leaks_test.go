package insighthttp

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/httpapi"
)

// A tenant sees its own things only: its counts and heaviest keys, these
// without the sketch's bounds and errors (of every tenant's traffic), and
// no answer of its names the nodes' addresses or the operator behind a
// block (httpapi's TestTenantSeesItsOwnOnly has its blocks and audit
// trail).
func TestTenantSeesItsOwnInsightOnly(t *testing.T) {
	s := newService(t)
	for range 3 {
		s.do(t, s.beta, "POST", "/v1/check", `{"endpoint":"chat","key":{"user":"beta-user"}}`)
	}
	s.do(t, s.acme, "POST", "/v1/check", `{"endpoint":"chat","key":{"user":"u1"}}`)
	block := s.request(t, adminKey, "POST", "/v1/tenants/acme/blocks", `{"policy":"chat","parts":{"user":"mallory"},"seconds":600}`, httpapi.ActorHeader, "op-alice")
	if block.Body.Close(); block.StatusCode != 201 {
		t.Fatalf("block: %d", block.StatusCode)
	}
	// seen is what key reads of path, as JSON.
	seen := func(key, path string) string {
		t.Helper()
		code, out := s.do(t, key, "GET", path, "")
		if code != 200 {
			t.Fatalf("GET %s: %d %v", path, code, out)
		}
		b, _ := json.Marshal(out)
		return string(b)
	}
	for _, path := range []string{"/v1/tenants/acme/insight", "/v1/tenants/acme/insight/top?policy=chat"} {
		got := seen(s.acme, path)
		for _, leak := range []string{"op-alice", "hitsBound", "denialsBound", `"nodes"`, "beta"} {
			if strings.Contains(got, leak) {
				t.Errorf("acme's GET %s shows %s: %s", path, leak, got)
			}
		}
	}
	if got := seen(adminKey, "/v1/insight/top?policy=chat"); !strings.Contains(got, "hitsBound") || !strings.Contains(got, `"nodes"`) {
		t.Errorf("the admin's top lost its bounds or nodes: %s", got)
	}
}

// A tenant deleted and created again is a new tenant on the insight
// routes too: its new key reads none of the old tenant's keys or counts,
// even on a node that was not told of the deletion.
func TestInsightTenantCreatedAgain(t *testing.T) {
	s := newService(t)
	for range 3 {
		s.do(t, s.acme, "POST", "/v1/check", `{"endpoint":"chat","key":{"user":"old-owner@example.com"}}`)
	}
	s.clock.t = s.clock.t.Add(5 * time.Second)
	if code, _ := s.do(t, adminKey, "DELETE", "/v1/tenants/acme", ""); code != 200 && code != 204 {
		t.Fatalf("delete: %d", code)
	}
	s.clock.t = s.clock.t.Add(time.Second)
	s.do(t, adminKey, "POST", "/v1/tenants", `{"id":"acme"}`)
	_, out := s.do(t, adminKey, "POST", "/v1/tenants/acme/keys", `{"name":"new owner"}`)
	key := out["token"].(string)
	for _, path := range []string{"/v1/tenants/acme/insight/top?policy=chat", "/v1/tenants/acme/insight?seconds=60", "/v1/tenants/acme/insight/history?minutes=60"} {
		for _, who := range []string{key, adminKey} {
			resp := s.request(t, who, "GET", path, "")
			var v any
			json.NewDecoder(resp.Body).Decode(&v)
			resp.Body.Close()
			b, _ := json.Marshal(v)
			if resp.StatusCode != 200 || strings.Contains(string(b), "old-owner") || strings.Contains(string(b), `"n":[3`) {
				t.Errorf("the new acme's GET %s: %d %s", path, resp.StatusCode, b)
			}
		}
	}
	code, out := s.do(t, key, "POST", "/v1/tenants/acme/insight/try", `{"policy":{"name":"chat","algorithm":"fixed_window","limit":1,"window":"1m"}}`)
	if code == 200 && out["events"] != 0.0 {
		t.Errorf("the new acme's try replays the old one's traffic: %v", out)
	}
}
