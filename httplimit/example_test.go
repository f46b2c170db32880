package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/store/memstore"
)

// Limit an API in process: 3 requests an hour per client address, 2 per
// user, health checks uncounted, and only the IETF draft's headers.
func ExampleNew() {
	s := memstore.New(memstore.Options{})
	defer s.Close()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	mw, err := httplimit.New(httplimit.Options{
		Limiter: engine.New(s, engine.Options{Now: func() time.Time { return now }}),
		Policies: []sluice.Policy{
			{Name: "per-ip", Algorithm: sluice.FixedWindow, Limit: 3, Window: time.Hour},
			{Name: "per-user", Algorithm: sluice.FixedWindow, Limit: 2, Window: time.Hour},
		},
		Key:     httplimit.KeyFromIP(nil),
		Keys:    map[string]httplimit.KeyFunc{"per-user": httplimit.KeyFromHeader("X-User")},
		Skip:    func(r *http.Request) bool { return r.URL.Path == "/healthz" },
		Headers: httplimit.HeadersIETF,
		Now:     func() time.Time { return now },
	})
	if err != nil {
		panic(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello") }))

	for _, user := range []string{"alice", "alice", "alice", "bob", "bob"} {
		req := httptest.NewRequest("GET", "/", nil)
		req.Header.Set("X-User", user)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		fmt.Println(user, rec.Code, rec.Header().Get("RateLimit"))
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
	fmt.Println("healthz", rec.Code)
	// Output:
	// alice 200 "per-ip";r=2;t=3600, "per-user";r=1;t=3600
	// alice 200 "per-ip";r=1;t=3600, "per-user";r=0;t=3600
	// alice 429 "per-ip";r=1;t=3600, "per-user";r=0;t=3600
	// bob 200 "per-ip";r=0;t=3600, "per-user";r=1;t=3600
	// bob 429 "per-ip";r=0;t=3600, "per-user";r=1;t=3600
	// healthz 200
}
