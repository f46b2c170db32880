package httplimit_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/store/memstore"
)

// newEngine returns an in-process limiter on a fresh memory store.
func newEngine(t *testing.T) *engine.Engine {
	t.Helper()
	s := memstore.New(memstore.Options{})
	t.Cleanup(func() { s.Close() })
	return engine.New(s, engine.Options{})
}

// mustNew returns the middleware of opts, which must be valid.
func mustNew(t *testing.T, opts httplimit.Options) func(http.Handler) http.Handler {
	t.Helper()
	mw, err := httplimit.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return mw
}

// serve sends one request to h with the headers, and returns the answer.
func serve(h http.Handler, path string, header map[string]string) *httptest.ResponseRecorder {
	req := httptest.NewRequest("GET", path, nil)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

var ok = http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})

func hourly(name string, limit int64) sluice.Policy {
	return sluice.Policy{Name: name, Algorithm: sluice.FixedWindow, Limit: limit, Window: time.Hour}
}

// TestNewErrors: options that cannot limit are an error from New, which
// names the option, never a panic.
func TestNewErrors(t *testing.T) {
	l := newEngine(t)
	byHeader := httplimit.KeyFromHeader("X-User")
	for _, tc := range []struct {
		name string
		opts httplimit.Options
		want string
	}{
		{"no limiter", httplimit.Options{Policies: []sluice.Policy{hourly("api", 1)}, Key: byHeader}, "Limiter"},
		{"no policies", httplimit.Options{Limiter: l, Key: byHeader}, "Policies"},
		{"no key", httplimit.Options{Limiter: l, Policies: []sluice.Policy{hourly("api", 1)}}, "Key"},
		{"bad policy", httplimit.Options{Limiter: l, Policies: []sluice.Policy{{Name: "api"}}, Key: byHeader}, "Policies[0]"},
		{"key of no policy", httplimit.Options{Limiter: l, Policies: []sluice.Policy{hourly("api", 1)}, Key: byHeader,
			Keys: map[string]httplimit.KeyFunc{"other": byHeader}}, "Keys"},
		{"parts without endpoint", httplimit.Options{Limiter: l, Policies: []sluice.Policy{hourly("api", 1)}, Key: byHeader,
			Parts: map[string]httplimit.KeyFunc{"user": byHeader}}, "Parts"},
		{"endpoint on the engine", httplimit.Options{Limiter: l, Endpoint: "chat"}, "Limiter"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mw, err := func() (mw func(http.Handler) http.Handler, err error) {
				defer func() {
					if p := recover(); p != nil {
						t.Fatalf("panicked: %v", p)
					}
				}()
				return httplimit.New(tc.opts)
			}()
			if err == nil || mw != nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v (middleware %v), want an error naming %s", err, mw != nil, tc.want)
			}
		})
	}
}

// TestKeyPerPolicy: each policy counts under its own key: a per-IP
// policy is shared by the users behind one address, a per-user one is
// not.
func TestKeyPerPolicy(t *testing.T) {
	mw, err := httplimit.New(httplimit.Options{
		Limiter:  newEngine(t),
		Policies: []sluice.Policy{hourly("per-ip", 3), hourly("per-user", 2)},
		Key:      httplimit.KeyFromIP(nil),
		Keys:     map[string]httplimit.KeyFunc{"per-user": httplimit.KeyFromHeader("X-User")},
	})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(ok)
	for i, tc := range []struct {
		user string
		code int
	}{{"alice", 200}, {"alice", 200}, {"alice", 429}, {"bob", 200}, {"bob", 429}} {
		// alice's third is over per-user; bob's first is the address's
		// third; his second is over per-ip.
		if rec := serve(h, "/", map[string]string{"X-User": tc.user}); rec.Code != tc.code {
			t.Fatalf("request %d (%s): %d, want %d", i, tc.user, rec.Code, tc.code)
		}
	}
}

