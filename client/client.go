// Package client is a Go client of a sluice server. Client implements
// sluice.Limiter over HTTP, so that a service can limit in process (with
// engine.Engine) or through a shared sluice server with the same code, for
// instance the same httplimit middleware, and the same answers: when the
// server cannot be reached, or answers that it cannot decide, each policy's
// fail mode decides, as the engine's does when its store fails.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/wire"
)

// Client talks to a sluice server. It is safe for concurrent use.
type Client struct {
	base  string
	key   string
	httpc *http.Client
	now   func() time.Time
	log   *slog.Logger
}

var _ sluice.Limiter = (*Client)(nil)

// Options configures a Client. The zero Options are the defaults.
type Options struct {
	// APIKey is sent as "Authorization: Bearer <key>": a tenant's key or
	// the admin key. Empty for a server without authentication.
	APIKey string
	// HTTPClient makes the requests. Its timeout, or the caller's
	// context, is the decision's deadline. Default: a client with a 5s
	// timeout.
	HTTPClient *http.Client
	// Now is the clock of fail-mode decisions. Default time.Now.
	Now func() time.Time
	// Logger is told when the fail modes decide. Default: discard.
	Logger *slog.Logger
}

// New returns a Client of the server at baseURL, such as
// "http://127.0.0.1:8080".
func New(baseURL string, opts Options) *Client {
	if opts.HTTPClient == nil {
		opts.HTTPClient = &http.Client{Timeout: 5 * time.Second}
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Client{base: strings.TrimRight(baseURL, "/"), key: opts.APIKey, httpc: opts.HTTPClient, now: opts.Now, log: opts.Logger}
}

// Check implements sluice.Limiter: it sends req's checks, with their
// policies inline, to POST /v1/check. Over the limit is a Result, not an
// error. When the server is unreachable, or answers unavailable (a store
// that failed under a fail-closed policy, a proxy's 502 or 504), each
// check's fail mode decides and the result is returned without an error,
// marked FailedOpen or FailedClosed. Other errors are the server's 4xx and
// 5xx, as *sluice.Error with the server's kind and field.
func (c *Client) Check(ctx context.Context, req sluice.Request) (sluice.Result, error) {
	in, err := wire.FromRequest(req)
	if err != nil {
		return sluice.Result{}, sluice.WithOp("client.check", err)
	}
	body, err := json.Marshal(in)
	if err != nil {
		return sluice.Result{}, err
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/v1/check", bytes.NewReader(body))
	if err != nil {
		return sluice.Result{}, err
	}
	hr.Header.Set("Content-Type", "application/json")
	if c.key != "" {
		hr.Header.Set("Authorization", "Bearer "+c.key)
	}
	resp, err := c.httpc.Do(hr)
	if err != nil {
		return c.failed(req, &sluice.Error{Op: "client.check", Kind: sluice.KindUnavailable, Err: err})
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return c.failed(req, &sluice.Error{Op: "client.check", Kind: sluice.KindUnavailable, Err: err})
	}
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusTooManyRequests {
		err := wire.ParseError("client.check", resp.StatusCode, b)
		if sluice.KindOf(err) == sluice.KindUnavailable {
			return c.failed(req, err)
		}
		return sluice.Result{}, err
	}
	var out wire.CheckResponse
	if err := json.Unmarshal(b, &out); err != nil {
		return sluice.Result{}, &sluice.Error{Op: "client.check", Kind: sluice.KindInternal, Message: "unreadable response", Err: err}
	}
	return out.Decode(), nil
}

// failed answers req by its checks' fail modes, as the engine does when its
// store fails.
func (c *Client) failed(req sluice.Request, err error) (sluice.Result, error) {
	c.log.Warn("sluice server unavailable; fail modes decide", "tenant", req.Tenant, "err", err)
	return sluice.FailedResult(req, c.now()), nil
}
