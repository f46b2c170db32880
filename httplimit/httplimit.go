// Package httplimit is net/http middleware that limits requests with any
// sluice.Limiter: the in-process engine, or client.Client talking to a
// sluice server, with the same code.
//
//	mw := httplimit.New(httplimit.Options{
//		Limiter:  eng,
//		Policies: []sluice.Policy{{Name: "api", Algorithm: sluice.TokenBucket, Limit: 10, Window: time.Second}},
//		Key:      httplimit.KeyFromIP(nil),
//	})
//	http.ListenAndServe(addr, mw(handler))
//
// Through a sluice server, the middleware can name an endpoint of the
// server's configuration instead, so that the tenant's tier and
// overrides, and the operators' changes to them, apply:
//
//	mw := httplimit.New(httplimit.Options{
//		Limiter:  client.New(url, client.Options{APIKey: key}),
//		Endpoint: "chat",
//		Parts:    map[string]httplimit.KeyFunc{"user": httplimit.KeyFromHeader("X-User")},
//	})
//
// Every response carries the RateLimit, RateLimit-Policy and X-RateLimit-*
// headers (through an endpoint, those the server answered, when it did); a
// denied request gets 429 with Retry-After and a JSON body, and never
// reaches the handler.
package httplimit

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"sort"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/wire"
)

// KeyFunc returns the key a request is counted under. An error rejects the
// request with 400.
type KeyFunc func(r *http.Request) (string, error)

// KeyFromIP keys by the client's address, believing X-Forwarded-For only
// from the trusted proxies (see ClientIP).
func KeyFromIP(trusted []netip.Prefix) KeyFunc {
	return func(r *http.Request) (string, error) {
		a := ClientIP(r, trusted)
		if !a.IsValid() {
			return "", fmt.Errorf("no client address")
		}
		return a.String(), nil
	}
}

// KeyFromHeader keys by a header, such as an API key or a user id set by
// an authenticating proxy. A request without it is rejected.
func KeyFromHeader(name string) KeyFunc {
	return func(r *http.Request) (string, error) {
		v := r.Header.Get(name)
		if v == "" {
			return "", fmt.Errorf("missing header %s", name)
		}
		return v, nil
	}
}

// EndpointLimiter decides a request against an endpoint configured on a
// sluice server: client.Client. The server resolves the endpoint's
// policies, with the tenant's tier and overrides; header holds the
// rate-limit headers it answered with, nil if it gave no decision and the
// client's fail mode decided.
type EndpointLimiter interface {
	CheckEndpoint(ctx context.Context, tenant, endpoint string, parts map[string]string, hits int64) (res sluice.Result, header http.Header, err error)
}

// Options configures the middleware. Limiter is required, with Policies
// and Key, or with Endpoint.
type Options struct {
	Limiter  sluice.Limiter
	Policies []sluice.Policy
	Key      KeyFunc
	// Endpoint, instead of Policies and Key, names an endpoint of the
	// configuration of the sluice server that Limiter, then an
	// EndpointLimiter (client.Client), talks to. The server's rate-limit
	// headers are passed on; when it gives no decision, the client's fail
	// mode decides, and no rate-limit headers are written.
	Endpoint string
	// Parts, with Endpoint, return a request's key parts by name ("user",
	// any descriptor); a part's error rejects the request with 400 naming
	// it. Without an "ip" part, the request's peer address is sent as
	// "ip" (ClientIP without trusted proxies), never this service's own,
	// which the server would count otherwise; give KeyFromIP(trusted)
	// behind proxies.
	Parts map[string]KeyFunc
	// Tenant returns the tenant of a request. Default: "default"; with
	// Endpoint, "" (the tenant of the client's API key).
	Tenant func(r *http.Request) string
	// Hits returns a request's cost. Default: 1.
	Hits func(r *http.Request) int64
	// OnError is called when the limiter fails (the policies' fail modes
	// have already had their say in the engine). Default: answer 503.
	OnError func(w http.ResponseWriter, r *http.Request, err error)
	// Now is the clock of the headers. Default time.Now.
	Now func() time.Time
	// Logger receives limiter failures. Default: discard.
	Logger *slog.Logger
}

