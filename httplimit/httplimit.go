// Package httplimit is net/http middleware that limits requests with any
// sluice.Limiter: the in-process engine, or client.Client talking to a
// sluice server, with the same code.
//
//	mw, err := httplimit.New(httplimit.Options{
//		Limiter:  eng,
//		Policies: []sluice.Policy{{Name: "api", Algorithm: sluice.TokenBucket, Limit: 10, Window: time.Second}},
//		Key:      httplimit.KeyFromIP(nil),
//	})
//	if err != nil { ... }
//	http.ListenAndServe(addr, mw(handler))
//
// Through a sluice server, the middleware can name an endpoint of the
// server's configuration instead, so that the tenant's tier and
// overrides, and the operators' changes to them, apply:
//
//	mw, err := httplimit.New(httplimit.Options{
//		Limiter:  client.New(url, client.Options{APIKey: key}),
//		Endpoint: "chat",
//		Parts:    map[string]httplimit.KeyFunc{"user": httplimit.KeyFromHeader("X-User")},
//	})
//
// Every response carries the RateLimit, RateLimit-Policy and X-RateLimit-*
// headers (through an endpoint, those the server answered, when it did),
// or one of the two sets (Options.Headers); a denied request gets 429 with
// Retry-After and a JSON body (or Options.OnRefused's answer), and never
// reaches the handler. Options.Skip lets requests through uncounted.
package httplimit

import (
	"context"
	"errors"
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

// HeaderSet chooses the rate-limit headers the middleware writes.
type HeaderSet uint8

const (
	// HeadersBoth writes the IETF draft's RateLimit and RateLimit-Policy
	// and the X-RateLimit-Limit, -Remaining and -Reset headers.
	HeadersBoth HeaderSet = iota
	// HeadersIETF writes RateLimit and RateLimit-Policy only.
	HeadersIETF
	// HeadersX writes X-RateLimit-Limit, -Remaining and -Reset only.
	HeadersX
)

func (s HeaderSet) String() string {
	switch s {
	case HeadersIETF:
		return "ietf"
	case HeadersX:
		return "x"
	}
	return "both"
}

// Options configures the middleware. Limiter is required, with Policies
// and Key (or Keys), or with Endpoint.
type Options struct {
	Limiter  sluice.Limiter
	Policies []sluice.Policy
	// Key returns the key a request is counted under by the policies
	// Keys does not name.
	Key KeyFunc
	// Keys return the keys of policies by name, so that each counts
	// under its own: KeyFromIP for one, a user's header for another.
	// Every policy needs a key, from Keys or Key.
	Keys map[string]KeyFunc
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
	// Skip returns true for requests that go to the handler uncounted,
	// without rate-limit headers, such as health checks. Default: none.
	Skip func(r *http.Request) bool
	// OnRefused answers a request over a limit, d the decision of the
	// policy that refused it; the rate-limit headers and Retry-After are
	// already in w's header. Default: 429 with a JSON body
	// (WriteTooMany).
	OnRefused func(w http.ResponseWriter, r *http.Request, d sluice.Decision)
	// Headers chooses the rate-limit headers written. Default:
	// HeadersBoth. Retry-After is written with every set.
	Headers HeaderSet
	// OnError is called when the limiter fails (the policies' fail modes
	// have already had their say in the engine), or gives up because
	// the request's context ended (err is then that context's error, as
	// client.Client returns it). Default: answer 503.
	OnError func(w http.ResponseWriter, r *http.Request, err error)
	// Now is the clock of the headers. Default time.Now.
	Now func() time.Time
	// Logger receives limiter failures. Default: discard.
	Logger *slog.Logger
}

// New returns the middleware, or an error naming the option that is
// missing or wrong, so that a misconfigured limiter does not start.
func New(opts Options) (func(http.Handler) http.Handler, error) {
	if opts.Limiter == nil {
		return nil, errors.New("httplimit: Limiter is required")
	}
	if opts.Endpoint != "" {
		return newNamed(opts)
	}
	if len(opts.Policies) == 0 {
		return nil, errors.New("httplimit: Policies are required, or an Endpoint")
	}
	if len(opts.Parts) > 0 {
		return nil, errors.New("httplimit: Parts go with Endpoint; give Key or Keys")
	}
	keys := make([]KeyFunc, len(opts.Policies))
	names := make(map[string]bool, len(opts.Policies))
	for i := range opts.Policies {
		if err := opts.Policies[i].Validate(); err != nil {
			return nil, fmt.Errorf("httplimit: Policies[%d]: %w", i, err)
		}
		name := opts.Policies[i].Name
		names[name] = true
		if keys[i] = opts.Keys[name]; keys[i] == nil {
			keys[i] = opts.Key
		}
		if keys[i] == nil {
			return nil, fmt.Errorf("httplimit: Key is required, or Keys[%q]", name)
		}
	}
	for name := range opts.Keys {
		if !names[name] {
			return nil, fmt.Errorf("httplimit: Keys[%q] names no policy", name)
		}
	}
	opts = opts.defaults("default")
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if opts.Skip(r) {
				next.ServeHTTP(w, r)
				return
			}
			req := sluice.Request{Tenant: opts.Tenant(r), Hits: opts.Hits(r), Checks: make([]sluice.Check, len(opts.Policies))}
			for i, p := range opts.Policies {
				key, err := keys[i](r)
				if err != nil {
					wire.WriteError(w, sluice.Invalid("key", "%v", err))
					return
				}
				req.Checks[i] = sluice.Check{Policy: p, Key: key}
			}
			res, err := opts.Limiter.Check(r.Context(), req)
			opts.answer(w, r, next, res, err, func(h http.Header) { WriteHeaders(h, res, opts.Policies, opts.Now()) })
		})
	}, nil
}

