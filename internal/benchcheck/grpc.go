package benchcheck

import (
	"context"
	"fmt"
	"strconv"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

// grpcWorkers returns one decider per worker, each on its own gRPC
// connection (50 workers are 50 clients, as over HTTP), asking
// ShouldRateLimit of domain "bench" about descriptor ("user", "user-N").
func grpcWorkers(c Config) ([]decideFunc, func(), error) {
	var conns []*grpc.ClientConn
	closeAll := func() {
		for _, cc := range conns {
			cc.Close()
		}
	}
	var ws []decideFunc
	for range c.Workers {
		cc, err := grpc.NewClient(c.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("bench: --grpc: %w", err)
		}
		conns = append(conns, cc)
		client := rlspb.NewRateLimitServiceClient(cc)
		ws = append(ws, func(ctx context.Context, k int) (bool, error) {
			d := &ratelimitpb.RateLimitDescriptor{Entries: []*ratelimitpb.RateLimitDescriptor_Entry{{Key: "user", Value: "user-" + strconv.Itoa(k)}}}
			if c.GRPCLimit > 0 {
				d.Limit = &ratelimitpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: uint32(c.GRPCLimit), Unit: typepb.RateLimitUnit_MINUTE}
			}
			// A call in flight when the run ends finishes: gRPC's own
			// deadline would fail it a moment before the run's context
			// says it is done, counting an error that is not one.
			ctx = context.WithoutCancel(ctx)
			if c.APIKey != "" {
				ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+c.APIKey)
			}
			resp, err := client.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimitpb.RateLimitDescriptor{d}})
			if err != nil {
				return false, err
			}
			return resp.OverallCode == rlspb.RateLimitResponse_OK, nil
		})
	}
	return ws, closeAll, nil
}
