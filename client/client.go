// Package client is a Go client of a sluice server's decisions: checks of
// inline policies (Check, which implements sluice.Limiter), checks of the
// policies configured on the server by endpoint or name (CheckNamed,
// CheckEndpoint), concurrency leases (AcquireLease, RenewLease,
// ReleaseLease) and fair shares of upstream quotas (Acquire).
//
// A service can so limit in process (with engine.Engine) or through a
// shared sluice server with the same code, for instance the same httplimit
// middleware, and the same answers: when the server cannot be reached, or
// answers that it cannot decide, the fail modes decide, as the engine's do
// when its store fails. Over a limit is a result with Allowed false (the
// server's 429), never an error. A caller's context that is cancelled, or
// whose deadline passes, before the answer comes ends every call with
// ctx.Err() (errors.Is context.Canceled or context.DeadlineExceeded), as
// x/time/rate's Wait does: the caller gave up, so no fail mode decides.
// Other errors are *sluice.Error, with the kind
// of the server's status (sluice.KindOf: KindInvalid for 400,
// KindUnauthorized 401, KindForbidden 403, KindNotFound 404, KindConflict
// 409, KindUnavailable 503) and the field it named (sluice.FieldOf).
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
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
	base     string
	key      string
	httpc    *http.Client
	now      func() time.Time
	log      *slog.Logger
	failMode sluice.FailMode
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
	// FailMode decides the checks and leases of configured policies that
	// the server gives no decision for: it cannot be reached, or a proxy
	// in front answers 502, 503 or 504. Their own fail modes are the
	// server's, out of the client's reach; the server applies them when
	// its store fails (and answers 503 for those that fail closed, which
	// the client reports as failed closed whatever this says). Inline
	// policies carry their own. Default: FailOpen.
	FailMode sluice.FailMode
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
	return &Client{base: strings.TrimRight(baseURL, "/"), key: opts.APIKey, httpc: opts.HTTPClient,
		now: opts.Now, log: opts.Logger, failMode: opts.FailMode}
}

// Check implements sluice.Limiter: it sends req's checks, with their
// policies inline, to POST /v1/check. Over the limit is a Result, not an
// error. When the server is unreachable, or answers unavailable (a store
// that failed under a fail-closed policy, a proxy's 502 or 504), each
// check's fail mode decides and the result is returned without an error,
// marked FailedOpen or FailedClosed. Other errors are the server's 4xx and
// 5xx, as *sluice.Error with the server's kind and field.
func (c *Client) Check(ctx context.Context, req sluice.Request) (sluice.Result, error) {
	const op = "client.check"
	in, err := wire.FromRequest(req)
	if err != nil {
		return sluice.Result{}, sluice.WithOp(op, err)
	}
	a, err := c.decide(ctx, op, "/v1/check", in)
	switch {
	case sluice.KindOf(err) == sluice.KindUnavailable:
		return c.failed(req, err), nil
	case err != nil:
		return sluice.Result{}, err
	}
	return a.result(op)
}

// failed answers req by its checks' fail modes, as the engine does when its
// store fails.
func (c *Client) failed(req sluice.Request, err error) sluice.Result {
	c.log.Warn("sluice server unavailable; fail modes decide", "tenant", req.Tenant, "err", err)
	return sluice.FailedResult(req, c.now())
}

// modeOf returns the fail mode of configured policies that a gave no
// decision for: closed if the server itself answered unavailable (a
// policy of its that fails closed, or a store it needs, failed, and it
// refused the request), else the client's.
func (c *Client) modeOf(a answer) sluice.FailMode {
	if a.unavailable() {
		return sluice.FailClosed
	}
	return c.failMode
}

// answer is the server's answer to a call.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// call sends in as JSON (nothing if it is nil) to the server's path with
// method, through httpc, and reads the answer, whatever its status. A
// server that cannot be reached, or whose answer cannot be read, is a
// KindUnavailable error.
func (c *Client) call(ctx context.Context, httpc *http.Client, op, method, path string, in any) (answer, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return answer{}, &sluice.Error{Op: op, Kind: sluice.KindInternal, Err: err}
		}
		body = bytes.NewReader(b)
	}
	hr, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return answer{}, &sluice.Error{Op: op, Kind: sluice.KindInvalid, Message: "bad request", Err: err}
	}
	if in != nil {
		hr.Header.Set("Content-Type", "application/json")
	}
	if c.key != "" {
		hr.Header.Set("Authorization", "Bearer "+c.key)
	}
	resp, err := httpc.Do(hr)
	if err != nil {
		return answer{}, unreached(ctx, op, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return answer{}, unreached(ctx, op, err)
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: b}, nil
}

// unreached is the error of a call whose answer did not come: the
// caller's own ctx.Err() if ctx ended (the caller gave up: no fail mode
// decides, as x/time/rate's Wait returns ctx.Err()), else err as
// KindUnavailable (the server gave no answer: the fail modes decide).
func unreached(ctx context.Context, op string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("%s: %w", op, ctxErr)
	}
	return &sluice.Error{Op: op, Kind: sluice.KindUnavailable, Err: err}
}

// decide posts in to the server's path for a decision, and returns the
// answer of one (200, or 429 for a denial), or an error: KindUnavailable
// when none came, for the fail modes to decide.
func (c *Client) decide(ctx context.Context, op, path string, in any) (answer, error) {
	a, err := c.call(ctx, c.httpc, op, http.MethodPost, path, in)
	if err != nil || a.status == http.StatusOK || a.status == http.StatusTooManyRequests {
		return a, err
	}
	return a, a.err(op)
}

// err is the error a answers: a *sluice.Error of its status's kind, with
// the field and message the server gave.
func (a answer) err(op string) error { return wire.ParseError(op, a.status, a.body) }

// unavailable reports whether a is the server's own unavailable answer
// (503 with Sluice's error body), not a proxy's.
func (a answer) unavailable() bool {
	var e wire.Error
	return a.status == http.StatusServiceUnavailable && json.Unmarshal(a.body, &e) == nil && e.Error == unavailableCode
}

// unavailableCode is the error code of the server's unavailable answers.
var unavailableCode = wire.ErrorOf(&sluice.Error{Kind: sluice.KindUnavailable}).Error

// result decodes a decision's answer.
func (a answer) result(op string) (sluice.Result, error) {
	out, err := a.checkResponse(op)
	return out.Decode(), err
}

func (a answer) checkResponse(op string) (wire.CheckResponse, error) {
	var out wire.CheckResponse
	if err := json.Unmarshal(a.body, &out); err != nil {
		return out, &sluice.Error{Op: op, Kind: sluice.KindInternal, Message: "unreadable response", Err: err}
	}
	return out, nil
}
