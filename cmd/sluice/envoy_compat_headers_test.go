package main

import (
	"io"
	"strings"
	"testing"
)

// TestEnvoyCompatHeaderNames: --envoy-header-limit, -remaining and -reset
// name the headers --envoy-response-headers adds, as the reference's
// LIMIT_*_HEADER settings do.
func TestEnvoyCompatHeaderNames(t *testing.T) {
	r, _ := startCompat(t, map[string]string{"quotas.yaml": compatQuotas}, "--envoy-response-headers",
		"--envoy-header-limit", "X-RateLimit-Limit", "--envoy-header-remaining", "X-RateLimit-Remaining", "--envoy-header-reset", "X-RateLimit-Reset")
	resp := r.ask("quotas", desc("regular", "h"))
	got := map[string]string{}
	for _, h := range resp.ResponseHeadersToAdd {
		got[h.Key] = h.Value
	}
	if len(got) != 3 || got["X-RateLimit-Limit"] != "5" || got["X-RateLimit-Remaining"] != "4" || got["X-RateLimit-Reset"] == "" {
		t.Errorf("headers %v, want X-RateLimit-Limit 5, X-RateLimit-Remaining 4 and X-RateLimit-Reset", got)
	}
}

// TestEnvoyCompatBadHeaderNames: a header name that is not an HTTP token
// (one that would write another header, or break the response) is refused
// at start, naming its flag, and the server does not start.
func TestEnvoyCompatBadHeaderNames(t *testing.T) {
	for _, tc := range []struct{ flag, bad string }{
		{"--envoy-header-limit", "X-Limit\r\nSet-Cookie: session=stolen"},
		{"--envoy-header-remaining", "X Remaining"},
		{"--envoy-header-reset", ""},
		{"--envoy-header-reset", "RateLimit-Limit"}, // the limit's already
	} {
		args := []string{"--grpc-addr", "127.0.0.1:0", "--envoy-response-headers", tc.flag, tc.bad}
		if _, err := parseServe(args, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("%s %q: %v, want an error naming %s", tc.flag, tc.bad, err, tc.flag)
		}
	}
	out, err := serveRefused(t, "--grpc-addr", "127.0.0.1:0", "--envoy-response-headers", "--envoy-header-limit", "X-Limit\nX-Evil: 1")
	if err == nil || !strings.Contains(out, "--envoy-header-limit") {
		t.Errorf("serve with a bad header name: %v\n%s", err, out)
	}
}
