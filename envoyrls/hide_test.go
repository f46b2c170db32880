package envoyrls

import (
	"context"
	"testing"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice"
)

// keyLimiter records the keys of the checks it is asked, and admits.
type keyLimiter struct{ keys []string }

func (l *keyLimiter) Check(_ context.Context, req sluice.Request) (sluice.Result, error) {
	res := sluice.Result{Allowed: true, Decisions: make([]sluice.Decision, len(req.Checks))}
	for i, c := range req.Checks {
		l.keys = append(l.keys, req.Tenant+" "+c.Key)
		res.Decisions[i] = sluice.Decision{Allowed: true, Limit: 3, Remaining: 2}
	}
	return res, nil
}

// TestHide: with Hide, rules match a descriptor's values as sent, and the
// counter's key holds each value's pseudonym, made of its tenant and its
// entry's name.
func TestHide(t *testing.T) {
	c, err := parse(t, shadowZero)
	if err != nil {
		t.Fatal(err)
	}
	l := &keyLimiter{}
	hide := func(tenant, name, value string) string { return "~" + tenant + "/" + name + "/" + value[:1] }
	s := New(Options{Limiter: l, Config: func() *Config { return c }, Hide: hide})
	resp, err := s.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitpb.RateLimitDescriptor{descriptor("k", "alice")}})
	if err != nil || resp.GetOverallCode() != rlspb.RateLimitResponse_OK {
		t.Fatalf("ShouldRateLimit: %v %v", resp, err)
	}
	want := Tenant("d") + " k=~envoy%3Ad%2Fk%2Fa"
	if len(l.keys) != 1 || l.keys[0] != want {
		t.Errorf("checked keys %q, want [%q]", l.keys, want)
	}
}
