package main

import (
	"io"
	"strings"
	"testing"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestEnvoyCompatCounting: --envoy-counting per-descriptor and reference
// decide each descriptor on its own, all-or-nothing a denied request
// consumes nothing; README example 2's sixth marketing message. Only
// reference adds the denied marketing hit, so that a read of marketing
// (its hits_addend 0) then finds it past its 5 a day.
func TestEnvoyCompatCounting(t *testing.T) {
	for _, tc := range []struct {
		counting string
		left     uint32 // to_number's, after the sixth message
		read     rlspb.RateLimitResponse_Code
	}{
		{"all-or-nothing", 95, ok},
		{"per-descriptor", 94, ok},
		{"reference", 94, over},
	} {
		t.Run(tc.counting, func(t *testing.T) {
			grpcAddr := freeAddr(t)
			start(t, "--store", "memory", "--grpc-addr", grpcAddr, "--envoy-config", "testdata/envoy", "--envoy-counting", tc.counting)
			r := dialRLS(t, grpcAddr)
			marketing, number := desc("message_type", "marketing", "to_number", "2061111111"), desc("to_number", "2061111111")
			for range 5 {
				r.ask("messaging", marketing, number)
			}
			resp := r.ask("messaging", marketing, number)
			if resp.OverallCode != over {
				t.Errorf("sixth: overall %v, want OVER_LIMIT", resp.OverallCode)
			}
			wantStatus(t, "sixth, to_number", resp.Statuses[1], ok, 100, tc.left)
			read := desc("message_type", "marketing", "to_number", "2061111111")
			read.HitsAddend = wrapperspb.UInt64(0)
			resp = r.ask("messaging", read)
			wantStatus(t, "a read of marketing", resp.Statuses[0], tc.read, 5, 0)
		})
	}
}

// TestEnvoyCompatCountingFlags: --envoy-per-descriptor is a synonym of
// --envoy-counting per-descriptor; the two giving different countings,
// or an unknown counting, are refused naming the flag.
func TestEnvoyCompatCountingFlags(t *testing.T) {
	base := []string{"--grpc-addr", "127.0.0.1:0"}
	for _, args := range [][]string{
		{"--envoy-per-descriptor", "--envoy-counting", "per-descriptor"},
		{"--envoy-counting", "reference"},
	} {
		if _, err := parseServe(append(base, args...), io.Discard, io.Discard); err != nil {
			t.Errorf("%v: %v", args, err)
		}
	}
	for _, args := range [][]string{
		{"--envoy-per-descriptor", "--envoy-counting", "reference"},
		{"--envoy-per-descriptor", "--envoy-counting", "all-or-nothing"},
		{"--envoy-counting", "per_descriptor"},
	} {
		if _, err := parseServe(append(base, args...), io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "--envoy-counting") {
			t.Errorf("%v: %v, want an error naming --envoy-counting", args, err)
		}
	}
	if _, err := parseServe([]string{"--envoy-counting", "reference"}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "--grpc-addr") {
		t.Errorf("without --grpc-addr: %v", err)
	}
}
