package main

import (
	"context"
	"testing"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/store/dynamostore/dynamotest"
)

// TestEnvoyCompatReferenceErrors: with --envoy-reference-errors, an empty
// domain or descriptor list is the reference's Unknown error and text, and
// a store that fails (DynamoDB behind a proxy that fails every write) an
// Unknown error, for Envoy's failure_mode_deny to decide; without it, the
// limit's fail mode answers (open: OK).
func TestEnvoyCompatReferenceErrors(t *testing.T) {
	px := dynamotest.NewFaultProxy(t, dynamotest.Get(t).Endpoint)
	dir := compatDir(t, map[string]string{"quotas.yaml": compatQuotas})
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	good := &rlspb.RateLimitRequest{Domain: "quotas", Descriptors: []*ratelimitpb.RateLimitDescriptor{desc("regular", "e")}}
	for _, ref := range []bool{true, false} {
		grpcAddr := freeAddr(t)
		args := []string{"--grpc-addr", grpcAddr, "--envoy-config", dir}
		if ref {
			args = append(args, "--envoy-reference-errors")
		}
		nodesVia(t, 1, px.Endpoint, args...)
		r := dialRLS(t, grpcAddr)
		px.SetFaultRate(0)
		if resp := r.askReq(good); resp.OverallCode != ok {
			t.Fatalf("reference errors %v, the store up: %v", ref, resp)
		}
		for _, tc := range []struct {
			req  *rlspb.RateLimitRequest
			code codes.Code
			text string
		}{
			{&rlspb.RateLimitRequest{Descriptors: good.Descriptors}, codes.Unknown, "rate limit domain must not be empty"},
			{&rlspb.RateLimitRequest{Domain: "quotas"}, codes.Unknown, "rate limit descriptor list must not be empty"},
		} {
			_, err := r.c.ShouldRateLimit(ctx, tc.req)
			st, _ := status.FromError(err)
			if ref && (st.Code() != tc.code || st.Message() != tc.text) || !ref && st.Code() != codes.InvalidArgument {
				t.Errorf("reference errors %v, %v: %v", ref, tc.req, err)
			}
		}
		px.SetFaultRate(1)
		resp, err := r.c.ShouldRateLimit(ctx, good)
		switch st, _ := status.FromError(err); {
		case ref && st.Code() != codes.Unknown:
			t.Errorf("the store failing, reference errors: %v, %v; want Unknown", resp, err)
		case !ref && (err != nil || resp.OverallCode != ok):
			t.Errorf("the store failing: %v, %v; want OK by the fail mode (open)", resp, err)
		}
	}
}
