package wire

import (
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// setHeaders is WriteRateLimitHeaders by Header.Set, as it was first written: the
// reference that WriteRateLimitHeaders must equal.
func setHeaders(h http.Header, res sluice.Result, policies []sluice.Policy, now time.Time) {
	var pol, rl strings.Builder
	for i, d := range res.Decisions {
		if policies[i].Shadow {
			continue
		}
		if pol.Len() > 0 {
			pol.WriteString(", ")
			rl.WriteString(", ")
		}
		pol.WriteString(`"` + d.Policy + `";q=` + strconv.FormatInt(d.Limit, 10))
		if w := windowSeconds(&policies[i], now); w > 0 {
			pol.WriteString(";w=" + strconv.FormatInt(w, 10))
		}
		rl.WriteString(`"` + d.Policy + `";r=` + strconv.FormatInt(d.Remaining, 10) + ";t=" + strconv.FormatInt(CeilSeconds(d.ResetAt.Sub(now)), 10))
	}
	h.Set("RateLimit-Policy", pol.String())
	h.Set("RateLimit", rl.String())
	d := res.Decision
	h.Set("X-RateLimit-Limit", strconv.FormatInt(d.Limit, 10))
	h.Set("X-RateLimit-Remaining", strconv.FormatInt(d.Remaining, 10))
	h.Set("X-RateLimit-Reset", strconv.FormatInt(CeilUnix(d.ResetAt), 10))
	if !res.Allowed {
		h.Set("Retry-After", strconv.FormatInt(CeilSeconds(d.RetryAfter), 10))
	}
}

// TestWriteRateLimitHeadersAsSet: WriteRateLimitHeaders sets what Header.Set would, over
// headers already there, for every kind of policy and outcome.
func TestWriteRateLimitHeadersAsSet(t *testing.T) {
	now := time.Date(2026, 2, 10, 12, 0, 0, 500, time.UTC)
	fw := sluice.Policy{Name: "fw", Algorithm: sluice.FixedWindow, Limit: 10, Window: time.Minute}
	conc := sluice.Policy{Name: "conc", Algorithm: sluice.Concurrency, Limit: 4}
	month := sluice.Policy{Name: "month", Algorithm: sluice.Quota, Limit: 1000, Calendar: sluice.Month}
	shadow := sluice.Policy{Name: "shadow", Algorithm: sluice.TokenBucket, Limit: 5, Window: 1500 * time.Millisecond, Shadow: true}
	dec := func(p sluice.Policy, allowed bool, remaining int64, reset time.Duration) sluice.Decision {
		return sluice.Decision{Policy: p.Name, Allowed: allowed, Limit: p.Limit, Remaining: remaining, ResetAt: now.Add(reset), RetryAfter: reset / 2}
	}
	long := make([]sluice.Policy, 20)
	longRes := sluice.Result{Allowed: true}
	for i := range long {
		long[i] = sluice.Policy{Name: "a-rather-long-policy-name-" + strconv.Itoa(i), Algorithm: sluice.SlidingWindow, Limit: 1 << 40, Window: 24 * time.Hour}
		longRes.Decisions = append(longRes.Decisions, dec(long[i], true, 1<<39, time.Hour))
	}
	longRes.Decision = longRes.Decisions[3]
	for _, c := range []struct {
		res      sluice.Result
		policies []sluice.Policy
	}{
		{sluice.Result{Allowed: true, Decision: dec(fw, true, 9, 30*time.Second), Decisions: []sluice.Decision{dec(fw, true, 9, 30*time.Second)}}, []sluice.Policy{fw}},
		{sluice.Result{Decision: dec(fw, false, 0, 1500*time.Millisecond), Decisions: []sluice.Decision{dec(fw, false, 0, 1500*time.Millisecond), dec(conc, true, 3, 0), dec(month, true, -1, 400*time.Hour)}}, []sluice.Policy{fw, conc, month}},
		{sluice.Result{Allowed: true, Decision: dec(shadow, false, 0, time.Second), Decisions: []sluice.Decision{dec(shadow, false, 0, time.Second)}}, []sluice.Policy{shadow}},
		{sluice.Result{Decision: dec(conc, false, 0, -time.Second), Decisions: []sluice.Decision{dec(shadow, true, 1, time.Second), dec(conc, false, 0, -time.Second)}}, []sluice.Policy{shadow, conc}},
		{sluice.Result{Allowed: true}, nil},
		{longRes, long},
	} {
		want, got := http.Header{}, http.Header{}
		for _, h := range []http.Header{want, got} {
			h.Set("Retry-After", "99")
			h.Add("Ratelimit", "old")
			h.Set("Content-Type", "application/json")
		}
		setHeaders(want, c.res, c.policies, now)
		WriteRateLimitHeaders(got, c.res, c.policies, now)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("WriteRateLimitHeaders:\n%v\nHeader.Set:\n%v", got, want)
		}
	}
}
