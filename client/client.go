// Package client is a Go client of a sluice server. Client implements
// sluice.Limiter over HTTP, so that a service can limit in process (with
// engine.Engine) or through a shared sluice server with the same code, for
// instance the same httplimit middleware.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
)

// Client talks to a sluice server. It is safe for concurrent use.
type Client struct {
	base  string
	key   string
	httpc *http.Client
}

var _ sluice.Limiter = (*Client)(nil)

// Options configures a Client. The zero Options are the defaults.
type Options struct {
	// APIKey is sent as "Authorization: Bearer <key>": a tenant's key or
	// the admin key. Empty for a server without authentication.
	APIKey string
	// HTTPClient makes the requests. Default: a client with a 5s timeout.
	HTTPClient *http.Client
}

// New returns a Client of the server at baseURL, such as
// "http://127.0.0.1:8080".
func New(baseURL string, opts Options) *Client {
	if opts.HTTPClient == nil {
		opts.HTTPClient = &http.Client{Timeout: 5 * time.Second}
	}
	return &Client{base: strings.TrimRight(baseURL, "/"), key: opts.APIKey, httpc: opts.HTTPClient}
}

// Check implements sluice.Limiter: it sends req's checks, with their
// policies inline, to POST /v1/check. Over the limit is a Result, not an
// error; errors are the server's 4xx and 5xx, as *sluice.Error with the
// server's kind and field.
func (c *Client) Check(ctx context.Context, req sluice.Request) (sluice.Result, error) {
	in := checkRequest{Tenant: req.Tenant, Hits: &req.Hits, Checks: make([]checkJSON, len(req.Checks))}
	for i, ch := range req.Checks {
		p := ch.Policy
		pj := policyJSON{Name: p.Name, Algorithm: p.Algorithm.String(), Limit: p.Limit, Burst: p.Burst, Buckets: p.Buckets, Calendar: p.Calendar.String(), Shadow: p.Shadow, FailMode: p.FailMode.String(), Leased: p.Leased}
		if p.Window > 0 {
			pj.Window = p.Window.String()
		}
		if p.LeaseTTL > 0 {
			pj.LeaseTTL = p.LeaseTTL.String()
		}
		in.Checks[i] = checkJSON{Key: ch.Key, Policy: pj}
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
		return sluice.Result{}, &sluice.Error{Op: "client.check", Kind: sluice.KindUnavailable, Err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return sluice.Result{}, &sluice.Error{Op: "client.check", Kind: sluice.KindUnavailable, Err: err}
	}
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusTooManyRequests {
		return sluice.Result{}, serverError(resp.StatusCode, b)
	}
	var out checkResponse
	if err := json.Unmarshal(b, &out); err != nil {
		return sluice.Result{}, &sluice.Error{Op: "client.check", Kind: sluice.KindInternal, Message: "unreadable response", Err: err}
	}
	res := sluice.Result{Allowed: out.Allowed, Decision: out.decision(), Decisions: make([]sluice.Decision, len(out.Decisions))}
	for i, d := range out.Decisions {
		res.Decisions[i] = d.decision()
	}
	return res, nil
}

// serverError turns an error response into a *sluice.Error of the same
// kind, with the field the server named.
func serverError(status int, body []byte) error {
	var e struct {
		Error   string `json:"error"`
		Field   string `json:"field"`
		Message string `json:"message"`
	}
	_ = json.Unmarshal(body, &e)
	kind := sluice.KindInternal
	switch status {
	case http.StatusBadRequest:
		kind = sluice.KindInvalid
	case http.StatusUnauthorized:
		kind = sluice.KindUnauthorized
	case http.StatusForbidden:
		kind = sluice.KindForbidden
	case http.StatusNotFound:
		kind = sluice.KindNotFound
	case http.StatusConflict:
		kind = sluice.KindConflict
	case http.StatusServiceUnavailable, http.StatusBadGateway, http.StatusGatewayTimeout:
		kind = sluice.KindUnavailable
	}
	msg := e.Message
	if msg == "" {
		msg = fmt.Sprintf("server answered %d", status)
	}
	return &sluice.Error{Op: "client.check", Kind: kind, Field: e.Field, Message: msg}
}

type checkRequest struct {
	Tenant string      `json:"tenant,omitempty"`
	Hits   *int64      `json:"hits"`
	Checks []checkJSON `json:"checks"`
}

type checkJSON struct {
	Key    string     `json:"key"`
	Policy policyJSON `json:"policy"`
}

type policyJSON struct {
	Name      string `json:"name"`
	Algorithm string `json:"algorithm"`
	Limit     int64  `json:"limit"`
	Window    string `json:"window,omitempty"`
	Burst     int64  `json:"burst,omitempty"`
	LeaseTTL  string `json:"leaseTTL,omitempty"`
	Buckets   int    `json:"buckets,omitempty"`
	Calendar  string `json:"calendar,omitempty"`
	Shadow    bool   `json:"shadow,omitempty"`
	FailMode  string `json:"failMode,omitempty"`
	Leased    bool   `json:"leased,omitempty"`
}

type decisionJSON struct {
	Policy       string `json:"policy"`
	Allowed      bool   `json:"allowed"`
	Limit        int64  `json:"limit"`
	Remaining    int64  `json:"remaining"`
	ResetAt      int64  `json:"resetAt"`
	RetryAfterMs int64  `json:"retryAfterMs"`
	Shadowed     bool   `json:"shadowed"`
	FailedOpen   bool   `json:"failedOpen"`
	Lease        *struct {
		ID          string `json:"id"`
		ExpiresAtMs int64  `json:"expiresAtMs"`
	} `json:"lease"`
}

type checkResponse struct {
	Allowed bool `json:"allowed"`
	decisionJSON
	Decisions []decisionJSON `json:"decisions"`
}

func (d decisionJSON) decision() sluice.Decision {
	out := sluice.Decision{
		Policy: d.Policy, Allowed: d.Allowed, Limit: d.Limit, Remaining: d.Remaining,
		ResetAt:    time.Unix(d.ResetAt, 0).UTC(),
		RetryAfter: time.Duration(d.RetryAfterMs) * time.Millisecond,
		Shadowed:   d.Shadowed, FailedOpen: d.FailedOpen,
	}
	if d.Lease != nil {
		out.Lease.ID, _ = strconv.ParseUint(d.Lease.ID, 10, 64)
		out.Lease.ExpiresAt = time.UnixMilli(d.Lease.ExpiresAtMs).UTC()
	}
	return out
}
