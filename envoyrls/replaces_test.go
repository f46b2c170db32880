package envoyrls

import (
	"context"
	"testing"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// lifted bans a client outright, lifts the ban (by replacing its rule by
// name) for requests carrying a pass, which has a limit of its own, and
// counts every path; a weekly ban, and a named limit that a pass replaces
// too, check the ends of other windows and that a replaced limit is left
// untouched.
const lifted = `
domain: gate
descriptors:
  - key: client
    value: banned
    rate_limit:
      name: client-ban
      unit: minute
      requests_per_unit: 0
  - key: client
    value: weekly
    rate_limit: {unit: week, requests_per_unit: 0}
  - key: client
    value: metered
    rate_limit:
      name: client-meter
      unit: minute
      requests_per_unit: 1
  - key: pass
    value: granted
    rate_limit:
      replaces:
        - name: client-ban
        - name: client-meter
      unit: minute
      requests_per_unit: 2
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 10}
`

func ask(t *testing.T, svc *Service, ds ...*ratelimitpb.RateLimitDescriptor) *rlspb.RateLimitResponse {
	t.Helper()
	resp, err := svc.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "gate", Descriptors: ds})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// check compares a descriptor's status with the one wanted: its code,
// the requests_per_unit of its limit (-1 for none), what is left and the
// seconds until reset.
func check(t *testing.T, what string, st *rlspb.RateLimitResponse_DescriptorStatus, code rlspb.RateLimitResponse_Code, limit int64, left uint32, reset int64) {
	t.Helper()
	got := int64(-1)
	if st.GetCurrentLimit() != nil {
		got = int64(st.GetCurrentLimit().GetRequestsPerUnit())
	}
	if st.GetCode() != code || got != limit || st.GetLimitRemaining() != left || st.GetDurationUntilReset().GetSeconds() != reset {
		t.Errorf("%s: %v limit %d, %d left, reset %ds; want %v limit %d, %d left, reset %ds",
			what, st.GetCode(), got, st.GetLimitRemaining(), st.GetDurationUntilReset().GetSeconds(), code, limit, left, reset)
	}
}

// TestReplacedBan: a descriptor whose 0 limit another descriptor of the
// same request replaces is not limited, and the replacing limit is
// counted and enforced, as envoyproxy/ratelimit's replaces: in both modes.
// A replaced limit's counters are left as they were.
func TestReplacedBan(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 30, 500_000_000, time.UTC)
	banned, pass := descriptor("client", "banned"), descriptor("pass", "granted")
	for _, perDescriptor := range []bool{false, true} {
		t.Run(map[bool]string{false: "all-or-nothing", true: "per descriptor"}[perDescriptor], func(t *testing.T) {
			svc := newService(t, lifted, now, perDescriptor)
			for i, left := range []uint32{1, 0} {
				resp := ask(t, svc, banned, pass)
				if resp.OverallCode != rlspb.RateLimitResponse_OK {
					t.Errorf("request %d with a pass: %v, want OK", i+1, resp.OverallCode)
				}
				check(t, "the replaced ban", resp.Statuses[0], rlspb.RateLimitResponse_OK, -1, 0, 0)
				check(t, "the pass", resp.Statuses[1], rlspb.RateLimitResponse_OK, 2, left, 30)
			}
			resp := ask(t, svc, banned, pass)
			if resp.OverallCode != rlspb.RateLimitResponse_OVER_LIMIT {
				t.Errorf("third request with a pass: %v, want OVER_LIMIT: the pass's limit is 2", resp.OverallCode)
			}
			check(t, "third, the pass", resp.Statuses[1], rlspb.RateLimitResponse_OVER_LIMIT, 2, 0, 30)
			resp = ask(t, svc, banned)
			if resp.OverallCode != rlspb.RateLimitResponse_OVER_LIMIT {
				t.Errorf("without a pass: %v, want OVER_LIMIT", resp.OverallCode)
			}
			check(t, "the ban, without a pass", resp.Statuses[0], rlspb.RateLimitResponse_OVER_LIMIT, 0, 0, 30)

			// A replaced limit of 1 is not consumed by requests that
			// replace it: it admits one request without a pass.
			svc = newService(t, lifted, now, perDescriptor)
			metered := descriptor("client", "metered")
			resp = ask(t, svc, metered, pass)
			check(t, "the replaced meter", resp.Statuses[0], rlspb.RateLimitResponse_OK, -1, 0, 0)
			check(t, "the pass, with the meter", resp.Statuses[1], rlspb.RateLimitResponse_OK, 2, 1, 30)
			resp = ask(t, svc, metered)
			check(t, "the meter, without a pass", resp.Statuses[0], rlspb.RateLimitResponse_OK, 1, 0, 30)
		})
	}
}

// TestBanResets: the other descriptors of a request a 0 limit denies
// report the end of their fixed window as their duration until reset, as
// envoyproxy/ratelimit does (the seconds left in the unit, counted from the
// Unix epoch), and a ban its own window's end, a week's too. All-or-nothing,
// the others are not counted; per descriptor they are, as in
// envoyproxy/ratelimit.
func TestBanResets(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 30, 500_000_000, time.UTC)
	week := int64(7 * 24 * 3600)
	weekReset := week - now.Unix()%week
	for _, perDescriptor := range []bool{false, true} {
		t.Run(map[bool]string{false: "all-or-nothing", true: "per descriptor"}[perDescriptor], func(t *testing.T) {
			svc := newService(t, lifted, now, perDescriptor)
			left := uint32(10)
			if perDescriptor {
				left = 9
			}
			resp := ask(t, svc, descriptor("client", "banned"), descriptor("path", "/a"))
			if resp.OverallCode != rlspb.RateLimitResponse_OVER_LIMIT {
				t.Errorf("banned: %v, want OVER_LIMIT", resp.OverallCode)
			}
			check(t, "the ban", resp.Statuses[0], rlspb.RateLimitResponse_OVER_LIMIT, 0, 0, 30)
			check(t, "the path", resp.Statuses[1], rlspb.RateLimitResponse_OK, 10, left, 30)
			resp = ask(t, svc, descriptor("client", "weekly"), descriptor("path", "/b"))
			check(t, "the weekly ban", resp.Statuses[0], rlspb.RateLimitResponse_OVER_LIMIT, 0, 0, weekReset)
			check(t, "the path, with the weekly ban", resp.Statuses[1], rlspb.RateLimitResponse_OK, 10, left, 30)
		})
	}
}
