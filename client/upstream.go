package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/wire"
)

// UpstreamError is an upstream's refusal (429): its fair wait would
// exceed maxWait, or the customer's queue is full. It wraps
// fairshare.ErrShortage or fairshare.ErrQueueFull, so that
// errors.Is(err, fairshare.ErrShortage) holds for a server's refusal as
// for an embedded fairshare.Upstream's.
type UpstreamError struct {
	Upstream string
	Reason   string // wire.ReasonShortage or wire.ReasonQueueFull
	// RetryAfter is the server's estimate of the wait, to the millisecond;
	// its Retry-After header rounds it up to whole seconds.
	RetryAfter time.Duration
	err        error
}

func (e *UpstreamError) Error() string {
	return fmt.Sprintf("client.acquire: upstream %q is short (%s): retry after %v", e.Upstream, e.Reason, e.RetryAfter)
}

func (e *UpstreamError) Unwrap() error { return e.err }

// Acquire waits for a fair share of the named upstream quota for tenant's
// customer key, as POST /v1/upstreams/{upstream}/acquire: it returns how
// long the request waited once granted. cost 0 means 1; maxWait 0 means
// the upstream's own maxWait. A refusal is an *UpstreamError; other errors
// are the server's (*sluice.Error with its kind and field) or the
// network's (KindUnavailable). Cancelling ctx ends the request, and the
// server withdraws its place. The request may be held for up to maxWait:
// the HTTP client's timeout is stretched past it for this call.
func (c *Client) Acquire(ctx context.Context, upstream, tenant, key string, cost int64, maxWait time.Duration) (time.Duration, error) {
	const op = "client.acquire"
	// JSON would carry invalid UTF-8 as U+FFFD, making two keys one.
	if !utf8.ValidString(tenant) {
		return 0, &sluice.Error{Op: op, Kind: sluice.KindInvalid, Field: "tenant", Message: "is not valid UTF-8"}
	}
	if !utf8.ValidString(key) {
		return 0, &sluice.Error{Op: op, Kind: sluice.KindInvalid, Field: "key", Message: "is not valid UTF-8"}
	}
	in := wire.AcquireRequest{Tenant: tenant, Key: key, MaxWait: wire.Dur(maxWait)}
	if cost != 0 {
		in.Cost = &cost
	}
	httpc := c.httpc
	if wait := orDefault(maxWait, maxUpstreamWait); httpc.Timeout != 0 && httpc.Timeout < wait+5*time.Second {
		stretched := *httpc
		stretched.Timeout = wait + 5*time.Second
		httpc = &stretched
	}
	a, err := c.call(ctx, httpc, op, http.MethodPost, "/v1/upstreams/"+url.PathEscape(upstream)+"/acquire", in)
	if err != nil {
		return 0, err
	}
	switch a.status {
	case http.StatusOK:
		var out wire.AcquireResponse
		if err := json.Unmarshal(a.body, &out); err != nil || !out.Granted {
			return 0, &sluice.Error{Op: op, Kind: sluice.KindInternal, Message: "unreadable response", Err: err}
		}
		return out.Waited.D, nil
	case http.StatusTooManyRequests:
		var out wire.UpstreamShort
		if err := json.Unmarshal(a.body, &out); err != nil {
			return 0, &sluice.Error{Op: op, Kind: sluice.KindInternal, Message: "unreadable response", Err: err}
		}
		return 0, &UpstreamError{Upstream: out.Upstream, Reason: out.Reason, RetryAfter: time.Duration(out.RetryAfterMs) * time.Millisecond, err: out.Err()}
	}
	return 0, a.err(op)
}

// maxUpstreamWait is the longest maxWait a server allows
// (config.MaxUpstreamWait), for a request that leaves it to the server.
const maxUpstreamWait = time.Minute

// orDefault returns d, or otherwise if d is zero.
func orDefault(d, otherwise time.Duration) time.Duration {
	if d == 0 {
		return otherwise
	}
	return d
}