// TestSkipAndOnRefused: a skipped request reaches the handler uncounted
// and without headers; a refused one is answered by OnRefused, with the
// decision and the rate-limit headers already written.
func TestSkipAndOnRefused(t *testing.T) {
	var refused sluice.Decision
	mw, err := httplimit.New(httplimit.Options{
		Limiter:  newEngine(t),
		Policies: []sluice.Policy{hourly("api", 1)},
		Key:      httplimit.KeyFromHeader("X-User"),
		Skip:     func(r *http.Request) bool { return r.URL.Path == "/healthz" },
		OnRefused: func(w http.ResponseWriter, r *http.Request, d sluice.Decision) {
			refused = d
			w.WriteHeader(http.StatusTeapot)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(ok)
	for range 3 {
		if rec := serve(h, "/healthz", nil); rec.Code != 200 || rec.Header().Get("RateLimit") != "" {
			t.Fatalf("skipped: %d %v, want 200 without headers", rec.Code, rec.Header())
		}
	}
	if rec := serve(h, "/", map[string]string{"X-User": "u"}); rec.Code != 200 {
		t.Fatalf("first: %d", rec.Code)
	}
	rec := serve(h, "/", map[string]string{"X-User": "u"})
	if rec.Code != http.StatusTeapot || refused.Policy != "api" || refused.Allowed || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("refused: %d %v, decision %+v", rec.Code, rec.Header(), refused)
	}
}

// TestHeaderSets: the middleware writes the IETF draft's headers, the
// X-RateLimit-* ones, or both (the default).
func TestHeaderSets(t *testing.T) {
	for _, tc := range []struct {
		set      httplimit.HeaderSet
		ietf, xs bool
	}{{httplimit.HeadersBoth, true, true}, {httplimit.HeadersIETF, true, false}, {httplimit.HeadersX, false, true}} {
		mw, err := httplimit.New(httplimit.Options{Limiter: newEngine(t), Policies: []sluice.Policy{hourly("api", 1)},
			Key: httplimit.KeyFromHeader("X-User"), Headers: tc.set})
		if err != nil {
			t.Fatal(err)
		}
		h := mw(ok)
		for _, rec := range []*httptest.ResponseRecorder{serve(h, "/", map[string]string{"X-User": "u"}), serve(h, "/", map[string]string{"X-User": "u"})} {
			hd := rec.Header()
			if (hd.Get("RateLimit") != "") != tc.ietf || (hd.Get("RateLimit-Policy") != "") != tc.ietf ||
				(hd.Get("X-RateLimit-Remaining") != "") != tc.xs || (hd.Get("X-RateLimit-Limit") != "") != tc.xs {
				t.Errorf("set %v, %d: %v", tc.set, rec.Code, hd)
			}
			if rec.Code == 429 && hd.Get("Retry-After") == "" {
				t.Errorf("set %v: 429 without Retry-After", tc.set)
			}
		}
	}
}

// TestCallerGone: a request whose context ended before the limiter
// decided (its client left) is not logged as a failure of the limiter,
// and is not served when the limiter gave up on it.
func TestCallerGone(t *testing.T) {
	for name, l := range limiters(t) {
		t.Run(name, func(t *testing.T) {
			var logged strings.Builder
			calls := 0
			h := mustNew(t, httplimit.Options{Limiter: l, Policies: []sluice.Policy{hourly("api", 5)}, Key: httplimit.KeyFromHeader("X-User"),
				Logger: slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelWarn}))})(
				http.HandlerFunc(func(http.ResponseWriter, *http.Request) { calls++ }))
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			req := httptest.NewRequestWithContext(ctx, "GET", "/", nil)
			req.Header.Set("X-User", "u")
			h.ServeHTTP(httptest.NewRecorder(), req)
			// The engine decides in memory whatever ctx says; the client
			// gives up.
			if calls != 0 && name == "client" || logged.Len() != 0 {
				t.Fatalf("handler called %d times; logged %q", calls, logged.String())
			}
		})
	}
}
