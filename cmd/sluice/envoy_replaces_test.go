package main

import (
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// wantReset checks that a status's duration until reset is the end of its
// fixed window of w seconds, aligned to the Unix epoch as
// envoyproxy/ratelimit aligns it, as the server saw the time between
// before and after.
func wantReset(t *testing.T, what string, st *rlspb.RateLimitResponse_DescriptorStatus, w int64, before, after time.Time) {
	t.Helper()
	hi, lo := w-before.Unix()%w, w-after.Unix()%w
	if got := st.GetDurationUntilReset().GetSeconds(); lo > hi || got < lo || got > hi {
		t.Errorf("%s: %ds until reset, want %d to %d, the end of the window of %ds", what, got, lo, hi, w)
	}
}

// TestEnvoyReplacedBan drives a running sluice serve, in both modes, with
// envoyproxy/ratelimit's "banned, then overridden" pattern
// (testdata/envoy-replaces): a blocked address's 0 limit, replaced by name
// by a support ticket's limit of 3 an hour, admits three requests carrying
// a ticket and denies the fourth, the ticket's limit counted and enforced;
// without a ticket the address is denied. The other descriptors of a
// request a 0 limit denies report the end of their window until reset
// (all-or-nothing, counting nothing; per descriptor, counted, as
// envoyproxy/ratelimit counts them), and a weekly ban the end of its week.
func TestEnvoyReplacedBan(t *testing.T) {
	for _, perDescriptor := range []bool{false, true} {
		t.Run(map[bool]string{false: "all-or-nothing", true: "per descriptor"}[perDescriptor], func(t *testing.T) {
			t.Parallel()
			grpcAddr := freeAddr(t)
			args := []string{"--store", "memory", "--grpc-addr", grpcAddr, "--envoy-config", "testdata/envoy-replaces"}
			if perDescriptor {
				args = append(args, "--envoy-per-descriptor")
			}
			start(t, args...)
			r := dialRLS(t, grpcAddr)
			banned, weekly := desc("source_ip", "203.0.113.9"), desc("source_ip", "198.51.100.7")
			routeLeft := uint32(50)
			if perDescriptor {
				routeLeft = 49
			}
			// The counters are the hour's: start away from its end.
			if left := time.Until(time.Now().Truncate(time.Hour).Add(time.Hour)); left < 20*time.Second {
				time.Sleep(left + 100*time.Millisecond)
			}
			before := time.Now()
			ticket := desc("support_ticket", "T-1")
			for i := range uint32(3) {
				resp := r.ask("tollgate", banned, ticket)
				if resp.OverallCode != ok {
					t.Errorf("request %d with a ticket: %v, want OK", i+1, resp.OverallCode)
				}
				wantStatus(t, "the replaced block", resp.Statuses[0], ok, 0, 0)
				wantStatus(t, "the ticket", resp.Statuses[1], ok, 3, 2-i)
			}
			resp := r.ask("tollgate", banned, ticket)
			if resp.OverallCode != over {
				t.Errorf("fourth request with a ticket: %v, want OVER_LIMIT: the ticket's limit is 3", resp.OverallCode)
			}
			wantStatus(t, "fourth, the ticket", resp.Statuses[1], over, 3, 0)
			resp = r.ask("tollgate", banned)
			if resp.OverallCode != over {
				t.Errorf("without a ticket: %v, want OVER_LIMIT", resp.OverallCode)
			}
			resp = r.ask("tollgate", banned, desc("route", "/r"))
			after := time.Now()
			wantStatus(t, "blocked, the route", resp.Statuses[1], ok, 50, routeLeft)
			wantReset(t, "blocked, the route", resp.Statuses[1], 3600, before, after)
			wantReset(t, "the block", resp.Statuses[0], 3600, before, after)
			before = time.Now()
			resp = r.ask("tollgate", weekly, desc("route", "/w"))
			after = time.Now()
			wantStatus(t, "the weekly ban", resp.Statuses[0], over, 0, 0)
			wantReset(t, "the weekly ban", resp.Statuses[0], 7*24*3600, before, after)
			wantReset(t, "the weekly ban's route", resp.Statuses[1], 3600, before, after)
		})
	}
}
