package forward

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/wire"
)

// TestMain fails the package's tests if any goroutine outlives them: every
// Forwarder's idle connections close with Close.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func newForwarder(t *testing.T, tg Target) *Forwarder {
	t.Helper()
	if tg.Margin == 0 {
		tg.Margin = time.Minute // no slot is missed unless a test says so
	}
	f, err := New(tg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	return f
}

// TestURLStaysUnderBase: whatever path and query a caller gives, the
// address is the target's scheme and host, under its base path; a path
// that would climb out, or that a third party might read as another
// path (encoded '/' or '\', control characters), is refused.
func TestURLStaysUnderBase(t *testing.T) {
	f := newForwarder(t, Target{Name: "api", URL: mustURL(t, "https://api.example.com/v2")})
	for _, tc := range []struct{ path, query, want string }{
		{"", "", "https://api.example.com/v2/"},
		{"geocode", "q=paris&limit=3", "https://api.example.com/v2/geocode?q=paris&limit=3"},
		{"a/b%20c/d", "", "https://api.example.com/v2/a/b%20c/d"},
		{"items/", "", "https://api.example.com/v2/items/"},
		{"a%3Ab", "", "https://api.example.com/v2/a:b"},
		{"..", "", ""},
		{"a/../../admin", "", ""},
		{"%2e%2e/admin", "", ""},
		{"%2E%2E", "", ""},
		{"a/%2e/b", "", ""},
		{"a%2Fb", "", ""},
		{"a%5Cb", "", ""},
		{"a//b", "", ""},
		{"/evil.example.com", "", ""},
		{"a%00b", "", ""},
		{"a%0d%0aHost:%20evil", "", ""},
		{"a%zz", "", ""},
		{"ok", "a=1#frag", ""},
		{"ok", "a=1\r\nX: y", ""},
	} {
		u, err := f.URL(tc.path, tc.query)
		if tc.want == "" {
			if err == nil {
				t.Errorf("%q ?%q: %v, want refused", tc.path, tc.query, u)
			} else if k := sluice.KindOf(err); k != sluice.KindInvalid {
				t.Errorf("%q: kind %v", tc.path, k)
			}
			continue
		}
		if err != nil || u.String() != tc.want || u.Host != "api.example.com" || u.Scheme != "https" {
			t.Errorf("%q ?%q: %v %v, want %s", tc.path, tc.query, u, err, tc.want)
		}
	}
}

// TestTargetCheck refuses an address a caller could bend, or that holds
// credentials, and headers Sluice must not set or forward.
func TestTargetCheck(t *testing.T) {
	for _, tc := range []struct {
		t    Target
		want string
	}{
		{Target{URL: mustURL(t, "ftp://x/"), Margin: 1}, "http or https"},
		{Target{URL: mustURL(t, "https:///path"), Margin: 1}, "host"},
		{Target{URL: mustURL(t, "https://user:pw@x/"), Margin: 1}, "no user"},
		{Target{URL: mustURL(t, "https://x/?a=1"), Margin: 1}, "no query"},
		{Target{URL: mustURL(t, "https://x/")}, "Margin"},
		{Target{URL: mustURL(t, "https://x/"), Margin: 1, Forward: []string{"authorization"}}, "never forwarded"},
		{Target{URL: mustURL(t, "https://x/"), Margin: 1, Forward: []string{"Sluice-Key"}}, "never forwarded"},
		{Target{URL: mustURL(t, "https://x/"), Margin: 1, Headers: http.Header{"Host": {"evil"}}}, "may not be set"},
		{Target{URL: mustURL(t, "https://x/"), Margin: 1, Headers: http.Header{"X-Key": {"a\r\nB: c"}}}, "line break"},
		{Target{URL: mustURL(t, "https://x/"), Margin: 1, Headers: http.Header{"Authorization": {"Bearer s3cret"}}}, ""},
	} {
		err := tc.t.Check()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: %v, want %q", tc.t, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "pw") {
			t.Errorf("the error shows the password: %v", err)
		}
	}
}

