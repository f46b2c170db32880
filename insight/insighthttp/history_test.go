package insighthttp

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice/peer"
	"github.com/sluicehq/sluice/store/memstore"
)

// TestHistoryCountsEveryRefusal: a key boxed by its penalty is refused
// 429 without its policy deciding; the history's top tenants count those
// refusals as denials, as the answers' refused kinds name them, and a
// tenant sees its own minutes alone.
func TestHistoryCountsEveryRefusal(t *testing.T) {
	s := newService(t)
	login := `{"tenant":"acme","policies":["login-per-ip"],"key":{"ip":"192.0.2.1"}}`
	refused := 0
	for range 20 { // 5 a minute, boxed after 3 denials
		if resp := s.request(t, adminKey, "POST", "/v1/check", login); resp.StatusCode == http.StatusTooManyRequests {
			refused++
			resp.Body.Close()
		} else {
			resp.Body.Close()
		}
	}
	s.do(t, adminKey, "POST", "/v1/check", `{"tenant":"beta","policies":["login-per-ip"],"key":{"ip":"192.0.2.9"}}`)
	if refused != 15 {
		t.Fatalf("%d refused of 20, want 15", refused)
	}
	code, out := s.do(t, adminKey, "GET", "/v1/insight/history?minutes=60", "")
	if code != 200 {
		t.Fatalf("history: %d %v", code, out)
	}
	if got := fmt.Sprintf("%v %v %v %v", out["refused"], out["admitted"], out["kept"], out["step"]); got != "[denied penalised failed_closed] [allowed shadow_denied failed_open] memory 60" {
		t.Errorf("refused, admitted, kept and step: %s", got)
	}
	if got := fmt.Sprint(out["topTenants"]); got != "[map[decisions:20 denied:15 tenant:acme] map[decisions:1 denied:0 tenant:beta]]" {
		t.Errorf("top tenants: %s", got)
	}
	// An hour later the minute is still there, summed from the history.
	s.clock.t = s.clock.t.Add(59 * time.Minute)
	if _, out := s.do(t, adminKey, "GET", "/v1/insight/history?minutes=60", ""); fmt.Sprint(out["topTenants"]) != "[map[decisions:20 denied:15 tenant:acme] map[decisions:1 denied:0 tenant:beta]]" {
		t.Errorf("top tenants 59 minutes later: %v", out["topTenants"])
	}
	code, out = s.do(t, s.beta, "GET", "/v1/tenants/beta/insight/history?minutes=60", "")
	if one, _ := out["tenant"].(map[string]any); code != 200 || one["name"] != "beta" || len(one["points"].([]any)) != 1 || out["topTenants"] != nil || out["tenants"] != nil {
		t.Errorf("beta's own history: %d %v", code, out)
	}
	for _, path := range []string{"/v1/insight/history", "/v1/tenants/acme/insight/history"} {
		if code, _ := s.do(t, s.beta, "GET", path, ""); code != 403 {
			t.Errorf("beta: GET %s: %d, want 403", path, code)
		}
	}
	if code, _ := s.do(t, adminKey, "GET", "/v1/insight/history?minutes=1441", ""); code != 400 {
		t.Errorf("1441 minutes: %d, want 400", code)
	}
}

// The node asked sums the other nodes' minutes, and ranks the top tenants
// on the sums; a tenant's history sums its own.
func TestHistorySumsTheNodes(t *testing.T) {
	tenants := &memstore.Tenants{}
	b := newInsightNode(t, tenants, Options{})
	a := newInsightNode(t, tenants, Options{Cluster: peer.NewCluster("a", nodes{b.srv.URL}, peer.NewClient(adminKey), nil)})
	for _, id := range []string{"acme", "beta"} {
		if code, out := a.do(t, adminKey, "POST", "/v1/tenants", `{"id":"`+id+`"}`); code != 201 {
			t.Fatalf("create %s: %d %v", id, code, out)
		}
	}
	check := `{"tenant":"%s","checks":[{"policy":{"name":"api","algorithm":"fixed_window","limit":2,"window":"1h"},"key":"k"}]}`
	for range 5 {
		a.do(t, adminKey, "POST", "/v1/check", sprintf(check, "acme")) // 2 allowed, 3 denied on a
	}
	for range 4 {
		b.do(t, adminKey, "POST", "/v1/check", sprintf(check, "acme")) // 2 allowed, 2 denied on b
	}
	b.do(t, adminKey, "POST", "/v1/check", sprintf(check, "beta"))
	code, out := a.do(t, adminKey, "GET", "/v1/insight/history?minutes=5", "")
	if got := fmt.Sprint(out["topTenants"]); code != 200 || got != "[map[decisions:9 denied:5 tenant:acme] map[decisions:1 denied:0 tenant:beta]]" {
		t.Errorf("the cluster's top tenants: %d %s (nodes %v, missing %v)", code, got, out["nodes"], out["missing"])
	}
	code, out = a.do(t, adminKey, "GET", "/v1/tenants/acme/insight/history?minutes=5", "")
	var allowed, denied float64
	if one, ok := out["tenant"].(map[string]any); ok {
		for _, p := range one["points"].([]any) {
			n := p.(map[string]any)["n"].([]any)
			allowed += n[0].(float64)
			denied += n[1].(float64)
		}
	}
	if code != 200 || allowed != 4 || denied != 5 {
		t.Errorf("acme's history over the nodes: %d, %v allowed, %v denied; want 4 and 5", code, allowed, denied)
	}
}
