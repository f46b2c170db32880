package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"unicode/utf8"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/wire"
)

// LeaseRequest names a concurrency policy's counter, to hold units of it
// while work runs: a configured policy by name (Policy) with its key parts
// (Key), or an inline one (Inline) with its key (KeyValue). Renewal and
// release name the same tenant and policy; the key is in the token.
type LeaseRequest struct {
	// Tenant is the tenant; empty with a tenant's API key (the key's).
	Tenant string
	// Policy names a configured concurrency policy; the tenant's tier
	// and overrides apply.
	Policy string
	// Key holds the key parts Policy is keyed by, as Named.Key.
	Key map[string]string
	// Inline, instead of Policy, is an inline concurrency policy.
	Inline *sluice.Policy
	// KeyValue is the key of Inline's counter.
	KeyValue string
	// Units is how many units to hold, 1 to the policy's limit; zero
	// means 1.
	Units int64
}

// body returns req as the body of the lease routes, with the key and the
// units only for an acquisition.
func (req LeaseRequest) body(acquire bool) (wire.LeaseRequest, error) {
	if req.Inline != nil && req.Policy != "" {
		return wire.LeaseRequest{}, sluice.Invalid("policy", "give a configured policy's name or an inline policy, not both")
	}
	for _, t := range []struct{ field, s string }{{"tenant", req.Tenant}, {"policy", req.Policy}, {"keyValue", req.KeyValue}} {
		if !utf8.ValidString(t.s) {
			return wire.LeaseRequest{}, sluice.Invalid(t.field, "is not valid UTF-8")
		}
	}
	var policy any = req.Policy
	if req.Inline != nil {
		policy = wire.FromPolicy(*req.Inline)
	}
	raw, err := json.Marshal(policy)
	if err != nil {
		return wire.LeaseRequest{}, err
	}
	out := wire.LeaseRequest{Tenant: req.Tenant, Policy: raw}
	if acquire {
		if err := validParts(req.Key); err != nil {
			return wire.LeaseRequest{}, err
		}
		out.Key, out.KeyValue = req.Key, req.KeyValue
		if req.Units != 0 {
			out.Units = &req.Units
		}
	}
	return out, nil
}

// LeaseResult is the answer to AcquireLease.
type LeaseResult struct {
	// Result is the decision: Allowed false when the units are all held
	// (the server's 429). A held lease's id and expiry are in
	// Decision.Lease.
	sluice.Result
	// Token names the held lease to RenewLease and ReleaseLease; treat
	// it as opaque. Empty when no lease is held: refused, or admitted
	// without one because the store failed and the policy fails open
	// (FailedOpen).
	Token string
}

// AcquireLease holds req.Units of a concurrency policy, as POST
// /v1/leases, until ReleaseLease, or until the policy's lease TTL passes
// without a RenewLease. All held is a result with Allowed false, not an
// error. When the server gives no decision, the fail mode decides, as in
// CheckNamed (an inline policy's own): admitted without a lease, or
// denied, marked FailedOpen or FailedClosed, and no error. Other errors
// are the server's, as *sluice.Error with its kind and field.
func (c *Client) AcquireLease(ctx context.Context, req LeaseRequest) (LeaseResult, error) {
	const op = "client.lease"
	in, err := req.body(true)
	if err != nil {
		return LeaseResult{}, sluice.WithOp(op, err)
	}
	a, err := c.decide(ctx, op, "/v1/leases", in)
	switch {
	case sluice.KindOf(err) == sluice.KindUnavailable:
		return LeaseResult{Result: c.failed(req.failing(c.modeOf(a)), err)}, nil
	case err != nil:
		return LeaseResult{}, err
	}
	out, err := a.checkResponse(op)
	if err != nil {
		return LeaseResult{}, err
	}
	res := LeaseResult{Result: out.Decode()}
	if out.Lease != nil {
		res.Token = out.Lease.Token
	}
	return res, nil
}

// failing returns req as a request whose one check fails by its inline
// policy's fail mode, or else by mode.
func (req LeaseRequest) failing(mode sluice.FailMode) sluice.Request {
	p := sluice.Policy{Name: req.Policy, Algorithm: sluice.Concurrency, FailMode: mode}
	if req.Inline != nil {
		p = *req.Inline
	}
	units := max(req.Units, 1)
	return sluice.Request{Tenant: req.Tenant, Hits: units, Checks: []sluice.Check{{Policy: p, Key: req.KeyValue}}}
}

// RenewLease extends the lease token names, of req's tenant and policy,
// by the policy's lease TTL, as POST /v1/leases/{token}/renew: the
// decision's Lease.ExpiresAt is its new expiry. A lease released or
// expired cannot come back: a KindNotFound error that errors.Is
// sluice.ErrLeaseNotFound. A server that cannot be reached, or answers
// unavailable, is a KindUnavailable error: retry before the lease expires.
func (c *Client) RenewLease(ctx context.Context, req LeaseRequest, token string) (sluice.Decision, error) {
	return c.updateLease(ctx, "client.renew", http.MethodPost, "/v1/leases/"+url.PathEscape(token)+"/renew", req, token)
}

// ReleaseLease returns the units of the lease token names, of req's tenant
// and policy, as DELETE /v1/leases/{token}: the decision's Remaining
// counts them free. Errors are as RenewLease's; a lease that is not
// released expires by itself.
func (c *Client) ReleaseLease(ctx context.Context, req LeaseRequest, token string) (sluice.Decision, error) {
	return c.updateLease(ctx, "client.release", http.MethodDelete, "/v1/leases/"+url.PathEscape(token), req, token)
}

func (c *Client) updateLease(ctx context.Context, op, method, path string, req LeaseRequest, token string) (sluice.Decision, error) {
	if token == "" {
		return sluice.Decision{}, &sluice.Error{Op: op, Kind: sluice.KindInvalid, Field: "token", Message: "is empty: no lease is held"}
	}
	in, err := req.body(false)
	if err != nil {
		return sluice.Decision{}, sluice.WithOp(op, err)
	}
	a, err := c.call(ctx, c.httpc, op, method, path, in)
	switch {
	case err != nil:
		return sluice.Decision{}, err
	case a.status == http.StatusNotFound:
		return sluice.Decision{}, &sluice.Error{Op: op, Kind: sluice.KindNotFound, Err: sluice.ErrLeaseNotFound}
	case a.status != http.StatusOK:
		return sluice.Decision{}, a.err(op)
	}
	var out wire.Decision
	if err := json.Unmarshal(a.body, &out); err != nil {
		return sluice.Decision{}, &sluice.Error{Op: op, Kind: sluice.KindInternal, Message: "unreadable response", Err: err}
	}
	return out.Decode(), nil
}
