package wire

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
)

// AcquireRequest is the body of POST /v1/upstreams/{name}/acquire: a
// customer (the tenant, which a tenant's key may omit, and a key within
// it), the request's cost (absent means 1) and the longest it will wait
// (absent means the upstream's maxWait).
type AcquireRequest struct {
	Tenant  string    `json:"tenant,omitempty"`
	Key     string    `json:"key"`
	Cost    *int64    `json:"cost,omitempty"`
	MaxWait *Duration `json:"maxWait,omitempty"`
}

// AcquireResponse is the body of a granted acquire (200): how long the
// request waited for its turn, and when it was granted on the server's
// clock (the upstream's rate bounds these times).
type AcquireResponse struct {
	Granted   bool      `json:"granted"`
	Waited    Duration  `json:"waited"`
	WaitedMs  int64     `json:"waitedMs"`
	GrantedAt time.Time `json:"grantedAt"`
}

// FromGrant returns the answer of a request granted at after waited.
func FromGrant(at time.Time, waited time.Duration) AcquireResponse {
	return AcquireResponse{Granted: true, Waited: Duration{D: waited}, WaitedMs: waited.Milliseconds(), GrantedAt: at.UTC()}
}

// The reasons of a refused acquire (429).
const (
	ReasonShortage  = "shortage"   // the fair wait would exceed maxWait
	ReasonQueueFull = "queue full" // the customer's queue is full
)

// UpstreamShort is the body of a refused acquire (429), beside a
// Retry-After header in whole seconds, at least 1.
type UpstreamShort struct {
	Error        string `json:"error"`
	Message      string `json:"message"`
	Upstream     string `json:"upstream"`
	Reason       string `json:"reason"`
	RetryAfterMs int64  `json:"retryAfterMs"`
}

// UpstreamShortCode is UpstreamShort's error code.
const UpstreamShortCode = "upstream_quota_short"

// WriteAcquireError answers an upstream's refusal (sluice.ErrShortage,
// ErrQueueFull, which package fairshare returns) with 429, Retry-After and
// an UpstreamShort body; a closed upstream (a server shutting down) as
// unavailable; any other error by its kind (WriteError). retryAfter is the
// refused request's estimated wait, which saturates at
// sluice.MaxRetryAfter (a request that can never go is estimated at
// math.MaxInt64).
func WriteAcquireError(w http.ResponseWriter, upstream string, err error, retryAfter time.Duration) {
	var reason, msg string
	switch {
	case errors.Is(err, sluice.ErrShortage):
		reason, msg = ReasonShortage, "the upstream quota is short: the fair wait would exceed maxWait"
	case errors.Is(err, sluice.ErrQueueFull):
		reason, msg = ReasonQueueFull, "the upstream quota is short: this customer's queue is full"
	case errors.Is(err, sluice.ErrUpstreamClosed):
		WriteError(w, &sluice.Error{Kind: sluice.KindUnavailable, Message: fmt.Sprintf("upstream %q is closed: the server is shutting down", upstream)})
		return
	default:
		WriteError(w, err)
		return
	}
	ms := max(CeilMillis(retryAfter), 1)
	w.Header().Set("Retry-After", strconv.FormatInt(max(CeilSeconds(retryAfter), 1), 10))
	WriteJSON(w, http.StatusTooManyRequests, UpstreamShort{
		Error: UpstreamShortCode, Message: msg, Upstream: upstream, Reason: reason, RetryAfterMs: ms,
	})
}

// Err returns the refusal s describes (sluice.ErrShortage or
// ErrQueueFull, which fairshare's errors are), for a client: a busy proxy
// is ErrQueueFull, an unknown reason a shortage.
func (s UpstreamShort) Err() error {
	if s.Reason == ReasonQueueFull || s.Reason == ReasonBusy {
		return sluice.ErrQueueFull
	}
	return sluice.ErrShortage
}
