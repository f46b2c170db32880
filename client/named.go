package client

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/wire"
)

// Named is a check of policies configured on the server: an endpoint's,
// or policies by name, each counted under the key parts it is keyed by.
// The server applies the tenant's tier, its overrides (the file's and
// those set through the API or the dashboard) and operators' blocks.
type Named struct {
	// Tenant is the tenant; empty with a tenant's API key (the key's).
	Tenant string
	// Endpoint names an endpoint of the server's configuration: its
	// policies, in order.
	Endpoint string
	// Policies name configured policies, instead of an endpoint. (Given
	// both, the server takes the endpoint's.)
	Policies []string
	// Key holds the key parts the policies are keyed by ("user", "ip", any
	// descriptor); a missing one is a KindInvalid error naming
	// "key.<part>". Without "ip", a policy keyed by it takes the address
	// the server sees: this client's, not its caller's.
	Key map[string]string
	// Hits is the request's cost, as sluice.Request's: zero reads the
	// state without consuming.
	Hits int64
}

// NamedResult is the answer to a Named check.
type NamedResult struct {
	sluice.Result
	// Header holds the rate-limit headers the server answered with
	// (RateLimit-Policy, RateLimit, X-RateLimit-Limit, -Remaining and
	// -Reset, and Retry-After on a denial), for a service to pass on: only
	// the server knows the policies' windows and which are shadows. Nil
	// when the fail mode decided.
	Header http.Header
}

// CheckNamed decides req against the policies configured on the server,
// as POST /v1/check with an endpoint or policies and key parts. Over the
// limit is a result, not an error. When the server gives no decision, the
// client's FailMode (Options) decides, or fails closed if the server
// itself answered unavailable (see Options.FailMode): the result, without
// an error, then has one decision per name given (the endpoint, or each
// policy), of an unknown limit (0), marked FailedOpen or FailedClosed.
// Other errors are the server's, as *sluice.Error with its kind and field
// (such as "key.user" for a missing key part), or bad input refused before
// sending.
func (c *Client) CheckNamed(ctx context.Context, req Named) (NamedResult, error) {
	const op = "client.check"
	in, err := fromNamed(req)
	if err != nil {
		return NamedResult{}, sluice.WithOp(op, err)
	}
	a, err := c.decide(ctx, op, "/v1/check", in)
	switch {
	case sluice.KindOf(err) == sluice.KindUnavailable:
		return NamedResult{Result: c.failed(req.failing(c.modeOf(a)), err)}, nil
	case err != nil:
		return NamedResult{}, err
	}
	res, err := a.result(op)
	return NamedResult{Result: res, Header: rateLimitHeaders(a.header)}, err
}

// CheckEndpoint is CheckNamed of an endpoint, returning the result and its
// headers, as httplimit's middleware asks of an httplimit.EndpointLimiter.
func (c *Client) CheckEndpoint(ctx context.Context, tenant, endpoint string, parts map[string]string, hits int64) (sluice.Result, http.Header, error) {
	res, err := c.CheckNamed(ctx, Named{Tenant: tenant, Endpoint: endpoint, Key: parts, Hits: hits})
	return res.Result, res.Header, err
}

// fromNamed returns req as the body of POST /v1/check. Text that JSON
// cannot carry as it is (invalid UTF-8, which encoding/json would turn
// into U+FFFD, making two keys one) is refused, naming the field.
func fromNamed(req Named) (wire.CheckRequest, error) {
	if req.Endpoint == "" && len(req.Policies) == 0 {
		return wire.CheckRequest{}, sluice.Invalid("endpoint", "name an endpoint or policies")
	}
	texts := []struct{ field, s string }{{"tenant", req.Tenant}, {"endpoint", req.Endpoint}}
	for i, p := range req.Policies {
		texts = append(texts, struct{ field, s string }{fmt.Sprintf("policies[%d]", i), p})
	}
	for _, t := range texts {
		if !utf8.ValidString(t.s) {
			return wire.CheckRequest{}, sluice.Invalid(t.field, "is not valid UTF-8")
		}
	}
	if err := validParts(req.Key); err != nil {
		return wire.CheckRequest{}, err
	}
	hits := req.Hits
	return wire.CheckRequest{Tenant: req.Tenant, Hits: &hits, Endpoint: req.Endpoint, Policies: req.Policies, Key: req.Key}, nil
}

// validParts refuses key parts that JSON cannot carry as they are.
func validParts(parts map[string]string) error {
	for name, v := range parts {
		switch {
		case !utf8.ValidString(name):
			return sluice.Invalid("key", "has a part whose name is not valid UTF-8")
		case !utf8.ValidString(v):
			return sluice.Invalid("key."+name, "is not valid UTF-8")
		}
	}
	return nil
}

// failing returns req as a request whose checks fail by mode: one per
// name it gives, the endpoint or each policy.
func (req Named) failing(mode sluice.FailMode) sluice.Request {
	names := req.Policies
	if req.Endpoint != "" {
		names = []string{req.Endpoint}
	}
	out := sluice.Request{Tenant: req.Tenant, Hits: req.Hits, Checks: make([]sluice.Check, len(names))}
	for i, name := range names {
		out.Checks[i].Policy = sluice.Policy{Name: name, FailMode: mode}
	}
	return out
}

// rateLimitHeaders returns the rate-limit headers of h, those
// wire.WriteRateLimitHeaders writes.
func rateLimitHeaders(h http.Header) http.Header {
	out := http.Header{}
	for name, v := range h {
		if name == "Ratelimit" || name == "Ratelimit-Policy" || name == "Retry-After" || strings.HasPrefix(name, "X-Ratelimit-") {
			out[name] = v
		}
	}
	return out
}
