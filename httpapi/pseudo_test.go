package httpapi

import (
	"context"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/pseudo"
	"github.com/sluicehq/sluice/tenancy"
)

// TestUpstreamPseudonymised: under pseudonymised keys, an upstream
// caller's key waits, and is listed, as its pseudonym.
func TestUpstreamPseudonymised(t *testing.T) {
	k, err := pseudo.New([]byte("0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	s := newUpstreamServiceWith(t, upstreamsYAML, tenancy.Options{Pseudonyms: k})
	if code, out := s.do(t, s.acme, "POST", "/v1/upstreams/held/acquire", `{"key":"alice@example.com"}`); code != 200 {
		t.Fatalf("first: %d %v", code, out)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := s.hold(t, ctx, s.acme, "/v1/upstreams/held/acquire", `{"key":"alice@example.com"}`)
	defer func() { cancel(); <-done }()
	st := s.waitState(t, "held", "acme/alice to wait", func(st map[string]any) bool { return waiting(st) == 1 })
	q := st["queues"].([]any)[0].(map[string]any)
	if want := k.Value("acme", "", "alice@example.com"); q["key"] != want || strings.Contains(jsonOf(t, st), "alice") {
		t.Errorf("queue %v: want the key %s, no raw key in %v", q, want, st)
	}
}
