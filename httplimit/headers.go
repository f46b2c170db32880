package httplimit

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/wire"
)

// WriteHeaders writes a result's headers:
//
//   - RateLimit-Policy and RateLimit, IETF draft-ietf-httpapi-ratelimit-headers
//     (-08 and later): Structured Field Lists (RFC 9651) with one item per
//     policy, `"name";q=<limit>;w=<window seconds>` and
//     `"name";r=<remaining>;t=<seconds to reset>`;
//   - the legacy X-RateLimit-Limit, -Remaining and -Reset (epoch seconds, as
//     GitHub) of the reported decision;
//   - on a denial, Retry-After in whole seconds, rounded up.
//
// Policy names are plain (sluice.ValidPolicyName), so they are valid
// sf-strings as they are.
//
// policies[i] is the policy of res.Decisions[i].
func WriteHeaders(h http.Header, res sluice.Result, policies []sluice.Policy, now time.Time) {
	var pol, rl strings.Builder
	for i, d := range res.Decisions {
		if policies[i].Shadow {
			continue // on trial: not a limit clients are held to
		}
		if pol.Len() > 0 {
			pol.WriteString(", ")
			rl.WriteString(", ")
		}
		pol.WriteString(`"` + d.Policy + `";q=` + strconv.FormatInt(d.Limit, 10))
		if w := windowSeconds(&policies[i], now); w > 0 {
			pol.WriteString(";w=" + strconv.FormatInt(w, 10))
		}
		rl.WriteString(`"` + d.Policy + `";r=` + strconv.FormatInt(d.Remaining, 10) + ";t=" + strconv.FormatInt(wire.CeilSeconds(d.ResetAt.Sub(now)), 10))
	}
	h.Set("RateLimit-Policy", pol.String())
	h.Set("RateLimit", rl.String())
	d := res.Decision
	h.Set("X-RateLimit-Limit", strconv.FormatInt(d.Limit, 10))
	h.Set("X-RateLimit-Remaining", strconv.FormatInt(d.Remaining, 10))
	h.Set("X-RateLimit-Reset", strconv.FormatInt(wire.CeilUnix(d.ResetAt), 10))
	if !res.Allowed {
		h.Set("Retry-After", strconv.FormatInt(wire.CeilSeconds(d.RetryAfter), 10))
	}
}

// windowSeconds is the policy's window for the w parameter: its window, a
// calendar month's length, or 0 (no window) for concurrency.
func windowSeconds(p *sluice.Policy, now time.Time) int64 {
	switch {
	case p.Algorithm == sluice.Concurrency:
		return 0
	case p.Algorithm == sluice.Quota && p.Calendar == sluice.Month:
		t := now.UTC()
		start := time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
		return int64(start.AddDate(0, 1, 0).Sub(start) / time.Second)
	}
	return wire.CeilSeconds(p.Window)
}