// standIn is an upstream that echoes what it received.
func standIn(t *testing.T, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// send sends r through f as granted at granted, and returns the answer.
func send(t *testing.T, f *Forwarder, r *http.Request, path string, granted time.Time) *httptest.ResponseRecorder {
	t.Helper()
	body, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	u, err := f.URL(path, r.URL.RawQuery)
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	f.Send(w, r, Call{URL: u, Body: body, Granted: granted})
	return w
}

// TestHeadersPassed: the caller's Authorization (Sluice's key), cookies,
// Sluice's own headers, forwarding and hop-by-hop headers never reach the
// third party; the target's credentials do, replacing any the caller
// sent; and the third party's cookies and hop-by-hop headers never come
// back.
func TestHeadersPassed(t *testing.T) {
	var got http.Header
	var gotBody, gotHost string
	srv := standIn(t, func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
		gotHost = r.Host
		b, _ := io.ReadAll(r.Body)
		gotBody = string(b)
		w.Header().Set("Set-Cookie", "session=upstream")
		w.Header().Set("X-Upstream", "yes")
		w.Header().Set("Connection", "X-Hop")
		w.Header().Set("X-Hop", "1")
		w.Header().Set(wire.HeaderProxyError, "forged")
		w.WriteHeader(201)
		io.WriteString(w, "made")
	})
	f := newForwarder(t, Target{Name: "api", URL: mustURL(t, srv.URL+"/base/"), Headers: http.Header{"X-Api-Key": {"operator-secret"}}, Forward: []string{"X-Trace"}})
	r := httptest.NewRequest("POST", "http://sluice/v1/upstreams/api/proxy/things?a=1", strings.NewReader(`{"x":1}`))
	for k, v := range map[string]string{
		"Authorization": "Bearer tenant-key-of-sluice", "Cookie": "sluice=1", wire.HeaderKey: "u1", wire.HeaderTenant: "acme",
		"X-Forwarded-For": "6.6.6.6", "X-Api-Key": "tenant-forged", "X-Trace": "t-1", "X-Other": "dropped",
		"Content-Type": "application/json", "Connection": "X-Private", "X-Private": "hop", "Proxy-Authorization": "x",
	} {
		r.Header.Set(k, v)
	}
	w := send(t, f, r, "things", time.Now())
	if w.Code != 201 || w.Body.String() != "made" || w.Header().Get("X-Upstream") != "yes" {
		t.Fatalf("answer: %d %q %v", w.Code, w.Body, w.Header())
	}
	if w.Header().Get("Set-Cookie") != "" || w.Header().Get("X-Hop") != "" || w.Header().Get(wire.HeaderProxyError) != "" || w.Header().Get(wire.HeaderSentAt) == "" {
		t.Errorf("passed back: %v", w.Header())
	}
	for _, h := range []string{"Authorization", "Cookie", wire.HeaderKey, wire.HeaderTenant, "X-Forwarded-For", "X-Other", "X-Private", "Proxy-Authorization"} {
		if v := got.Get(h); v != "" {
			t.Errorf("forwarded %s: %q", h, v)
		}
	}
	if got.Get("X-Api-Key") != "operator-secret" || got.Get("X-Trace") != "t-1" || got.Get("Content-Type") != "application/json" {
		t.Errorf("sent: %v", got)
	}
	if gotBody != `{"x":1}` || gotHost != mustURL(t, srv.URL).Host {
		t.Errorf("body %q host %q", gotBody, gotHost)
	}
}

