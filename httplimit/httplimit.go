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
// Every response carries the RateLimit, RateLimit-Policy and X-RateLimit-*
// headers; a denied request gets 429 with Retry-After and a JSON body, and
// never reaches the handler.
package httplimit

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
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

// Options configures the middleware. Limiter, Policies and Key are
// required.
type Options struct {
	Limiter  sluice.Limiter
	Policies []sluice.Policy
	Key      KeyFunc
	// Tenant returns the tenant of a request. Default: "default".
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
	if opts.Limiter == nil || len(opts.Policies) == 0 || opts.Key == nil {
		panic("httplimit: Limiter, Policies and Key are required")
	}
	for i := range opts.Policies {
		if err := opts.Policies[i].Validate(); err != nil {
			panic(fmt.Sprintf("httplimit: policy %d: %v", i, err))
		}
	}
	if opts.Tenant == nil {
		opts.Tenant = func(*http.Request) string { return "default" }
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
			if err != nil {
				opts.Logger.Error("httplimit: limiter failed", "err", err)
				opts.OnError(w, r, err)
				return
			}
			if !res.Allowed && res.Decision.FailedClosed {
				// The store failed and the policy fails closed: a
				// fault, never a limit.
				opts.Logger.Warn("httplimit: limiter failed; failing closed", "policy", res.Decision.Policy)
				opts.OnError(w, r, wire.FailedClosed(res.Decision.Policy))
				return
			}
			WriteHeaders(w.Header(), res, opts.Policies, opts.Now())
			if !res.Allowed {
				WriteTooMany(w, res)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// WriteTooMany writes a 429 with seed 003's body: error, message, limit,
// resetAt (epoch seconds) and the violated policies. The headers must be
// written first (WriteHeaders).
func WriteTooMany(w http.ResponseWriter, res sluice.Result) {
	d := res.Decision
	var violated []string
	for _, x := range res.Decisions {
		if !x.Allowed {
			violated = append(violated, x.Policy)
		}
	}
	wire.WriteJSON(w, http.StatusTooManyRequests, map[string]any{
		"error":             "Rate limit exceeded",
		"message":           fmt.Sprintf("Too many requests. Please try again in %d seconds.", wire.CeilSeconds(d.RetryAfter)),
		"limit":             d.Limit,
		"resetAt":           wire.CeilUnix(d.ResetAt),
		"violated-policies": violated,
	})
}
