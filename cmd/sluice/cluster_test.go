package main

import (
	"fmt"
	"testing"
)

// TestDashboardSumsTheCluster: two nodes on one DynamoDB table; checks sent
// to each; either node's dashboard routes answer for both: the counts per
// second, a tenant's, and the heaviest keys, summed, naming the nodes.
func TestDashboardSumsTheCluster(t *testing.T) {
	ps := nodes(t, 2)
	check := `{"tenant":"acme","checks":[{"key":"%s","policy":{"name":"api","algorithm":"fixed_window","limit":1000,"window":"1h"}}]}`
	sent := map[int]int{0: 30, 1: 20}
	for i, n := range sent {
		for j := range n {
			user := fmt.Sprintf("u%d", j%3)
			if i == 1 {
				user = "heavy" // 20 here, the most of any key over the cluster, but none on node 0
			}
			if code, out := ps[i].call(t, "", "POST", "/v1/check", fmt.Sprintf(check, user)); code != 200 {
				t.Fatalf("check on node %d: %d %v", i, code, out)
			}
		}
	}
	allowed := func(pts []any) (sum float64) {
		for _, p := range pts {
			sum += p.(map[string]any)["n"].([]any)[0].(float64)
		}
		return sum
	}
	for i, p := range ps {
		var out map[string]any
		waitFor(t, fmt.Sprintf("node %d's dashboard to list both nodes", i), func() bool {
			var code int
			code, out = p.call(t, "", "GET", "/v1/insight?seconds=300", "")
			return code == 200 && len(out["nodes"].([]any)) == 2
		})
		var acme map[string]any
		for _, s := range out["tenants"].([]any) {
			if s.(map[string]any)["name"] == "acme" {
				acme = s.(map[string]any)
			}
		}
		if acme != nil && len(acme["points"].([]any)) != 300 {
			t.Errorf("node %d: acme's series has %d points, want one per second of 300", i, len(acme["points"].([]any)))
		}
		if acme == nil || allowed(acme["points"].([]any)) != 50 {
			t.Errorf("node %d: acme's allowed over the cluster = %v, want 50 (30 + 20): %v", i, acme, out["nodes"])
		}
		if len(out["store"].([]any)) == 0 {
			t.Errorf("node %d: no store latencies", i)
		}
		code, tn := p.call(t, "", "GET", "/v1/tenants/acme/insight?seconds=300", "")
		if code != 200 || allowed(tn["tenant"].(map[string]any)["points"].([]any)) != 50 {
			t.Errorf("node %d: the tenant's route: %d %v, want 50 allowed", i, code, tn)
		}
		code, top := p.call(t, "", "GET", "/v1/insight/top?policy=api&n=1", "")
		hits := top["hits"].([]any)
		if code != 200 || len(hits) != 1 || hits[0].(map[string]any)["key"] != "heavy" || hits[0].(map[string]any)["count"] != 20.0 {
			t.Errorf("node %d: the cluster's heaviest key: %d %v, want heavy with 20", i, code, top)
		}
	}
}
