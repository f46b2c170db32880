package wire

import (
	"encoding/json"
	"math"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// TestAcquireRefusalRetryAfterSaturates: the scheduler's estimate of a
// request that can never go (math.MaxInt64) and any estimate past the cap
// answer the cap, 1464 days (sluice.MaxRetryAfter), in Retry-After and
// retryAfterMs alike, never a sum that overflowed; zero and negative
// estimates answer the least, 1 s and 1 ms.
func TestAcquireRefusalRetryAfterSaturates(t *testing.T) {
	const capDur = 4 * 366 * 24 * time.Hour
	if sluice.MaxRetryAfter != capDur {
		t.Fatalf("sluice.MaxRetryAfter is %v, docs/api.md says 1464 days", sluice.MaxRetryAfter)
	}
	for _, c := range []struct {
		d      time.Duration
		header int64
		ms     int64
	}{
		{0, 1, 1},
		{-time.Second, 1, 1},
		{math.MinInt64, 1, 1},
		{time.Nanosecond, 1, 1},
		{1500 * time.Millisecond, 2, 1500},
		{capDur - time.Millisecond, int64(capDur / time.Second), int64(capDur/time.Millisecond) - 1},
		{capDur, int64(capDur / time.Second), int64(capDur / time.Millisecond)},
		{capDur + time.Nanosecond, int64(capDur / time.Second), int64(capDur / time.Millisecond)},
		{math.MaxInt64 - time.Millisecond + 2, int64(capDur / time.Second), int64(capDur / time.Millisecond)},
		{math.MaxInt64, int64(capDur / time.Second), int64(capDur / time.Millisecond)},
	} {
		rec := httptest.NewRecorder()
		WriteAcquireError(rec, "partner", sluice.ErrShortage, c.d)
		var body UpstreamShort
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatalf("%v: %v", c.d, err)
		}
		if rec.Code != 429 || body.RetryAfterMs != c.ms || rec.Header().Get("Retry-After") != strconv.FormatInt(c.header, 10) {
			t.Errorf("estimate %d ns: %d, Retry-After %s, retryAfterMs %d; want 429, %d, %d",
				int64(c.d), rec.Code, rec.Header().Get("Retry-After"), body.RetryAfterMs, c.header, c.ms)
		}
	}
}

// TestCeilSaturates: the conversions of a duration to whole seconds and
// milliseconds round up, are 0 at or below zero, and saturate at
// sluice.MaxRetryAfter rather than overflow.
func TestCeilSaturates(t *testing.T) {
	const capDur = 4 * 366 * 24 * time.Hour
	for _, c := range []struct {
		d     time.Duration
		s, ms int64
	}{
		{0, 0, 0},
		{-1, 0, 0},
		{math.MinInt64, 0, 0},
		{1, 1, 1},
		{time.Second, 1, 1000},
		{time.Second + 1, 2, 1001},
		{capDur, int64(capDur / time.Second), int64(capDur / time.Millisecond)},
		{math.MaxInt64, int64(capDur / time.Second), int64(capDur / time.Millisecond)},
	} {
		if s := CeilSeconds(c.d); s != c.s {
			t.Errorf("CeilSeconds(%d) = %d, want %d", int64(c.d), s, c.s)
		}
		if d := FromDecision(sluice.Decision{RetryAfter: c.d}); d.RetryAfter != c.s || d.RetryAfterMs != c.ms {
			t.Errorf("FromDecision(RetryAfter %d): retryAfter %d, retryAfterMs %d; want %d, %d", int64(c.d), d.RetryAfter, d.RetryAfterMs, c.s, c.ms)
		}
	}
}
