package httpapi

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/wire"
)

// arrivals is a stand-in upstream that notes when each call arrives (its
// own clock, at the start of its handler), by the id in its query, and
// what it saw of each.
type arrivals struct {
	mu    sync.Mutex
	at    map[string]time.Time
	seen  []*http.Request
	hosts []string
	block chan struct{} // calls to /slow wait for it
}

func newArrivals(t *testing.T) (*arrivals, *httptest.Server) {
	t.Helper()
	a := &arrivals{at: map[string]time.Time{}, block: make(chan struct{})}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		a.mu.Lock()
		a.at[r.URL.Query().Get("id")] = now
		a.seen = append(a.seen, r.Clone(context.Background()))
		a.hosts = append(a.hosts, r.Host)
		a.mu.Unlock()
		if strings.HasSuffix(r.URL.Path, "/slow") {
			select {
			case <-a.block:
			case <-r.Context().Done():
			}
			return
		}
		w.Header().Set("X-Stand-In", "yes")
		w.Header().Set("Set-Cookie", "upstream-session=1")
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprintf(w, "%s %s %s", r.Method, r.URL.Path, r.URL.Query().Get("id"))
	}))
	t.Cleanup(func() {
		close(a.block)
		srv.Close()
	})
	return a, srv
}

func (a *arrivals) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.seen)
}

// mostIn returns the most times in any interval [t, t+w) of ts.
func mostIn(ts []time.Time, w time.Duration) int {
	ts = slices.Clone(ts)
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	most, j := 0, 0
	for i := range ts {
		for ts[i].Sub(ts[j]) >= w {
			j++
		}
		most = max(most, i-j+1)
	}
	return most
}

