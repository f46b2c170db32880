package insighthttp

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/wire"
)

// The dashboard's routes: a tenant's key reads its own tenant's counts and
// heaviest keys, and nothing else; the admin reads every tenant's and
// policy's. The counts are those of the checks sent.
func TestInsightWalls(t *testing.T) {
	s := newInsightNode(t, &memstore.Tenants{}, Options{}).service
	for _, id := range []string{"acme", "beta"} {
		if code, out := s.do(t, adminKey, "POST", "/v1/tenants", `{"id":"`+id+`"}`); code != 201 {
			t.Fatalf("create %s: %d %v", id, code, out)
		}
		_, out := s.do(t, adminKey, "POST", "/v1/tenants/"+id+"/keys", `{"name":"test"}`)
		if id == "acme" {
			s.acme = out["token"].(string)
		} else {
			s.beta = out["token"].(string)
		}
	}
	check := `{"checks":[{"policy":{"name":"api","algorithm":"fixed_window","limit":2,"window":"1m"},"key":"%s"}]}`
	for range 5 {
		s.do(t, s.acme, "POST", "/v1/check", sprintf(check, "abuser"))
	}
	s.do(t, s.beta, "POST", "/v1/check", sprintf(check, "b1"))

	code, out := s.do(t, s.acme, "GET", "/v1/tenants/acme/insight?seconds=120", "")
	if code != 200 {
		t.Fatalf("acme's insight: %d %v", code, out)
	}
	var allowed, denied float64
	for _, p := range out["tenant"].(map[string]any)["points"].([]any) {
		n := p.(map[string]any)["n"].([]any)
		allowed += n[0].(float64)
		denied += n[1].(float64)
	}
	if allowed != 2 || denied != 3 {
		t.Errorf("acme: %v allowed, %v denied over 120s, want 2 and 3", allowed, denied)
	}
	code, out = s.do(t, s.acme, "GET", "/v1/tenants/acme/insight/top?policy=api", "")
	if d := out["denials"].([]any); code != 200 || len(d) != 1 || d[0].(map[string]any)["key"] != "abuser" {
		t.Errorf("acme's top: %d %v", code, out)
	}
	for _, path := range []string{"/v1/tenants/beta/insight", "/v1/tenants/beta/insight/top?policy=api", "/v1/insight", "/v1/insight/top?policy=api"} {
		if code, out := s.do(t, s.acme, "GET", path, ""); code != 403 {
			t.Errorf("acme: GET %s: %d %v, want 403", path, code, out)
		}
	}
	code, out = s.do(t, adminKey, "GET", "/v1/insight", "")
	if code != 200 || len(out["tenants"].([]any)) != 2 || len(out["policies"].([]any)) != 1 {
		t.Errorf("admin's insight: %d %v", code, out)
	}
	code, out = s.do(t, adminKey, "GET", "/v1/insight/top?policy=api&n=5", "")
	if code != 200 || len(out["hits"].([]any)) != 2 {
		t.Errorf("admin's top: %d %v", code, out)
	}
	for _, q := range []string{"?seconds=0", "?seconds=x", "?seconds=3601"} {
		if code, out := s.do(t, adminKey, "GET", "/v1/insight"+q, ""); code != 400 || out["field"] != "seconds" {
			t.Errorf("GET /v1/insight%s: %d %v, want 400 naming seconds", q, code, out)
		}
	}
	if code, out := s.do(t, adminKey, "GET", "/v1/insight/top?policy=bad%20name", ""); code != 400 || out["field"] != "policy" {
		t.Errorf("a bad policy: %d %v", code, out)
	}
}

func sprintf(format string, a ...any) string { return fmt.Sprintf(format, a...) }

// The stream sends the last second's counts every second, the tenant's
// own; another tenant's stream is 403.
func TestInsightStream(t *testing.T) {
	n := newInsightNode(t, &memstore.Tenants{}, Options{})
	s, srv := n.service, n.srv
	s.do(t, adminKey, "POST", "/v1/tenants", `{"id":"acme"}`)
	s.do(t, adminKey, "POST", "/v1/tenants", `{"id":"beta"}`)
	_, out := s.do(t, adminKey, "POST", "/v1/tenants/acme/keys", `{"name":"test"}`)
	acme := out["token"].(string)
	if code, _ := s.do(t, acme, "GET", "/v1/tenants/beta/insight/stream", ""); code != 403 {
		t.Errorf("acme streaming beta's: %d, want 403", code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/v1/tenants/acme/insight/stream", nil)
	req.Header.Set("Authorization", "Bearer "+acme)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream" {
		t.Fatalf("%d %s", resp.StatusCode, ct)
	}
	sc := bufio.NewScanner(resp.Body)
	events := 0
	for sc.Scan() && events < 2 {
		line := sc.Text()
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			var got []map[string]any
			if err := json.Unmarshal([]byte(data), &got); err != nil || len(got) != 1 || got[0]["name"] != "acme" {
				t.Fatalf("event %q: %v", data, err)
			}
			events++
		}
	}
	if events != 2 {
		t.Errorf("%d events before the deadline, want 2", events)
	}
	// At a server's shutdown the stream ends.
	n.ins.CloseStreams()
	ended := make(chan struct{})
	go func() {
		for sc.Scan() {
		}
		close(ended)
	}()
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Error("the stream went on after CloseStreams")
	}
}