// answer ends r with its decision: a failure of the limiter, or a denial
// because it failed closed, through OnError; a denial with 429; an
// admission through next. headers writes the decision's rate-limit
// headers.
func (opts *Options) answer(w http.ResponseWriter, r *http.Request, next http.Handler, res sluice.Result, err error, headers func(http.Header)) {
	if err != nil {
		if ctxErr := r.Context().Err(); ctxErr != nil && errors.Is(err, ctxErr) {
			// The request ended (its client left, or its deadline
			// passed) before its decision: not the limiter's failure.
			opts.Logger.Debug("httplimit: request ended before its decision", "err", err)
		} else {
			opts.Logger.Error("httplimit: limiter failed", "err", err)
		}
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
	opts.Headers.keep(w.Header())
	if !res.Allowed {
		if opts.OnRefused != nil {
			opts.OnRefused(w, r, res.Decision)
		} else {
			WriteTooMany(w, res)
		}
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
	if opts.Skip == nil {
		opts.Skip = func(*http.Request) bool { return false }
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
func newNamed(opts Options) (func(http.Handler) http.Handler, error) {
	l, ok := opts.Limiter.(EndpointLimiter)
	switch {
	case !ok:
		return nil, errors.New("httplimit: Limiter must be an EndpointLimiter, such as client.Client, with Endpoint")
	case len(opts.Policies) > 0 || opts.Key != nil || len(opts.Keys) > 0:
		return nil, errors.New("httplimit: give Policies and Key, or Endpoint and Parts, not both")
	}
	opts = opts.defaults("")
	names := make([]string, 0, len(opts.Parts))
	for name := range opts.Parts {
		names = append(names, name)
	}
	sort.Strings(names) // the first failing part is named, always the same
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if opts.Skip(r) {
				next.ServeHTTP(w, r)
				return
			}
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
	}, nil
}

// WriteTooMany writes a 429 with seed 003's body: error, message, limit,
// resetAt (epoch seconds) and the violated policies. The headers must be
// written first (WriteHeaders).
func WriteTooMany(w http.ResponseWriter, res sluice.Result) { wire.WriteTooMany(w, res) }
