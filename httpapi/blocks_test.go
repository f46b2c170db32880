package httpapi

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestBlocksAndAudit: the admin blocks one key of a policy (the next
// request of that key is denied, another key's is not), lifts it, and lifts
// a penalty box's block; a tenant's key reads its blocks and trail and
// changes neither; bad input names its field and changes nothing; every
// change is in the trail, with who made it.
func TestBlocksAndAudit(t *testing.T) {
	s := newService(t)
	check := func(user string) int {
		t.Helper()
		code, _ := s.do(t, s.acme, "POST", "/v1/check", `{"endpoint":"chat","key":{"user":"`+user+`"}}`)
		return code
	}
	if check("mallory") != 200 {
		t.Fatal("mallory refused before any block")
	}
	// A tenant of the file alone, never blocked, has no blocks; a tenant
	// no one knows is not found.
	if code, out := s.do(t, adminKey, "GET", "/v1/tenants/demo/blocks", ""); code != 200 || len(out["blocks"].([]any)) != 0 {
		t.Fatalf("the file's tenant demo's blocks: %d %v, want 200 and none", code, out)
	}
	if code, out := s.do(t, adminKey, "GET", "/v1/tenants/nosuch/blocks", ""); code != 404 {
		t.Fatalf("an unknown tenant's blocks: %d %v, want 404", code, out)
	}
	req := s.request(t, adminKey, "POST", "/v1/tenants/acme/blocks", `{"policy":"chat","parts":{"user":"mallory"},"seconds":600,"reason":"scraping"}`)
	req.Body.Close()
	if req.StatusCode != 201 {
		t.Fatalf("block: %d", req.StatusCode)
	}
	if c := check("mallory"); c != 429 {
		t.Fatalf("blocked key: %d, want 429", c)
	}
	resp := s.request(t, s.acme, "POST", "/v1/check", `{"endpoint":"chat","key":{"user":"mallory"}}`)
	resp.Body.Close()
	if ra := resp.Header.Get("Retry-After"); ra != "600" {
		t.Errorf("blocked key's Retry-After %q, want 600", ra)
	}
	if check("bob") != 200 {
		t.Fatal("another key refused by mallory's block")
	}
	// A tenant reads its blocks, with the key readable, and changes none.
	code, out := s.do(t, s.acme, "GET", "/v1/tenants/acme/blocks", "")
	bs, _ := out["blocks"].([]any)
	if code != 200 || len(bs) != 1 || bs[0].(map[string]any)["label"] != "user=mallory" || bs[0].(map[string]any)["by"] != "admin" {
		t.Fatalf("acme's blocks: %d %v", code, out)
	}
	rawKey := bs[0].(map[string]any)["key"].(string)
	if rawKey != "user=mallory" {
		t.Errorf("the block's key reads %q, want user=mallory: no encoding of the server's shown", rawKey)
	}
	for _, r := range []struct{ method, path, body string }{
		{"POST", "/v1/tenants/acme/blocks", `{"policy":"chat","parts":{"user":"eve"},"seconds":60}`},
		{"DELETE", "/v1/tenants/acme/blocks?policy=chat&key=" + url.QueryEscape(rawKey), ""},
		{"GET", "/v1/tenants/beta/blocks", ""},
		{"GET", "/v1/tenants/beta/audit", ""},
	} {
		if code, out := s.do(t, s.acme, r.method, r.path, r.body); code != 403 {
			t.Errorf("acme's key: %s %s: %d %v, want 403", r.method, r.path, code, out)
		}
	}
	if check("mallory") != 429 {
		t.Fatal("a tenant's refused lift lifted the block")
	}
	// Bad input names its field and changes nothing.
	for body, field := range map[string]string{
		`{"policy":"nope","parts":{"user":"x"},"seconds":60}`:                                "policy",
		`{"policy":"chat","parts":{"user":"x"},"seconds":0}`:                                 "seconds",
		`{"policy":"chat","key":"x","parts":{"user":"x"},"seconds":60}`:                      "parts",
		`{"policy":"chat","parts":{"ip":"1.2.3.4"},"seconds":60}`:                            "parts.user",
		`{"policy":"login-per-ip","parts":{},"seconds":60}`:                                  "parts.ip",
		`{"policy":"chat","parts":{"user":"` + strings.Repeat("u", 200) + `"},"seconds":60}`: "key",
		`{"policy":"chat","seconds":60}`:                                                     "key",
		`{"policy":"chat","key":"x","seconds":60,"reason":"` + long + `"}`:                   "reason",
	} {
		if code, out := s.do(t, adminKey, "POST", "/v1/tenants/acme/blocks", body); code != 400 || out["field"] != field {
			t.Errorf("POST %s: %d %v, want 400 naming %s", body, code, out, field)
		}
	}
	if _, out := s.do(t, adminKey, "GET", "/v1/tenants/acme/blocks", ""); len(out["blocks"].([]any)) != 1 {
		t.Fatalf("bad input changed the blocks: %v", out)
	}
	// A PUT of the tenant keeps its blocks.
	if code, out := s.do(t, adminKey, "PUT", "/v1/tenants/acme", `{"overrides":{"chat":{"limit":50}}}`); code != 200 {
		t.Fatalf("put: %d %v", code, out)
	}
	if check("mallory") != 429 {
		t.Fatal("a PUT of the tenant dropped its block")
	}
	code, out = s.do(t, adminKey, "DELETE", "/v1/tenants/acme/blocks?policy=chat&key="+url.QueryEscape(rawKey), "")
	if code != 200 || out["block"] != true || out["penalty"] != false {
		t.Fatalf("lift: %d %v", code, out)
	}
	if check("mallory") != 200 {
		t.Fatal("mallory still refused after the lift")
	}

	// A penalty box's block, lifted by the admin.
	login := func() int {
		t.Helper()
		code, _ := s.do(t, s.acme, "POST", "/v1/check", `{"endpoint":"login","key":{"ip":"203.0.113.9"}}`)
		return code
	}
	for range 15 {
		login() // 5 admitted, then 10 offences: blocks of 1, 2 and 4 minutes
	}
	s.clock.t = s.clock.t.Add(125 * time.Second) // the window has room; the box holds
	if login() != 429 {
		t.Fatal("the penalty box did not hold the key")
	}
	ipKey := "\x02ip\x0b203.0.113.9" // the key's parts as a check builds them
	code, out = s.do(t, adminKey, "DELETE", "/v1/tenants/acme/blocks?policy=login-per-ip&key="+url.QueryEscape(ipKey), "")
	if code != 200 || out["block"] != false || out["penalty"] != true {
		t.Fatalf("lift of a penalty: %d %v", code, out)
	}
	if login() != 200 {
		t.Fatal("the penalty box still holds the key after the lift")
	}

	// The trail: newest first, who and what.
	code, out = s.do(t, s.acme, "GET", "/v1/tenants/acme/audit?n=10", "")
	if code != 200 {
		t.Fatalf("audit: %d %v", code, out)
	}
	var actions []string
	for _, e := range out["entries"].([]any) {
		actions = append(actions, e.(map[string]any)["action"].(string))
	}
	want := []string{"lift", "lift", "tenant.update", "block", "key.create", "tenant.create"}
	if len(actions) != len(want) {
		t.Fatalf("audit actions %v, want %v", actions, want)
	}
	for i := range want {
		if actions[i] != want[i] {
			t.Fatalf("audit actions %v, want %v", actions, want)
		}
	}
	if blocked := out["entries"].([]any)[3].(map[string]any); !strings.Contains(fmt.Sprint(blocked["after"]), "key:user=mallory") {
		t.Errorf("the block's entry shows its key as %v, want user=mallory", blocked["after"])
	}
	upd := out["entries"].([]any)[2].(map[string]any)
	if upd["actor"] != "admin" || upd["before"] == nil || upd["after"].(map[string]any)["overrides"] == nil {
		t.Errorf("tenant.update entry: %v", upd)
	}
	if code, out := s.do(t, adminKey, "GET", "/v1/tenants/acme/audit?n=0", ""); code != 400 || out["field"] != "n" {
		t.Errorf("n=0: %d %v", code, out)
	}

	// An ended block is no block: lifting it says so.
	s.do(t, adminKey, "POST", "/v1/tenants/acme/blocks", `{"policy":"chat","parts":{"user":"eve"},"seconds":1}`)
	s.clock.t = s.clock.t.Add(2 * time.Second)
	if code, out := s.do(t, adminKey, "DELETE", "/v1/tenants/acme/blocks?policy=chat&key="+url.QueryEscape("\x04user\x03eve"), ""); code != 200 || out["block"] != false {
		t.Errorf("lift of an ended block: %d %v, want block false", code, out)
	}

	// A tenant's key reads its own trail only: not the trail of an
	// earlier tenant of its id, nor the operators' names.
	req3 := s.request(t, adminKey, "PUT", "/v1/tenants/beta", `{"tier":"free"}`)
	req3.Body.Close()
	if code, _ := s.do(t, adminKey, "DELETE", "/v1/tenants/beta", ""); code != 200 {
		t.Fatal("delete beta")
	}
	s.clock.t = s.clock.t.Add(time.Second)
	s.do(t, adminKey, "POST", "/v1/tenants", `{"id":"beta"}`)
	_, key := s.do(t, adminKey, "POST", "/v1/tenants/beta/keys", `{}`)
	code, out = s.do(t, key["token"].(string), "GET", "/v1/tenants/beta/audit", "")
	if es := out["entries"].([]any); code != 200 || len(es) != 2 || es[1].(map[string]any)["action"] != "tenant.create" {
		t.Errorf("the new beta's trail: %d %v, want its own create and key only", code, out)
	}
	if _, out := s.do(t, adminKey, "GET", "/v1/tenants/beta/audit", ""); len(out["entries"].([]any)) != 6 {
		t.Errorf("the admin's trail of beta: %v, want both tenants' 6 entries", out)
	}
}

var long = strings.Repeat("x", 300)

// TestLiftByParts: a lift names its key by parts in a body, as a block
// does, and finds the block; a key both in the query and a body is
// refused.
func TestLiftByParts(t *testing.T) {
	s := newService(t)
	if code, out := s.do(t, adminKey, "POST", "/v1/tenants/acme/blocks", `{"policy":"chat","parts":{"user":"mallory"},"seconds":600}`); code != 201 {
		t.Fatalf("block: %d %v", code, out)
	}
	if code, out := s.do(t, adminKey, "DELETE", "/v1/tenants/acme/blocks?policy=chat&key=user%3Dmallory", `{"policy":"chat","parts":{"user":"mallory"}}`); code != 400 || out["field"] != "key" {
		t.Errorf("a lift with a key in the query and a body: %d %v, want 400 naming key", code, out)
	}
	code, out := s.do(t, adminKey, "DELETE", "/v1/tenants/acme/blocks", `{"policy":"chat","parts":{"user":"mallory"}}`)
	if code != 200 || out["block"] != true {
		t.Fatalf("a lift by parts: %d %v, want the block lifted", code, out)
	}
	if code, out := s.do(t, s.acme, "POST", "/v1/check", `{"endpoint":"chat","key":{"user":"mallory"}}`); code != 200 {
		t.Errorf("mallory after the lift: %d %v", code, out)
	}
}
