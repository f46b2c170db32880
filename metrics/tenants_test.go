package metrics

import (
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/engine"
)

// decide counts n allowed decisions of tenant on policy "api".
func decide(d *Decisions, tenant string, n int) {
	c := &sluice.Check{Policy: sluice.Policy{Name: "api"}}
	for range n {
		d.DecidedKey(tenant, c, 1, engine.Allowed)
	}
}

// decisionSeries is d's sluice_decisions_total series, as gather names them.
func decisionSeries(t *testing.T, d *Decisions) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for k, v := range gather(t, d) {
		if strings.HasPrefix(k, "sluice_decisions_total") {
			out[k] = v
		}
	}
	return out
}

// TestOverflowLabelNoTenant: the overflow's label is no tenant id, so a
// tenant named "other" and the tenants past the cap stay apart, and
// deleting "other" leaves the overflow's series, in the decisions' and
// the gateway's metrics.
func TestOverflowLabelNoTenant(t *testing.T) {
	if sluice.ValidID(overflow) {
		t.Fatalf("the overflow label %q is a valid tenant id", overflow)
	}
	d := NewDecisionsByTenant(nil, 2)
	decide(d, "other", 1)
	decide(d, "acme", 2)
	decide(d, "globex", 4)
	decide(d, "initech", 8)
	want := map[string]float64{
		"sluice_decisions_total{outcome=allowed,policy=api,tenant=other}":   1,
		"sluice_decisions_total{outcome=allowed,policy=api,tenant=acme}":    2,
		"sluice_decisions_total{outcome=allowed,policy=api,tenant=(other)}": 12,
	}
	if got := decisionSeries(t, d); !maps.Equal(got, want) {
		t.Errorf("decisions: %v, want %v", got, want)
	}
	d.ForgetTenant("other")
	delete(want, "sluice_decisions_total{outcome=allowed,policy=api,tenant=other}")
	if got := decisionSeries(t, d); !maps.Equal(got, want) {
		t.Errorf("decisions after other's deletion: %v, want %v", got, want)
	}

	g := NewGateway()
	g.LabelTenants(1)
	g.Connect("other", "admitted")
	g.Connect("acme", "admitted")
	g.Connect("globex", "admitted")
	got := gather(t, g)
	if got["sluice_gateway_connects_total{outcome=admitted,tenant=other}"] != 1 || got["sluice_gateway_connects_total{outcome=admitted,tenant=(other)}"] != 2 {
		t.Errorf("gateway: %v", got)
	}
	g.ForgetTenant("other")
	got = gather(t, g)
	if _, ok := got["sluice_gateway_connects_total{outcome=admitted,tenant=other}"]; ok || got["sluice_gateway_connects_total{outcome=admitted,tenant=(other)}"] != 2 {
		t.Errorf("gateway after other's deletion: %v", got)
	}
}

// TestIdleTenantLabelFreed: a tenant that has had no decision for an
// hour or more (one that never existed, say, named by an inline check)
// loses its place and its series, at a scrape or at the next tenant
// asking for a place; a tenant deciding keeps its place and its count.
func TestIdleTenantLabelFreed(t *testing.T) {
	const (
		ghost  = "sluice_decisions_total{outcome=allowed,policy=api,tenant=ghost1}"
		busy   = "sluice_decisions_total{outcome=allowed,policy=api,tenant=busy}"
		acme   = "sluice_decisions_total{outcome=allowed,policy=api,tenant=acme}"
		others = "sluice_decisions_total{outcome=allowed,policy=api,tenant=(other)}"
	)
	t.Run("scrape", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			d := NewDecisionsByTenant(nil, 2)
			decide(d, "ghost1", 1)
			for range 9 { // 3 hours, a decision each 20 minutes
				decide(d, "busy", 1)
				time.Sleep(20 * time.Minute)
				if got := decisionSeries(t, d); got[busy] == 0 {
					t.Fatalf("busy lost its place: %v", got)
				}
			}
			got := decisionSeries(t, d)
			if _, ok := got[ghost]; ok {
				t.Errorf("ghost1, idle for 3 hours, keeps its series: %v", got)
			}
			if got[busy] != 9 {
				t.Errorf("busy's count %v, want 9", got[busy])
			}
			decide(d, "acme", 1)
			if got := decisionSeries(t, d); got[acme] != 1 || got[others] != 0 {
				t.Errorf("acme did not take ghost1's place: %v", got)
			}
		})
	})
	t.Run("next label", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			d := NewDecisionsByTenant(nil, 1)
			decide(d, "ghost1", 1)
			time.Sleep(59 * time.Minute)
			decide(d, "acme", 1)
			if got := decisionSeries(t, d); got[ghost] != 1 || got[others] != 1 {
				t.Fatalf("ghost1 lost its place within the hour: %v", got)
			}
			time.Sleep(2 * time.Hour)
			decide(d, "acme", 1) // no scrape since: the label frees it
			got := decisionSeries(t, d)
			if _, ok := got[ghost]; ok || got[acme] != 1 {
				t.Errorf("acme did not take idle ghost1's place: %v", got)
			}
		})
	})
	t.Run("gateway", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			g := NewGateway()
			g.LabelTenants(1)
			g.Connect("ghost1", "admitted")
			time.Sleep(3 * time.Hour)
			g.Connect("acme", "admitted")
			got := gather(t, g)
			if _, ok := got["sluice_gateway_connects_total{outcome=admitted,tenant=ghost1}"]; ok || got["sluice_gateway_connects_total{outcome=admitted,tenant=acme}"] != 1 {
				t.Errorf("gateway: acme did not take idle ghost1's place: %v", got)
			}
		})
	})
}

// TestRequireKey: with a key, the handler answers only a request bearing
// it (401 otherwise); without one, any request.
func TestRequireKey(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(200) })
	for _, c := range []struct {
		key, auth string
		want      int
	}{
		{"", "", 200},
		{"an-admin-key", "", 401},
		{"an-admin-key", "Bearer wrong", 401},
		{"an-admin-key", "an-admin-key", 401},
		{"an-admin-key", "Bearer an-admin-key", 200},
	} {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/metrics", nil)
		if c.auth != "" {
			r.Header.Set("Authorization", c.auth)
		}
		RequireKey(ok, c.key).ServeHTTP(w, r)
		if w.Code != c.want {
			t.Errorf("key %q, Authorization %q: %d, want %d", c.key, c.auth, w.Code, c.want)
		}
		if w.Code == 401 && w.Header().Get("WWW-Authenticate") == "" {
			t.Errorf("key %q, Authorization %q: 401 without WWW-Authenticate", c.key, c.auth)
		}
	}
}
