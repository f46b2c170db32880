package main

import (
	"io"
	"strings"
	"testing"
)

// TestEnvoyCompatCounting: --envoy-counting per-descriptor and reference
// decide each descriptor on its own (reference burns nothing until the
// engine can), all-or-nothing a denied request consumes nothing; README
// example 2's sixth marketing message.
func TestEnvoyCompatCounting(t *testing.T) {
	for _, tc := range []struct {
		counting string
		left     uint32 // to_number's, after the sixth message
	}{
		{"all-or-nothing", 95},
		{"per-descriptor", 94},
		{"reference", 94},
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
