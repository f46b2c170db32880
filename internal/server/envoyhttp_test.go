package server

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sluicehq/sluice/wire"
)

// fakeRLS answers ShouldRateLimit with resp and err, and records the
// requests it got.
type fakeRLS struct {
	resp *rlspb.RateLimitResponse
	err  error
	got  []*rlspb.RateLimitRequest
}

func (f *fakeRLS) ShouldRateLimit(_ context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	f.got = append(f.got, req)
	return f.resp, f.err
}

// fakeAPI is Sluice's HTTP API: it answers 299 to every request it gets.
type fakeAPI struct{ got []string }

func (a *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.got = append(a.got, r.Method+" "+r.URL.Path)
	w.WriteHeader(299)
}

func serveOne(h http.Handler, r *http.Request) (int, http.Header, string) {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	resp := w.Result()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// TestEnvoyJSON: POST /json decides a RateLimitRequest given in protojson
// with the answers of the reference's TestJsonHandler: 400 for no body or
// bad JSON and for the service's errors of the request, the response in
// protojson with 200 when OK, 429 when over the limit and 500 when
// UNKNOWN; and 500 for a failure of the server.
func TestEnvoyJSON(t *testing.T) {
	svc := &fakeRLS{}
	h := &envoyHTTP{rls: func() rateLimitService { return svc }, healthy: func(context.Context) error { return nil }, api: &fakeAPI{}}
	post := func(body string) (int, http.Header, string) {
		return serveOne(h, httptest.NewRequest("POST", "/json", strings.NewReader(body)))
	}
	for _, tc := range []struct {
		name     string
		body     string
		resp     *rlspb.RateLimitResponse
		err      error
		code     int
		ctype    string
		overall  string // of the body, if JSON
		wantCall bool
	}{
		{name: "no body", body: "", code: 400, ctype: "text/plain; charset=utf-8"},
		{name: "not JSON", body: "}", code: 400, ctype: "text/plain; charset=utf-8"},
		{name: "an unknown field", body: `{"domain": "foo", "nope": 1}`, code: 400, ctype: "text/plain; charset=utf-8"},
		{name: "unknown code", body: `{"domain": "foo"}`, resp: &rlspb.RateLimitResponse{}, code: 500, ctype: "application/json", wantCall: true},
		{name: "the request's error", body: `{"domain": "foo"}`, err: status.Error(codes.InvalidArgument, "descriptors: must not be empty"), code: 400, ctype: "text/plain; charset=utf-8", wantCall: true},
		{name: "the reference's error", body: `{"domain": "foo"}`, err: status.Error(codes.Unknown, "rate limit descriptor list must not be empty"), code: 400, ctype: "text/plain; charset=utf-8", wantCall: true},
		{name: "the server's failure", body: `{"domain": "foo"}`, err: status.Error(codes.Unavailable, "the limiter is unavailable; try again"), code: 500, ctype: "text/plain; charset=utf-8", wantCall: true},
		{name: "no response", body: `{"domain": "foo"}`, code: 500, ctype: "text/plain; charset=utf-8", wantCall: true},
		{name: "ok", body: `{"domain": "foo"}`, resp: &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK}, code: 200, ctype: "application/json", overall: "OK", wantCall: true},
		{name: "over", body: `{"domain": "foo"}`, resp: &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OVER_LIMIT}, code: 429, ctype: "application/json", overall: "OVER_LIMIT", wantCall: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc.resp, svc.err, svc.got = tc.resp, tc.err, nil
			code, hdr, body := post(tc.body)
			if code != tc.code || hdr.Get("Content-Type") != tc.ctype {
				t.Errorf("%d %q %q; want %d %q", code, hdr.Get("Content-Type"), body, tc.code, tc.ctype)
			}
			if called := len(svc.got) > 0; called != tc.wantCall {
				t.Errorf("the service was called: %v, want %v", called, tc.wantCall)
			} else if called && svc.got[0].GetDomain() != "foo" {
				t.Errorf("the service got %v, want the domain foo", svc.got[0])
			}
			if tc.overall != "" {
				var resp rlspb.RateLimitResponse
				if err := protojson.Unmarshal([]byte(body), &resp); err != nil || resp.OverallCode.String() != tc.overall || !strings.Contains(body, `"overallCode"`) {
					t.Errorf("body %q (%v), want the response in protojson, overallCode %s", body, err, tc.overall)
				}
			}
		})
	}

	t.Run("a whole request", func(t *testing.T) {
		svc.resp, svc.err, svc.got = &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK}, nil, nil
		code, _, _ := post(`{"domain": "dummy", "descriptors": [{"entries": [{"key": "perday", "value": "x"}]}], "hitsAddend": 3}`)
		if code != 200 || len(svc.got) != 1 {
			t.Fatalf("%d, %d calls", code, len(svc.got))
		}
		d := svc.got[0].GetDescriptors()
		if len(d) != 1 || d[0].Entries[0].Key != "perday" || d[0].Entries[0].Value != "x" || svc.got[0].HitsAddend != 3 {
			t.Errorf("the service got %v", svc.got[0])
		}
	})
	t.Run("a body too large", func(t *testing.T) {
		svc.got = nil
		code, _, _ := post(`{"domain": "` + strings.Repeat("d", wire.MaxBodyBytes) + `"}`)
		if code != http.StatusRequestEntityTooLarge || len(svc.got) != 0 {
			t.Errorf("%d, %d calls; want 413 and none", code, len(svc.got))
		}
	})
	t.Run("its route", func(t *testing.T) {
		// Named for the metrics and the access log, as the API's routes.
		r := httptest.NewRequest("POST", "/json", strings.NewReader(`{"domain": "foo"}`))
		serveOne(h, r)
		if routePath(r) != "/json" {
			t.Errorf("route %q, want /json", routePath(r))
		}
	})
	t.Run("not POST", func(t *testing.T) {
		code, hdr, _ := serveOne(h, httptest.NewRequest("GET", "/json", nil))
		if code != http.StatusMethodNotAllowed || hdr.Get("Allow") != "POST" {
			t.Errorf("GET /json: %d, Allow %q; want 405, POST", code, hdr.Get("Allow"))
		}
	})
}

