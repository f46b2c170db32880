package httpapi

import (
	"fmt"
	"net/http/httptest"
	"testing"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/insight"
	"github.com/sluicehq/sluice/store/memstore"
)

// The dashboard's routes: a tenant's key reads its own tenant's counts and
// heaviest keys, and nothing else; the admin reads every tenant's and
// policy's. The counts are those of the checks sent.
func TestInsightWalls(t *testing.T) {
	rec := insight.NewRecorder(insight.RecorderOptions{})
	st := memstore.New(memstore.Options{})
	defer st.Close()
	h := New(Options{
		Limiter:  engine.New(st, engine.Options{Observer: rec}),
		Tenants:  &memstore.Tenants{},
		AdminKey: adminKey,
		Insight:  rec,
	})
	srv := httptest.NewServer(h)
	defer srv.Close()
	s := &service{srv: srv}
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
