package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
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
// network's (KindUnavailable). Cancelling ctx ends the request with
// ctx.Err(), and the server withdraws its place. The request may be held for up to maxWait:
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

// ProxyCall names a proxied call's customer, cost and wait, as Acquire's
// arguments do: Tenant may be empty with a tenant's key; Cost 0 means 1;
// MaxWait 0 the upstream's own.
type ProxyCall struct {
	Tenant, Key string
	Cost        int64
	MaxWait     time.Duration
}

// Proxy has the server send a call to the named upstream when the
// customer's turn comes (ANY /v1/upstreams/{upstream}/proxy/{path}), so
// that the upstream's rate holds where calls are sent. r is the call: its
// method, its URL's path (relative to the upstream's base, without a
// leading '/') and query, its headers (only a safe set is forwarded) and
// its body. The upstream's answer is returned as it is, whatever its
// status; the caller closes its body. A refusal before the call is sent
// is an *UpstreamError, as Acquire's (or with reason wire.ReasonBusy, when
// too many calls are in flight); the server's own failures (the upstream
// unreachable, slow past its timeout, or a send the server could not
// start in time, which is safe to retry) and its other errors are
// *sluice.Error. The HTTP client's timeout is stretched past the wait and
// the upstream's default timeout for this call; ctx bounds it.
func (c *Client) Proxy(ctx context.Context, upstream string, call ProxyCall, r *http.Request) (*http.Response, error) {
	const op = "client.proxy"
	if r.URL.IsAbs() || r.URL.Host != "" || strings.HasPrefix(r.URL.Path, "/") {
		return nil, &sluice.Error{Op: op, Kind: sluice.KindInvalid, Field: "path", Message: "must be relative to the upstream's base"}
	}
	u := c.base + "/v1/upstreams/" + url.PathEscape(upstream) + "/proxy/" + r.URL.EscapedPath()
	if r.URL.RawQuery != "" {
		u += "?" + r.URL.RawQuery
	}
	hr, err := http.NewRequestWithContext(ctx, r.Method, u, r.Body)
	if err != nil {
		return nil, &sluice.Error{Op: op, Kind: sluice.KindInvalid, Message: "bad request", Err: err}
	}
	hr.Header = r.Header.Clone()
	if hr.Header == nil {
		hr.Header = http.Header{}
	}
	hr.ContentLength = r.ContentLength
	for k, v := range map[string]string{wire.HeaderTenant: call.Tenant, wire.HeaderKey: call.Key} {
		if v != "" {
			hr.Header.Set(k, v)
		}
	}
	if call.Cost != 0 {
		hr.Header.Set(wire.HeaderCost, strconv.FormatInt(call.Cost, 10))
	}
	if call.MaxWait != 0 {
		hr.Header.Set(wire.HeaderMaxWait, call.MaxWait.String())
	}
	if c.key != "" {
		hr.Header.Set("Authorization", "Bearer "+c.key)
	}
	httpc := c.httpc
	if wait := orDefault(call.MaxWait, maxUpstreamWait) + 35*time.Second; httpc.Timeout != 0 && httpc.Timeout < wait {
		stretched := *httpc
		stretched.Timeout = wait
		httpc = &stretched
	}
	resp, err := httpc.Do(hr)
	if err != nil {
		return nil, unreached(ctx, op, err)
	}
	if resp.Header.Get(wire.HeaderGrantedAt) != "" && resp.Header.Get(wire.HeaderProxyError) == "" {
		return resp, nil // the upstream's answer
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, unreached(ctx, op, err)
	}
	if resp.StatusCode == http.StatusTooManyRequests {
		var out wire.UpstreamShort
		if err := json.Unmarshal(b, &out); err == nil && out.Error == wire.UpstreamShortCode {
			return nil, &UpstreamError{Upstream: out.Upstream, Reason: out.Reason, RetryAfter: time.Duration(out.RetryAfterMs) * time.Millisecond, err: out.Err()}
		}
	}
	if code := resp.Header.Get(wire.HeaderProxyError); code != "" {
		var out wire.ProxyFailure
		_ = json.Unmarshal(b, &out)
		return nil, &sluice.Error{Op: op, Kind: sluice.KindUnavailable, Field: "upstream", Message: code + ": " + out.Message}
	}
	return nil, answer{status: resp.StatusCode, header: resp.Header, body: b}.err(op)
}