// TestEnvoyJSONToken: with a gRPC token, /json needs it as the gRPC calls
// do, as "Authorization: Bearer <token>": without it nothing is decided.
func TestEnvoyJSONToken(t *testing.T) {
	const token = "0123456789abcdef-token"
	svc := &fakeRLS{resp: &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK}}
	h := &envoyHTTP{rls: func() rateLimitService { return svc }, token: token, api: &fakeAPI{}}
	for _, tc := range []struct {
		auth string
		code int
	}{
		{"", 401},
		{"Bearer wrong-token-0123456789", 401},
		{"Bearer " + token + "x", 401},
		{token, 401},
		{"Basic " + token, 401},
		{"Bearer " + token, 200},
	} {
		svc.got = nil
		r := httptest.NewRequest("POST", "/json", strings.NewReader(`{"domain": "foo"}`))
		if tc.auth != "" {
			r.Header.Set("Authorization", tc.auth)
		}
		code, hdr, _ := serveOne(h, r)
		if code != tc.code || (code == 401) != (len(svc.got) == 0) {
			t.Errorf("Authorization %q: %d, %d calls; want %d", tc.auth, code, len(svc.got), tc.code)
		}
		if code == 401 && !strings.HasPrefix(hdr.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("Authorization %q: WWW-Authenticate %q", tc.auth, hdr.Get("WWW-Authenticate"))
		}
	}
}

