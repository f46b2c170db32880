package envoyrls

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice"
)

func newService(t *testing.T, yaml string, now time.Time, perDescriptor bool) *Service {
	t.Helper()
	return newServiceFiles(t, []File{{Name: "test.yaml", Data: []byte(yaml)}}, now, Options{PerDescriptor: perDescriptor, Headers: DefaultHeaders})
}

func descriptor(kv ...string) *ratelimitpb.RateLimitDescriptor {
	d := &ratelimitpb.RateLimitDescriptor{}
	for i := 0; i < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitpb.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

const shadowZero = `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: s
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 0}
`

// TestBadRequests: what envoyproxy/ratelimit cannot decide is refused as
// InvalidArgument, naming the field, and consumes nothing.
func TestBadRequests(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 30, 0, time.UTC)
	svc := newService(t, shadowZero, now, false)
	ctx := context.Background()
	many := &rlspb.RateLimitRequest{Domain: "d"}
	for i := range 17 {
		many.Descriptors = append(many.Descriptors, descriptor("k", fmt.Sprint(i)))
	}
	neg := descriptor("k", "x")
	neg.IsNegativeHits = true
	unknownUnit := descriptor("k", "x")
	unknownUnit.Limit = &ratelimitpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1}
	zeroMult := descriptor("k", "x")
	zeroMult.Limit = &ratelimitpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typepb.RateLimitUnit_SECOND, UnitMultiplier: wrapperspb.UInt32(0)}
	for _, tc := range []struct {
		req  *rlspb.RateLimitRequest
		want string
	}{
		{many, "at most 16 limits"},
		{&rlspb.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitpb.RateLimitDescriptor{neg}}, "descriptors[0].is_negative_hits"},
		{&rlspb.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitpb.RateLimitDescriptor{unknownUnit}}, "descriptors[0].limit.unit"},
		{&rlspb.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitpb.RateLimitDescriptor{zeroMult}}, "descriptors[0].limit.unit_multiplier"},
		{&rlspb.RateLimitRequest{Domain: strings.Repeat("d", 200), Descriptors: []*ratelimitpb.RateLimitDescriptor{zeroMult}}, "descriptors[0].limit.unit_multiplier"},
	} {
		_, err := svc.ShouldRateLimit(ctx, tc.req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v", tc.want, err)
		}
	}
	// Nothing was consumed by the refused requests.
	resp, err := svc.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitpb.RateLimitDescriptor{descriptor("k", "0")}})
	if err != nil || resp.Statuses[0].LimitRemaining != 2 {
		t.Errorf("after refusals: %v, %v; want 2 left", resp, err)
	}
	// A domain not configured (one too long for a tenant, too) has no
	// limits, not even a request's own: OK.
	over := descriptor("k", "x")
	over.Limit = &ratelimitpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typepb.RateLimitUnit_SECOND}
	for _, domain := range []string{strings.Repeat("d", 200), "nope"} {
		resp, err := svc.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitpb.RateLimitDescriptor{over, over}})
		if err != nil || resp.OverallCode != rlspb.RateLimitResponse_OK {
			t.Errorf("domain %.10s...: %v %v, want OK", domain, resp, err)
		}
	}
}

// TestShadowAndZero: a shadow limit of 0 reports OK and denies nothing; the
// duration until reset of a fixed window is its end, in whole seconds; the
// headers are the limit nearest.
func TestShadowAndZero(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 30, 500_000_000, time.UTC)
	svc := newService(t, shadowZero, now, false)
	resp, err := svc.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "d",
		Descriptors: []*ratelimitpb.RateLimitDescriptor{descriptor("s", "1"), descriptor("k", "1")}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.OverallCode != rlspb.RateLimitResponse_OK || resp.Statuses[0].Code != rlspb.RateLimitResponse_OK {
		t.Errorf("shadow 0: %v", resp)
	}
	st := resp.Statuses[1]
	if st.LimitRemaining != 2 || st.DurationUntilReset.GetSeconds() != 30 {
		t.Errorf("k: %v, want 2 left and 30s to the minute's end", st)
	}
	got := map[string]string{}
	for _, h := range resp.ResponseHeadersToAdd {
		got[h.Key] = h.Value
	}
	if got["RateLimit-Limit"] != "0" && got["RateLimit-Limit"] != "3" || got["RateLimit-Reset"] != "30" {
		t.Errorf("headers %v", got)
	}
}

// TestOverrideNames: a request's override counts in a policy named by its
// unit and multiplier, the same name however it is built, so that an
// override's counters are one per unit and multiplier.
func TestOverrideNames(t *testing.T) {
	for _, tc := range []struct {
		unit typepb.RateLimitUnit
		mult *wrapperspb.UInt32Value
		want string
	}{
		{typepb.RateLimitUnit_SECOND, nil, "override.second.1"},
		{typepb.RateLimitUnit_MINUTE, wrapperspb.UInt32(1), "override.minute.1"},
		{typepb.RateLimitUnit_HOUR, wrapperspb.UInt32(5), "override.hour.5"},
		{typepb.RateLimitUnit_YEAR, nil, "override.year.1"},
	} {
		l, err := override(&ratelimitpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 7, Unit: tc.unit, UnitMultiplier: tc.mult})
		if err != nil {
			t.Fatal(err)
		}
		if l.Policy.Name != tc.want {
			t.Errorf("%v × %v: policy %q, want %q", tc.unit, tc.mult.GetValue(), l.Policy.Name, tc.want)
		}
		if err := l.Policy.Validate(); err != nil {
			t.Errorf("%s: %v", l.Policy.Name, err)
		}
	}
}

// failingLimiter fails every check with an error that must not reach a
// client: where its store lives, what it runs on.
type failingLimiter struct{ err error }

func (l failingLimiter) Check(context.Context, sluice.Request) (sluice.Result, error) {
	return sluice.Result{}, l.err
}

// A limiter's failure is answered by its kind (wire's one table): a
// store's, Unavailable with its message; anything else, Unavailable
// without its text, which names internals.
func TestLimiterErrorsShowNoInternals(t *testing.T) {
	c, err := parse(t, shadowZero)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		err  error
		code codes.Code
	}{
		{&sluice.Error{Kind: sluice.KindUnavailable, Message: "the store is unavailable", Err: errors.New("dial tcp 10.0.0.7:8000: secret-host")}, codes.Unavailable},
		{errors.New("panic in /srv/secret-host/engine.go:42"), codes.Unavailable},
	} {
		s := New(Options{Limiter: failingLimiter{tc.err}, Config: func() *Config { return c }})
		_, err := s.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitpb.RateLimitDescriptor{descriptor("k", "v")}})
		st, _ := status.FromError(err)
		if st.Code() != tc.code || strings.Contains(st.Message(), "secret-host") {
			t.Errorf("%v: %v %q, want %v without the internals", tc.err, st.Code(), st.Message(), tc.code)
		}
	}
}