// New returns the middleware. It panics if a required option is missing,
// as a misconfigured limiter should not start.
func New(opts Options) func(http.Handler) http.Handler {
	if opts.Endpoint != "" {
		return newNamed(opts)
	}
	if opts.Limiter == nil || len(opts.Policies) == 0 || opts.Key == nil {
		panic("httplimit: Limiter, Policies and Key are required")
	}
	if len(opts.Parts) > 0 {
		panic("httplimit: Parts go with Endpoint")
	}
	for i := range opts.Policies {
		if err := opts.Policies[i].Validate(); err != nil {
			panic(fmt.Sprintf("httplimit: policy %d: %v", i, err))
		}
	}
	opts = opts.defaults("default")
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			key, err := opts.Key(r)
			if err != nil {
				wire.WriteError(w, sluice.Invalid("key", "%v", err))
				return
			}
			req := sluice.Request{Tenant: opts.Tenant(r), Hits: opts.Hits(r), Checks: make([]sluice.Check, len(opts.Policies))}
			for i, p := range opts.Policies {
				req.Checks[i] = sluice.Check{Policy: p, Key: key}
			}
			res, err := opts.Limiter.Check(r.Context(), req)
			opts.answer(w, r, next, res, err, func(h http.Header) { WriteHeaders(h, res, opts.Policies, opts.Now()) })
		})
	}
}

// answer ends r with its decision: a failure of the limiter, or a denial
// because it failed closed, through OnError; a denial with 429; an
// admission through next. headers writes the decision's rate-limit
// headers.
func (opts *Options) answer(w http.ResponseWriter, r *http.Request, next http.Handler, res sluice.Result, err error, headers func(http.Header)) {
	if err != nil {
		opts.Logger.Error("httplimit: limiter failed", "err", err)
		opts.OnError(w, r, err)
		return
	}
	if !res.Allowed && res.Decision.FailedClosed {
		// The store failed and the policy fails closed: a fault, never
		// a limit.
		opts.Logger.Warn("httplimit: limiter failed; failing closed", "policy", res.Decision.Policy)
		opts.OnError(w, r, wire.FailedClosed(res.Decision.Policy))
		return
	}
	headers(w.Header())
	if !res.Allowed {
		WriteTooMany(w, res)
		return
	}
	next.ServeHTTP(w, r)
}

// defaults returns opts with their defaults filled in, tenant the
// default tenant.
func (opts Options) defaults(tenant string) Options {
	if opts.Tenant == nil {
		opts.Tenant = func(*http.Request) string { return tenant }
	}
	if opts.Hits == nil {
		opts.Hits = func(*http.Request) int64 { return 1 }
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.OnError == nil {
		opts.OnError = func(w http.ResponseWriter, r *http.Request, err error) {
			if sluice.KindOf(err) != sluice.KindInvalid {
				err = &sluice.Error{Kind: sluice.KindUnavailable, Message: "rate limiter unavailable", Err: err}
			}
			wire.WriteError(w, err)
		}
	}
	return opts
}

// newNamed returns the middleware of an endpoint configured on a sluice
// server.
func newNamed(opts Options) func(http.Handler) http.Handler {
	l, ok := opts.Limiter.(EndpointLimiter)
	switch {
	case !ok:
		panic("httplimit: Endpoint needs a Limiter that is an EndpointLimiter, such as client.Client")
	case len(opts.Policies) > 0 || opts.Key != nil:
		panic("httplimit: give Policies and Key, or Endpoint and Parts, not both")
	}
	opts = opts.defaults("")
	names := make([]string, 0, len(opts.Parts))
	for name := range opts.Parts {
		names = append(names, name)
	}
	sort.Strings(names) // the first failing part is named, always the same
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			parts := make(map[string]string, len(names)+1)
			for _, name := range names {
				v, err := opts.Parts[name](r)
				if err != nil {
					wire.WriteError(w, sluice.Invalid("key."+name, "%v", err))
					return
				}
				parts[name] = v
			}
			if _, ok := parts["ip"]; !ok {
				if a := ClientIP(r, nil); a.IsValid() {
					parts["ip"] = a.String()
				}
			}
			res, header, err := l.CheckEndpoint(r.Context(), opts.Tenant(r), opts.Endpoint, parts, opts.Hits(r))
			opts.answer(w, r, next, res, err, func(h http.Header) {
				for name, v := range header {
					h[name] = v // the server's: it knows the windows
				}
			})
		})
	}
}

// WriteTooMany writes a 429 with seed 003's body: error, message, limit,
// resetAt (epoch seconds) and the violated policies. The headers must be
// written first (WriteHeaders).
func WriteTooMany(w http.ResponseWriter, res sluice.Result) { wire.WriteTooMany(w, res) }