// TestBounds: a body over MaxBody is refused before anything is sent; a
// response over MaxResponse is not passed on, whether its length is
// declared (502) or not (the answer is cut off, never more than the
// bound); a slow upstream answers 504 at the timeout; a send that cannot
// start within half the margin of its grant is not sent (503).
func TestBounds(t *testing.T) {
	var calls atomic.Int64
	block := make(chan struct{})
	srv := standIn(t, func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		switch r.URL.Path {
		case "/big":
			w.Header().Set("Content-Length", "2000")
			w.Write(make([]byte, 2000))
		case "/stream":
			for range 20 {
				w.Write(make([]byte, 100))
				w.(http.Flusher).Flush()
			}
		case "/slow":
			select {
			case <-block:
			case <-r.Context().Done():
			}
		}
	})
	defer close(block)
	f := newForwarder(t, Target{Name: "api", URL: mustURL(t, srv.URL), MaxBody: 10, MaxResponse: 1000, Timeout: 200 * time.Millisecond, Margin: time.Second})

	r := httptest.NewRequest("POST", "http://sluice/x", strings.NewReader(strings.Repeat("a", 11)))
	if _, err := f.ReadBody(httptest.NewRecorder(), r); sluice.FieldOf(err) != "body" {
		t.Errorf("a body of 11 bytes: %v, want refused", err)
	}
	r = httptest.NewRequest("POST", "http://sluice/x", strings.NewReader(strings.Repeat("a", 11)))
	r.ContentLength = -1
	if _, err := f.ReadBody(httptest.NewRecorder(), r); sluice.FieldOf(err) != "body" {
		t.Errorf("a body of 11 bytes of no declared length: %v, want refused", err)
	}

	if w := send(t, f, httptest.NewRequest("GET", "http://sluice/x", nil), "big", time.Now()); w.Code != 502 || !strings.Contains(w.Body.String(), wire.ProxyFailed) {
		t.Errorf("declared 2000 bytes: %d %s", w.Code, w.Body)
	}
	// Not in a server, the proxy cannot abort the connection: it stops
	// copying at the bound.
	if w := send(t, f, httptest.NewRequest("GET", "http://sluice/x", nil), "stream", time.Now()); w.Body.Len() > 1000 {
		t.Errorf("streamed %d bytes past the bound of 1000", w.Body.Len())
	}
	w := send(t, f, httptest.NewRequest("GET", "http://sluice/x", nil), "slow", time.Now())
	if w.Code != 504 || !strings.Contains(w.Body.String(), `"upstream":"api"`) || strings.Contains(w.Body.String(), srv.URL) {
		t.Errorf("slow: %d %s", w.Code, w.Body)
	}
	before := calls.Load()
	w = send(t, f, httptest.NewRequest("GET", "http://sluice/x", nil), "late", time.Now().Add(-time.Second))
	if w.Code != 503 || !strings.Contains(w.Body.String(), wire.ProxySlotMissed) || w.Header().Get("Retry-After") != "1" || calls.Load() != before {
		t.Errorf("late: %d %s, %d calls arrived", w.Code, w.Body, calls.Load()-before)
	}
}

// TestUnreachable answers 502 naming the upstream, not its address.
func TestUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	addr := srv.URL
	srv.Close()
	f := newForwarder(t, Target{Name: "api", URL: mustURL(t, addr)})
	w := send(t, f, httptest.NewRequest("GET", "http://sluice/x", nil), "", time.Now())
	if w.Code != 502 || !strings.Contains(w.Body.String(), `"upstream":"api"`) || strings.Contains(w.Body.String(), addr) {
		t.Errorf("%d %s", w.Code, w.Body)
	}
}

// TestEnterBounds: the calls in flight are bounded per tenant and per
// server, and a tenant's entry is forgotten with its last call.
func TestEnterBounds(t *testing.T) {
	f := newForwarder(t, Target{URL: mustURL(t, "http://x/"), MaxConcurrent: 3, MaxPerTenant: 2})
	a1, err1 := f.Enter("a")
	_, err2 := f.Enter("a")
	_, err3 := f.Enter("a")
	if err1 != nil || err2 != nil || !errors.Is(err3, ErrTenantBusy) {
		t.Fatalf("a: %v %v %v", err1, err2, err3)
	}
	b1, err := f.Enter("b")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Enter("c"); !errors.Is(err, ErrServerBusy) {
		t.Fatalf("c: %v, want the server busy", err)
	}
	b1()
	b1() // twice is once
	if calls, tenants := f.InFlight(); calls != 2 || tenants != 1 {
		t.Errorf("in flight %d of %d tenants, want 2 of 1", calls, tenants)
	}
	a1()
	if _, err := f.Enter("c"); err != nil {
		t.Error(err)
	}
}
