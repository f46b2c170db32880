package wire

import (
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
)

// WriteRateLimitHeaders writes a result's headers:
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
func WriteRateLimitHeaders(h http.Header, res sluice.Result, policies []sluice.Policy, now time.Time) {
	// Every value is cut from one string, in one slice of values: two
	// allocations for a decision's headers, as Header.Set would set them.
	var buf [256]byte
	b := buf[:0]
	first := true
	for i, d := range res.Decisions {
		if policies[i].Shadow {
			continue // on trial: not a limit clients are held to
		}
		if !first {
			b = append(b, ", "...)
		}
		first = false
		b = append(b, '"')
		b = append(b, d.Policy...)
		b = append(b, `";q=`...)
		b = strconv.AppendInt(b, d.Limit, 10)
		if w := windowSeconds(&policies[i], now); w > 0 {
			b = strconv.AppendInt(append(b, ";w="...), w, 10)
		}
	}
	ends := [6]int{len(b)}
	first = true
	for i, d := range res.Decisions {
		if policies[i].Shadow {
			continue
		}
		if !first {
			b = append(b, ", "...)
		}
		first = false
		b = append(b, '"')
		b = append(b, d.Policy...)
		b = strconv.AppendInt(append(b, `";r=`...), d.Remaining, 10)
		b = strconv.AppendInt(append(b, ";t="...), CeilSeconds(d.ResetAt.Sub(now)), 10)
	}
	ends[1] = len(b)
	d := res.Decision
	b = strconv.AppendInt(b, d.Limit, 10)
	ends[2] = len(b)
	b = strconv.AppendInt(b, d.Remaining, 10)
	ends[3] = len(b)
	b = strconv.AppendInt(b, CeilUnix(d.ResetAt), 10)
	ends[4] = len(b)
	n := 5
	if !res.Allowed {
		b = strconv.AppendInt(b, CeilSeconds(d.RetryAfter), 10)
		ends[5] = len(b)
		n = 6
	}
	all := string(b)
	vals := make([]string, n)
	for i, start := 0, 0; i < n; i++ {
		vals[i] = all[start:ends[i]]
		start = ends[i]
	}
	for i, name := range headerNames[:n] {
		h[name] = vals[i : i+1 : i+1]
	}
}

// headerNames are WriteHeaders' headers, in their canonical form (as
// Header.Set would key them), in the order of its values.
var headerNames = [6]string{"Ratelimit-Policy", "Ratelimit", "X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset", "Retry-After"}

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
	return CeilSeconds(p.Window)
}