// Trying a limit on the sampled traffic of a policy: what a stricter
// limit would have denied, and for whom; a tenant tries on its own keys
// only; a bad policy is 400 naming the field; a policy never seen is 404.
func TestInsightTry(t *testing.T) {
	s := newInsightNode(t, &memstore.Tenants{}, Options{}).service
	for _, id := range []string{"acme", "beta"} {
		s.do(t, adminKey, "POST", "/v1/tenants", `{"id":"`+id+`"}`)
	}
	_, out := s.do(t, adminKey, "POST", "/v1/tenants/acme/keys", `{"name":"test"}`)
	acme := out["token"].(string)
	check := `{"tenant":"%s","checks":[{"policy":{"name":"api","algorithm":"fixed_window","limit":100,"window":"1m"},"key":"%s"}]}`
	for range 10 {
		s.do(t, adminKey, "POST", "/v1/check", sprintf(check, "acme", "a1"))
	}
	for range 4 {
		s.do(t, adminKey, "POST", "/v1/check", sprintf(check, "beta", "b1"))
	}
	try := `{"policy":{"name":"api","algorithm":"fixed_window","limit":3,"window":"1m"}}`
	code, out := s.do(t, adminKey, "POST", "/v1/insight/try", try)
	if code != 200 || out["denied"] != 8.0 || out["stdErr"] != 0.0 || out["events"] != 14.0 {
		t.Fatalf("admin's try: %d %v, want 7 of acme's and 1 of beta's denied, exactly", code, out)
	}
	if who := out["who"].([]any); len(who) != 2 || who[0].(map[string]any)["key"] != "a1" {
		t.Errorf("who: %v", who)
	}
	code, out = s.do(t, acme, "POST", "/v1/tenants/acme/insight/try", try)
	if code != 200 || out["denied"] != 7.0 || len(out["who"].([]any)) != 1 {
		t.Errorf("acme's try: %d %v, want its own 7 only", code, out)
	}
	for _, path := range []string{"/v1/insight/try", "/v1/tenants/beta/insight/try"} {
		if code, _ := s.do(t, acme, "POST", path, try); code != 403 {
			t.Errorf("acme: POST %s: %d, want 403", path, code)
		}
	}
	if code, out := s.do(t, adminKey, "POST", "/v1/insight/try", `{"policy":{"name":"api","algorithm":"fixed_window","limit":0,"window":"1m"}}`); code != 400 || out["field"] != "policy.limit" {
		t.Errorf("a bad limit: %d %v", code, out)
	}
	if code, _ := s.do(t, adminKey, "POST", "/v1/insight/try", `{"policy":{"name":"other","algorithm":"fixed_window","limit":3,"window":"1m"}}`); code != 404 {
		t.Errorf("a policy never seen: %d, want 404", code)
	}
}

// TestTryWrongKindOfBody: a try's body that is not an object says so, as
// every route's (httpapi's TestWrongKindOfBody).
func TestTryWrongKindOfBody(t *testing.T) {
	err := wire.DecodeStrict([]byte(`[]`), new(tryRequest), "")
	if got, want := fmt.Sprint(err), "body must be a JSON object, got array"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
}

// TestTopKeyState: a heaviest key's state, asked for, is its counter's and
// penalty box's now: those of the tenant as created last (its epoch), not
// an empty counter of no tenant's.
func TestTopKeyState(t *testing.T) {
	s := newService(t)
	s.tenantKey(t, "zeta")
	login := `{"tenant":"zeta","policies":["login-per-ip"],"key":{"ip":"192.0.2.1"}}`
	for range 9 { // 5 a minute, boxed after 3 denials
		s.do(t, adminKey, "POST", "/v1/check", login)
	}
	code, out := s.do(t, adminKey, "GET", "/v1/tenants/zeta/insight/top?policy=login-per-ip&state=1", "")
	if code != 200 || len(out["hits"].([]any)) != 1 {
		t.Fatalf("zeta's top: %d %v", code, out)
	}
	k := out["hits"].([]any)[0].(map[string]any)
	st, _ := k["state"].(map[string]any)
	if k["key"] != "ip=192.0.2.1" || st == nil || st["remaining"] != 0.0 || k["penaltyUntil"] == nil {
		t.Fatalf("the key's state: %v; want ip=192.0.2.1 with none remaining and a penalty", k)
	}
}
