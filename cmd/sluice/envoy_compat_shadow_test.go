package main

import "testing"

// TestEnvoyCompatShadowMode: with --envoy-shadow-mode the overall code is
// OK whatever the limits say, each descriptor's status is kept, and a
// request enforcement would deny consumes nothing. Without it, the same
// server configuration denies.
func TestEnvoyCompatShadowMode(t *testing.T) {
	files := map[string]string{"quotas.yaml": compatQuotas}
	for _, shadow := range []bool{true, false} {
		var args []string
		want := over
		if shadow {
			args, want = []string{"--envoy-shadow-mode"}, ok
		}
		r, _ := startCompat(t, files, args...)
		regular, s1 := desc("regular", "s"), desc("service", "service_1")
		r.ask("quotas", regular, s1)
		resp := r.ask("quotas", regular, s1)
		if resp.OverallCode != want {
			t.Errorf("shadow %v: overall %v, want %v", shadow, resp.OverallCode, want)
		}
		wantStatus(t, "service_1, over", resp.Statuses[1], over, 1, 0)
		wantStatus(t, "regular, not consumed", resp.Statuses[0], ok, 5, 4)
	}
}
