package insighthttp

import (
	"fmt"
	"net/http"
	"testing"
	"time"
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