// proxyCall sends a proxied call with a tenant's key and the headers
// given, and returns its status, headers and body.
func (s *service) proxyCall(t *testing.T, key, method, path, body string, headers map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, s.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// TestProxyArrivalsWithinRate: 160 calls from two tenants and eight
// customers, 40 at a time, through the proxy route to a stand-in upstream
// of 50 a second. The scheduler grants at most 50 in any 1.1 s (the
// window and the margin of 100 ms); the proxy starts each send within
// 50 ms of its grant or not at all. So the stand-in sees at most 50
// arrivals in any second while the time from grant to arrival varies by
// at most the margin: the test measures that spread (J) and asserts the
// bound over windows of 1s less whatever J passed the margin by, which on
// a quiet machine is the whole second and on a stalled one still holds
// (the theorem, not a hope). Every call is answered, by the stand-in or,
// if the server could not send it in time, 503 slot missed.
func TestProxyArrivalsWithinRate(t *testing.T) {
	const (
		rate   = 50
		window = time.Second
		margin = 100 * time.Millisecond
		calls  = 160
	)
	a, up := newArrivals(t)
	s := newUpstreamServiceOf(t, fmt.Sprintf(`
tiers: {free: {}, premium: {}}
upstreams:
  partner:
    rate: %d
    window: %v
    burst: 5
    maxWait: 30s
    margin: %v
    proxy: {url: %q, timeout: 10s}
`, rate, window, margin, up.URL+"/api"))

	type result struct {
		id            string
		status        int
		granted, sent time.Time
		body          string
	}
	results := make(chan result, calls)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 40)
	for i := range calls {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			key, tenant := s.acme, "acme"
			if i%2 == 1 {
				key, tenant = s.beta, "beta"
			}
			id := strconv.Itoa(i)
			req, _ := http.NewRequest("GET", s.srv.URL+"/v1/upstreams/partner/proxy/geocode?id="+id, nil)
			req.Header.Set("Authorization", "Bearer "+key)
			req.Header.Set(wire.HeaderKey, tenant+"-u"+strconv.Itoa(i%8))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				results <- result{id: id, status: -1, body: err.Error()}
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			g, _ := time.Parse(time.RFC3339Nano, resp.Header.Get(wire.HeaderGrantedAt))
			sent, _ := time.Parse(time.RFC3339Nano, resp.Header.Get(wire.HeaderSentAt))
			results <- result{id, resp.StatusCode, g, sent, string(b)}
		}()
	}
	wg.Wait()
	close(results)

	var grants, sends, arrived []time.Time
	minD, maxD := time.Duration(1<<62), time.Duration(-1<<62)
	missed := 0
	a.mu.Lock()
	defer a.mu.Unlock()
	for r := range results {
		switch {
		case r.status == http.StatusAccepted && r.body == "GET /api/geocode "+r.id:
			// What the server controls, asserted exactly: each send
			// starts within half the margin of its grant (a millisecond
			// more for the wall clock's slew).
			if lag := r.sent.Sub(r.granted); lag < 0 || lag > margin/2+time.Millisecond {
				t.Errorf("call %s: sent %v after its grant, past half the margin %v", r.id, lag, margin/2)
			}
			sends = append(sends, r.sent)
		case r.status == http.StatusServiceUnavailable && strings.Contains(r.body, wire.ProxySlotMissed):
			missed++
			if _, ok := a.at[r.id]; ok {
				t.Errorf("call %s: slot missed, yet it arrived", r.id)
			}
		default:
			t.Fatalf("call %s: %d %s", r.id, r.status, r.body)
		}
		if r.granted.IsZero() {
			t.Fatalf("call %s: no %s", r.id, wire.HeaderGrantedAt)
		}
		grants = append(grants, r.granted)
		if at, ok := a.at[r.id]; ok {
			arrived = append(arrived, at)
			d := at.Sub(r.granted)
			minD, maxD = min(minD, d), max(maxD, d)
		}
	}
	if got := mostIn(grants, window+margin); got > rate {
		t.Errorf("granted %d in a window of %v, over the rate %d", got, window+margin, rate)
	}
	if got := mostIn(sends, window+margin/2-time.Millisecond); got > rate {
		t.Errorf("sent %d in a window of %v, over the rate %d", got, window+margin/2, rate)
	}
	spread := maxD - minD
	w := min(window, window+margin-spread-time.Millisecond)
	t.Logf("%d calls, %d sent (%d slots missed); grant to arrival %v to %v (spread %v); most arrivals in any %v: %d; in any %v: %d",
		calls, len(arrived), missed, minD, maxD, spread, window, mostIn(arrived, window), w, mostIn(arrived, w))
	// Past a spread of a window and the margin, the path to the upstream
	// (here the loaded machine) bounds nothing: the sends above are what
	// the server answers for.
	if w <= 0 {
		t.Logf("grant to arrival spread %v, over a window and the margin: no bound on arrivals to check", spread)
	} else if got := mostIn(arrived, w); got > rate {
		t.Errorf("the stand-in saw %d arrivals in %v, over the rate %d (grant to arrival spread %v, margin %v)", got, w, rate, spread, margin)
	}
	if len(arrived) != len(a.seen) || len(arrived) < calls/2 {
		t.Errorf("%d arrivals of %d answered calls, %d seen", len(arrived), calls, len(a.seen))
	}
}

// hostileYAML: "partner" proxies to the stand-in's /api with the
// operator's key, small bounds and a short timeout; "plain" has no proxy.
const hostileYAML = `
tiers: {free: {}, premium: {}}
upstreams:
  partner:
    rate: 100
    burst: 10
    maxWait: 5s
    proxy:
      url: %q
      timeout: 300ms
      maxBody: 1000
      maxResponse: 100000
      headers: {X-Api-Key: operator-secret}
      maxConcurrent: 4
      maxConcurrentPerTenant: 2
  plain: {rate: 10}
`