// TestEnvoyJSONPages: a web page may not spend limits through /json (a
// form's POST needs no CORS preflight, and a page of a name rebound to
// this server is of its origin): a request with an Origin is refused
// unless --allowed-origins names it.
func TestEnvoyJSONPages(t *testing.T) {
	svc := &fakeRLS{resp: &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK}}
	h := &envoyHTTP{rls: func() rateLimitService { return svc }, origins: []string{"https://app.example.com"}, api: &fakeAPI{}}
	for _, tc := range []struct {
		origin string
		code   int
	}{
		{"https://evil.example", 403},
		{"http://example.com", 403}, // the request's own host: a rebound name
		{"null", 403},
		{"https://app.example.com", 200},
	} {
		svc.got = nil
		r := httptest.NewRequest("POST", "http://example.com/json", strings.NewReader(`{"domain": "foo"}`))
		r.Header.Set("Origin", tc.origin)
		r.Header.Set("Content-Type", "text/plain")
		code, _, body := serveOne(h, r)
		if code != tc.code || (code == 403) != (len(svc.got) == 0) {
			t.Errorf("Origin %q: %d %q, %d calls; want %d", tc.origin, code, body, len(svc.got), tc.code)
		}
	}
}

// TestEnvoyHealthcheck: GET /healthcheck answers 200 "OK" while healthy
// and 500 while not, as the reference's.
func TestEnvoyHealthcheck(t *testing.T) {
	var unhealthy error
	h := &envoyHTTP{healthy: func(context.Context) error { return unhealthy }, api: &fakeAPI{}}
	for _, tc := range []struct {
		err  error
		code int
		body string
	}{
		{nil, 200, "OK"},
		{errors.New("the store is down"), 500, ""},
		{nil, 200, "OK"},
	} {
		unhealthy = tc.err
		code, _, body := serveOne(h, httptest.NewRequest("GET", "/healthcheck", nil))
		if code != tc.code || (tc.body != "" && body != tc.body) {
			t.Errorf("healthy %v: %d %q; want %d %q", tc.err, code, body, tc.code, tc.body)
		}
	}
	r := httptest.NewRequest("GET", "/healthcheck", nil)
	if serveOne(h, r); routePath(r) != "/healthcheck" {
		t.Errorf("route %q, want /healthcheck", routePath(r))
	}
	if code, _, _ := serveOne(h, httptest.NewRequest("POST", "/healthcheck", nil)); code != http.StatusMethodNotAllowed {
		t.Errorf("POST /healthcheck: %d, want 405", code)
	}
}

// TestEnvoyHTTPClosedAPI: without an admin key off loopback, the compatible
// mode's --addr serves /healthcheck, /json, /healthz and /readyz, and
// nothing of Sluice's HTTP API; with one, the API is behind them.
func TestEnvoyHTTPClosedAPI(t *testing.T) {
	for _, closed := range []bool{true, false} {
		api := &fakeAPI{}
		h := &envoyHTTP{healthy: func(context.Context) error { return nil }, api: api, closed: closed}
		for _, r := range []struct{ method, path string }{
			{"GET", "/healthz"}, {"GET", "/readyz"}, {"HEAD", "/healthz"},
			{"POST", "/v1/check"}, {"GET", "/v1/tenants"}, {"GET", "/metrics"}, {"GET", "/dashboard"}, {"GET", "/"},
			{"POST", "/healthz"},
		} {
			api.got = nil
			code, _, body := serveOne(h, httptest.NewRequest(r.method, r.path, nil))
			probe := r.path == "/healthz" || r.path == "/readyz"
			served := !closed || (probe && r.method != "POST")
			if served != (len(api.got) == 1) || (served && code != 299) {
				t.Errorf("closed %v: %s %s: %d, the API got %v; want it served: %v", closed, r.method, r.path, code, api.got, served)
			}
			if !served && (code != 404 || !strings.Contains(body, "admin key")) {
				t.Errorf("closed %v: %s %s: %d %q, want 404 naming the admin key", closed, r.method, r.path, code, body)
			}
		}
		api.got = nil
		if code, _, _ := serveOne(h, httptest.NewRequest("GET", "/healthcheck", nil)); code != 200 || len(api.got) != 0 {
			t.Errorf("closed %v: /healthcheck %d, the API got %v", closed, code, api.got)
		}
	}
}
