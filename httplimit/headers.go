package httplimit

import (
	"net/http"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/wire"
)

// WriteHeaders writes a result's RateLimit, X-RateLimit-* and Retry-After
// headers, as wire.WriteRateLimitHeaders does: one writer of them for the
// server and the middleware. policies[i] is the policy of res.Decisions[i].
func WriteHeaders(h http.Header, res sluice.Result, policies []sluice.Policy, now time.Time) {
	wire.WriteRateLimitHeaders(h, res, policies, now)
}

// keep deletes from h the rate-limit headers that s leaves out.
func (s HeaderSet) keep(h http.Header) {
	switch s {
	case HeadersIETF:
		h.Del("X-RateLimit-Limit")
		h.Del("X-RateLimit-Remaining")
		h.Del("X-RateLimit-Reset")
	case HeadersX:
		h.Del("RateLimit")
		h.Del("RateLimit-Policy")
	}
}
