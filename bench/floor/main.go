// Command floor is the floor of `sluice bench`'s CPU per decision: a
// net/http server that answers POST /v1/check with a constant decision and
// does nothing else, and reports its CPU time at /metrics as
// process_cpu_seconds_total. What sluice serve spends above it is Sluice's.
//
// Given a second address, it also serves Envoy's ShouldRateLimit there
// over grpc-go with a constant OK and nothing else: the floor of
// `sluice bench --grpc`, the part of a gRPC decision that is grpc-go's.
//
//	go run ./floor 127.0.0.1:18095 [127.0.0.1:18096] &
//	sluice bench --url http://127.0.0.1:18095 [--grpc 127.0.0.1:18096]
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"runtime"
	"syscall"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
)

const decision = `{"allowed":true,"policy":"bench","limit":1000000,"remaining":999999,"resetAt":1795256460,"retryAfter":0,"retryAfterMs":0,"decisions":[{"policy":"bench","allowed":true,"limit":1000000,"remaining":999999,"resetAt":1795256460,"retryAfter":0,"retryAfterMs":0}]}` + "\n"

func main() {
	if len(os.Args) != 2 && len(os.Args) != 3 {
		log.Fatal("usage: floor HTTP-ADDR [GRPC-ADDR]")
	}
	m := http.NewServeMux()
	m.HandleFunc("POST /v1/check", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, decision)
	})
	m.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		fmt.Fprintf(w, "process_cpu_seconds_total %f\n", float64(ru.Utime.Nano()+ru.Stime.Nano())/1e9)
	})
	if len(os.Args) == 3 {
		ln, err := net.Listen("tcp", os.Args[2])
		if err != nil {
			log.Fatal(err)
		}
		// The server options of sluice serve's gRPC listener, so that the
		// difference is the decision's.
		gs := grpc.NewServer(grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0))), grpc.SharedWriteBuffer(true))
		rlspb.RegisterRateLimitServiceServer(gs, okService{})
		go func() { log.Fatal(gs.Serve(ln)) }()
	}
	srv := &http.Server{Addr: os.Args[1], Handler: m, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}

// okService answers every ShouldRateLimit with OK and one status, as a
// decision under a generous limit would.
type okService struct {
	rlspb.UnimplementedRateLimitServiceServer
}

func (okService) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	return &rlspb.RateLimitResponse{
		OverallCode: rlspb.RateLimitResponse_OK,
		Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{{
			Code:               rlspb.RateLimitResponse_OK,
			CurrentLimit:       &rlspb.RateLimitResponse_RateLimit{RequestsPerUnit: 1000000, Unit: rlspb.RateLimitResponse_RateLimit_MINUTE},
			LimitRemaining:     999999,
			DurationUntilReset: durationpb.New(30 * time.Second),
		}},
	}, nil
}