// TestProxyHostileTenant: what a tenant may not do through the proxy. A
// path that climbs out of the base, hides a '/' or names another host
// is refused 400 and nothing is sent; a body over the bound 413 before
// it waits; another tenant's customer 403; a slow upstream answers 504
// at the timeout; the tenant's Authorization (its Sluice key) and Sluice's
// headers never reach the upstream, the operator's key does, and only to
// the configured host; an upstream's cookie never comes back; a tenant
// with its bound of calls in flight is refused 429 busy, while another
// tenant is not.
func TestProxyHostileTenant(t *testing.T) {
	a, up := newArrivals(t)
	s := newUpstreamServiceOf(t, fmt.Sprintf(hostileYAML, up.URL+"/api/"))
	key := map[string]string{wire.HeaderKey: "u1"}

	resp, body := s.proxyCall(t, s.acme, "POST", "/v1/upstreams/partner/proxy/v1/items?id=ok", `{"a":1}`, map[string]string{
		wire.HeaderKey: "u1", "Content-Type": "application/json", "Cookie": "sluice=1", "X-Forwarded-Host": "evil.example",
		"Host": "evil.example", "X-Api-Key": "forged",
	})
	if resp.StatusCode != http.StatusAccepted || body != "POST /api/v1/items ok" || resp.Header.Get("X-Stand-In") != "yes" {
		t.Fatalf("a plain call: %d %s", resp.StatusCode, body)
	}
	if resp.Header.Get("Set-Cookie") != "" || resp.Header.Get(wire.HeaderGrantedAt) == "" {
		t.Errorf("answer headers: %v", resp.Header)
	}
	a.mu.Lock()
	got := a.seen[0]
	if got.Header.Get("Authorization") != "" || got.Header.Get("Cookie") != "" || got.Header.Get(wire.HeaderKey) != "" ||
		got.Header.Get("X-Forwarded-Host") != "" || got.Header.Get("X-Api-Key") != "operator-secret" || a.hosts[0] != strings.TrimPrefix(up.URL, "http://") {
		t.Errorf("the upstream saw host %s, headers %v", a.hosts[0], got.Header)
	}
	a.mu.Unlock()

	for _, path := range []string{
		"%2e%2e/secret", "..%2Fsecret", "a/%2E%2E/%2E%2E/secret", "http:%2F%2Fevil.example%2Fx", "a%5C..%5Csecret", "a%00b",
	} {
		before := a.count()
		resp, body := s.proxyCall(t, s.acme, "GET", "/v1/upstreams/partner/proxy/"+path, "", key)
		if resp.StatusCode != 400 || !strings.Contains(body, `"field":"path"`) || a.count() != before {
			t.Errorf("path %s: %d %s; the upstream saw %d calls", path, resp.StatusCode, body, a.count()-before)
		}
	}
	// Paths the server cleans, or that name a host, are still under the
	// base on the configured host, whatever the tenant's client does.
	for _, path := range []string{"../../tenants", "a/./b", "//evil.example/x", "http://evil.example/x"} {
		s.proxyCall(t, s.acme, "GET", "/v1/upstreams/partner/proxy/"+path, "", key)
	}
	// A request line in absolute form, naming another host.
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "GET http://evil.example/v1/upstreams/partner/proxy/abs?id=abs HTTP/1.1\r\nHost: evil.example\r\nAuthorization: Bearer %s\r\n%s: u1\r\nConnection: close\r\n\r\n", s.acme, wire.HeaderKey)
	if status, err := bufio.NewReader(conn).ReadString('\n'); err != nil || !strings.Contains(status, " 202 ") {
		t.Errorf("absolute form: %q %v", status, err)
	}
	conn.Close()
	a.mu.Lock()
	for i, r := range a.seen {
		if !strings.HasPrefix(r.URL.Path, "/api/") || a.hosts[i] != strings.TrimPrefix(up.URL, "http://") {
			t.Errorf("the upstream saw %s on host %s", r.URL.Path, a.hosts[i])
		}
	}
	a.mu.Unlock()

	before := a.count()
	st := s.state(t, "partner")
	resp, body = s.proxyCall(t, s.acme, "POST", "/v1/upstreams/partner/proxy/big", strings.Repeat("x", 5000), key)
	if resp.StatusCode != 413 || !strings.Contains(body, `"field":"body"`) || a.count() != before || granted(s.state(t, "partner")) != granted(st) {
		t.Errorf("a body of 5000 bytes: %d %s", resp.StatusCode, body)
	}
	resp, body = s.proxyCall(t, s.beta, "GET", "/v1/upstreams/partner/proxy/x", "", map[string]string{wire.HeaderKey: "u1", wire.HeaderTenant: "acme"})
	if resp.StatusCode != 403 || a.count() != before || granted(s.state(t, "partner")) != granted(st) {
		t.Errorf("beta as acme: %d %s", resp.StatusCode, body)
	}
	resp, body = s.proxyCall(t, s.acme, "GET", "/v1/upstreams/partner/proxy/x", "", nil)
	if resp.StatusCode != 400 || !strings.Contains(body, wire.HeaderKey) {
		t.Errorf("no key: %d %s", resp.StatusCode, body)
	}
	resp, body = s.proxyCall(t, s.acme, "GET", "/v1/upstreams/plain/proxy/x", "", key)
	if resp.StatusCode != 404 || !strings.Contains(body, "no proxy") {
		t.Errorf("an upstream without a proxy: %d %s", resp.StatusCode, body)
	}
	resp, body = s.proxyCall(t, s.acme, "GET", "/v1/upstreams/partner/proxy/x", "", map[string]string{wire.HeaderKey: "u1", wire.HeaderCost: "11"})
	if resp.StatusCode != 400 || !strings.Contains(body, wire.HeaderCost) {
		t.Errorf("a cost over the burst: %d %s", resp.StatusCode, body)
	}

	start := time.Now()
	resp, body = s.proxyCall(t, s.acme, "GET", "/v1/upstreams/partner/proxy/slow", "", key)
	if resp.StatusCode != 504 || !strings.Contains(body, `"upstream":"partner"`) || strings.Contains(body, up.URL) || time.Since(start) < 300*time.Millisecond {
		t.Errorf("a slow upstream: %d %s after %v", resp.StatusCode, body, time.Since(start))
	}

	// Two calls of acme held at the stand-in: its third is refused, busy;
	// beta's goes.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var held sync.WaitGroup
	for range 2 {
		held.Add(1)
		req, _ := http.NewRequestWithContext(ctx, "GET", s.srv.URL+"/v1/upstreams/partner/proxy/slow", nil)
		req.Header.Set("Authorization", "Bearer "+s.acme)
		req.Header.Set(wire.HeaderKey, "u1")
		go func() {
			defer held.Done()
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
	s.waitState(t, "partner", "acme's two calls in flight", func(st map[string]any) bool {
		p, _ := st["proxy"].(map[string]any)
		return p != nil && p["inFlight"] == 2.0
	})
	resp, body = s.proxyCall(t, s.acme, "GET", "/v1/upstreams/partner/proxy/x", "", key)
	if resp.StatusCode != 429 || !strings.Contains(body, `"reason":"busy"`) || resp.Header.Get("Retry-After") == "" {
		t.Errorf("acme's third: %d %s", resp.StatusCode, body)
	}
	if resp, body := s.proxyCall(t, s.beta, "GET", "/v1/upstreams/partner/proxy/x", "", key); resp.StatusCode != http.StatusAccepted {
		t.Errorf("beta's: %d %s", resp.StatusCode, body)
	}
	cancel()
	held.Wait()
}

// TestProxyRefusedAsAcquire: a proxied call whose wait would pass its
// Sluice-Max-Wait is refused as an acquire is (429, Retry-After, reason
// shortage), and nothing is sent.
func TestProxyRefusedAsAcquire(t *testing.T) {
	a, up := newArrivals(t)
	s := newUpstreamServiceOf(t, fmt.Sprintf("tiers: {free: {}, premium: {}}\nupstreams:\n  partner:\n    rate: 1\n    window: 10s\n    maxWait: 1m\n    proxy: {url: %q}\n", up.URL))
	key := map[string]string{wire.HeaderKey: "u1", wire.HeaderMaxWait: "100ms"}
	if resp, body := s.proxyCall(t, s.acme, "GET", "/v1/upstreams/partner/proxy/x", "", key); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("first: %d %s", resp.StatusCode, body)
	}
	resp, body := s.proxyCall(t, s.beta, "GET", "/v1/upstreams/partner/proxy/x", "", key)
	if resp.StatusCode != 429 || !strings.Contains(body, `"reason":"shortage"`) || !strings.Contains(body, wire.UpstreamShortCode) || resp.Header.Get("Retry-After") == "" || a.count() != 1 {
		t.Errorf("second: %d %s, %d arrivals", resp.StatusCode, body, a.count())
	}
	resp, body = s.proxyCall(t, s.beta, "GET", "/v1/upstreams/partner/proxy/x", "", map[string]string{wire.HeaderKey: "u1", wire.HeaderMaxWait: "soon"})
	if resp.StatusCode != 400 || !strings.Contains(body, wire.HeaderMaxWait) {
		t.Errorf("a bad wait: %d %s", resp.StatusCode, body)
	}
}
