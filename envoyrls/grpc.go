package envoyrls

import (
	"context"
	"crypto/subtle"
	"runtime"
	"strings"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
)

// ServiceName is the gRPC service's full name, as health checks name it.
const ServiceName = "envoy.service.ratelimit.v3.RateLimitService"

// ReferenceHealthName is the service name envoyproxy/ratelimit's gRPC
// health answers for: a Deployment of it whose probes or Envoy's health
// checks ask for it keeps working when Sluice takes its place.
const ReferenceHealthName = "ratelimit"

// NewServer returns a gRPC server offering svc, gRPC health checking
// (grpc.health.v1, serving for "", ServiceName and ReferenceHealthName) and
// server reflection.
// If token is not empty, every call but the health checks, streams
// (reflection) included, must carry the metadata "authorization: Bearer
// <token>" (Envoy's grpc_service initial_metadata). Set the health to
// NOT_SERVING with Shutdown before stopping the server.
func NewServer(svc *Service, token string, opts ...grpc.ServerOption) (*grpc.Server, *health.Server) {
	if token != "" {
		unary, stream := bearer(token)
		opts = append(opts, grpc.ChainUnaryInterceptor(unary), grpc.ChainStreamInterceptor(stream))
	}
	// Calls run on a few long-lived goroutines, one a core, whose stacks
	// have grown already, not on a new goroutine each whose stack grows by
	// copying: a tenth of a call's CPU. When every worker is busy, a call
	// gets a goroutine of its own; a caller whose decisions wait for a
	// store passes more, with grpc.NumStreamWorkers in opts.
	opts = append([]grpc.ServerOption{grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0))), grpc.SharedWriteBuffer(true)}, opts...)
	gs := grpc.NewServer(opts...)
	rlspb.RegisterRateLimitServiceServer(gs, svc)
	hs := health.NewServer()
	SetHealth(hs, true)
	healthpb.RegisterHealthServer(gs, hs)
	reflection.Register(gs)
	return gs, hs
}

// SetHealth sets the health NewServer answers for, for "", ServiceName
// and ReferenceHealthName: SERVING, or NOT_SERVING (a server that needs a
// configuration it does not have yet). After hs.Shutdown, nothing changes
// it any more.
func SetHealth(hs *health.Server, serving bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if serving {
		st = healthpb.HealthCheckResponse_SERVING
	}
	for _, name := range []string{"", ServiceName, ReferenceHealthName} {
		hs.SetServingStatus(name, st)
	}
}

// bearer refuses calls without the token, but health checks: unary calls
// and streams (server reflection, health's Watch) alike, so that nothing
// but health answers without it.
func bearer(token string) (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor) {
	want := []byte("Bearer " + token)
	check := func(ctx context.Context, method string) error {
		if strings.HasPrefix(method, "/grpc.health.v1.Health/") {
			return nil
		}
		md, _ := metadata.FromIncomingContext(ctx)
		for _, v := range md.Get("authorization") {
			if subtle.ConstantTimeCompare([]byte(v), want) == 1 {
				return nil
			}
		}
		return status.Error(codes.Unauthenticated, "authorization: a bearer token is required (--grpc-token-file)")
	}
	unary := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
		if err := check(ctx, info.FullMethod); err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
	stream := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, next grpc.StreamHandler) error {
		if err := check(ss.Context(), info.FullMethod); err != nil {
			return err
		}
		return next(srv, ss)
	}
	return unary, stream
}
