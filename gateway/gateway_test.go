package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/store/memstore"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type fixture struct {
	g        *Gateway
	srv      *httptest.Server
	eng      *engine.Engine
	store    *stallingStore
	sessions *memstore.Sessions
	clock    *clock
	settings sluice.TenantSettings
	counted  *countingSessions // the gateway's session store: f.sessions, counted
	deleted  sync.Map          // tenant -> true once deleted
	opts     Options           // the gateway's, for more nodes
	since    sync.Map          // tenant -> time.Time it was created, if not zero
}

// stallingStore is a memory store that, while stalled, answers nothing
// until the caller's deadline: a store that has become slow. Its next lose
// writes land but are answered only by the deadline, as a network that
// loses the answer does.
type stallingStore struct {
	*memstore.Store
	stalled atomic.Bool
	lose    atomic.Int32
	lost    atomic.Int32 // writes landed whose answer was lost
	slow    atomic.Int64 // a delay before each decision, in nanoseconds
	applies atomic.Int64 // decisions asked
}

func (s *stallingStore) Apply(ctx context.Context, now time.Time, ops []sluice.Op, dst []sluice.Decision) error {
	s.applies.Add(1)
	if d := time.Duration(s.slow.Load()); d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if s.stalled.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	if s.lose.Add(-1) >= 0 {
		if err := s.Store.Apply(ctx, now, ops, dst); err != nil {
			return err
		}
		s.lost.Add(1)
		<-ctx.Done()
		return ctx.Err()
	}
	s.lose.Store(0)
	return s.Store.Apply(ctx, now, ops, dst)
}

// newFixture is a gateway on a memory store, for tenants acme and beta
// with settings s. Its engine gives the store 200ms to decide.
func newFixture(t *testing.T, s sluice.TenantSettings, opts Options) *fixture {
	t.Helper()
	c := &clock{t: time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)}
	store := &stallingStore{Store: memstore.New(memstore.Options{Now: c.now})} // its sweep on the test's clock too
	f := &fixture{sessions: &memstore.Sessions{}, clock: c, settings: s, store: store}
	f.eng = engine.New(store, engine.Options{Now: c.now, Timeout: 200 * time.Millisecond})
	f.counted = &countingSessions{Sessions: f.sessions}
	opts.Limiter, opts.Sessions, opts.Now = f.eng, f.counted, c.now
	opts.Tenant = func(ctx context.Context, tenant string) (Tenant, bool, error) {
		_, gone := f.deleted.Load(tenant)
		since, _ := f.since.Load(tenant)
		t := Tenant{Settings: s}
		if since != nil {
			t.Since = since.(time.Time)
		}
		return t, (tenant == "acme" || tenant == "beta") && !gone, nil
	}
	f.opts = opts
	f.g = New(opts)
	f.srv = httptest.NewServer(f.g)
	t.Cleanup(func() { f.srv.Close(); f.g.Close(); store.Close() })
	return f
}

// node starts another gateway on the fixture's store, engine and sessions,
// as another node of a cluster would be, and returns its server.
func (f *fixture) node(t *testing.T) (*Gateway, *httptest.Server) {
	t.Helper()
	g := New(f.opts)
	srv := httptest.NewServer(g)
	t.Cleanup(func() { srv.Close(); g.Close() })
	return g, srv
}

// peekInternal reads one of the gateway's own counters without consuming.
func (f *fixture) peekInternal(tenant string, p sluice.Policy, key string) (sluice.Decision, error) {
	res, err := f.eng.Check(context.Background(), sluice.Request{Tenant: tenant, Checks: []sluice.Check{{Policy: p, Key: key, Space: sluice.SpaceInternal}}})
	return res.Decision, err
}

func (f *fixture) session(t *testing.T, id string) {
	t.Helper()
	f.sessionOf(t, "acme", id)
}

// sessionOf makes a session of tenant.
func (f *fixture) sessionOf(t *testing.T, tenant, id string) {
	t.Helper()
	now := f.clock.now()
	if err := f.sessions.CreateSession(context.Background(), sluice.Session{Tenant: tenant, ID: id, CreatedAt: now, ExpiresAt: now.Add(time.Duration(f.settings.SessionTTL) * time.Second)}); err != nil {
		t.Fatal(err)
	}
}

// patience bounds every wait: generous, since the machines that run the
// tests are shared, yet bounded, so that a hang fails.
const patience = 30 * time.Second

// dial connects, and returns once the gateway has registered the
// connection: the handshake's answer comes before that, and a message sent
// in between would not reach the connection. The signal is a frame posted
// to the connection through the management API, which finds it only once
// registered; the frame is read here.
// mustDial connects, failing the test if the connect is refused.
func (f *fixture) mustDial(t *testing.T, tenant, session string) *websocket.Conn {
	t.Helper()
	ws, _, err := f.dial(tenant, session)
	if err != nil {
		t.Fatal(err)
	}
	return ws
}

func (f *fixture) dial(tenant, session string) (*websocket.Conn, *http.Response, error) {
	return f.dialWith(tenant, session, nil)
}

// dialWith is dial with the client's options.
func (f *fixture) dialWith(tenant, session string, opts *websocket.DialOptions) (*websocket.Conn, *http.Response, error) {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	u := "ws" + strings.TrimPrefix(f.srv.URL, "http") + "/v1/ws?tenant=" + tenant + "&session=" + session
	ws, resp, err := websocket.Dial(ctx, u, opts)
	if err != nil {
		return ws, resp, err
	}
	id := resp.Header.Get("Sluice-Connection")
	for f.g.PostToConnection(context.Background(), tenant, id, []byte(readyFrame), true) != nil {
		if ctx.Err() != nil {
			ws.CloseNow()
			return nil, resp, fmt.Errorf("connection %s not registered within %v", id, patience)
		}
		time.Sleep(time.Millisecond) // the poll's period
	}
	if _, b, err := ws.Read(ctx); err != nil || string(b) != readyFrame {
		ws.CloseNow()
		return nil, resp, fmt.Errorf("connection %s: the ready frame: %q %v", id, b, err)
	}
	return ws, resp, nil
}

const readyFrame = `{"ready":true}`

var roomy = sluice.TenantSettings{ConnectionsPerSession: 100, TenantConnections: 100, SessionPerMinute: 100, TenantPerMinute: 100, SessionTTL: 300, MessagesPerMinute: 100}

// TestAdmissionExactAndRefusalsFree: 20 concurrent connects against a
// tenant limit of 5 admit exactly 5; the 15 refused consumed nothing of the
// per-minute rate.
func TestAdmissionExactAndRefusalsFree(t *testing.T) {
	s := roomy
	s.TenantConnections, s.TenantPerMinute = 5, 7
	f := newFixture(t, s, Options{})
	f.session(t, "s1")
	var admitted atomic.Int64
	var mu sync.Mutex
	var conns []*websocket.Conn
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			ws, resp, err := f.dial("acme", "s1")
			if err == nil {
				admitted.Add(1)
				mu.Lock()
				conns = append(conns, ws)
				mu.Unlock()
				return
			}
			if resp == nil || resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
				t.Errorf("refusal: %v %+v", err, resp)
			}
		})
	}
	wg.Wait()
	if admitted.Load() != 5 {
		t.Fatalf("admitted %d of 20 at a limit of 5", admitted.Load())
	}
	for _, ws := range conns {
		ws.Close(websocket.StatusNormalClosure, "")
	}
	waitFor(t, "connections gone", func() bool { return f.g.Connections() == 0 })
	// Disconnect released the leases at once (the clock has not moved).
	tenantConns := sluice.Policy{Name: policyTenantConns, Algorithm: sluice.Concurrency, Limit: 5, LeaseTTL: 3 * f.g.opts.RenewEvery}
	waitFor(t, "leases released", func() bool {
		d, err := f.peekInternal("acme", tenantConns, "")
		return err == nil && d.Remaining == 5
	})
	// 5 of the 7 per minute were spent by the admitted; the 15 refusals
	// spent nothing: two more connect, the third is refused by the rate.
	for i := range 3 {
		ws, resp, err := f.dial("acme", "s1")
		if i < 2 && err != nil {
			t.Fatalf("connect %d after the refusals: %v", i, err)
		}
		if i == 2 {
			if err == nil || resp.StatusCode != 429 {
				t.Fatalf("third connect: %v", err)
			}
			var body refusal
			json.NewDecoder(resp.Body).Decode(&body)
			if body.Limit != policyTenantRate {
				t.Fatalf("refused by %q, want the tenant rate", body.Limit)
			}
			continue
		}
		defer ws.Close(websocket.StatusNormalClosure, "")
	}
}

func TestUnknownTenantOrSessionIs403(t *testing.T) {
	f := newFixture(t, roomy, Options{})
	f.session(t, "s1")
	// beta exists, but s1 is acme's: a session id reaches only its tenant.
	for _, q := range [][2]string{{"ghost", "s1"}, {"acme", "nope"}, {"beta", "s1"}} {
		_, resp, err := f.dial(q[0], q[1])
		if err == nil || resp == nil || resp.StatusCode != 403 {
			t.Errorf("%v: %v %+v", q, err, resp)
		}
	}
}

func read(t *testing.T, ws *websocket.Conn) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	_, b, err := ws.Read(ctx)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("frame %s: %v", b, err)
	}
	return m
}

func write(t *testing.T, ws *websocket.Conn, s string) {
	t.Helper()
	if err := ws.Write(context.Background(), websocket.MessageText, []byte(s)); err != nil {
		t.Fatal(err)
	}
}

// TestEchoAndFanOut: the sender gets its echo; every other connection of
// the session gets the message and the reply; other sessions get nothing.
func TestEchoAndFanOut(t *testing.T) {
	f := newFixture(t, roomy, Options{})
	f.session(t, "s1")
	f.session(t, "s2")
	a := f.mustDial(t, "acme", "s1")
	defer a.Close(websocket.StatusNormalClosure, "")
	b := f.mustDial(t, "acme", "s1")
	defer b.Close(websocket.StatusNormalClosure, "")
	other := f.mustDial(t, "acme", "s2")
	defer other.Close(websocket.StatusNormalClosure, "")

	write(t, a, `{"action":"silo","data":"hello","id":"m1"}`)
	if m := read(t, a); m["type"] != "echo" || m["data"] != "hello" {
		t.Fatalf("echo %v", m)
	}
	if m := read(t, b); m["type"] != "message" || m["data"] != "hello" {
		t.Fatalf("peer's message %v", m)
	}
	if m := read(t, b); m["type"] != "reply" {
		t.Fatalf("peer's reply %v", m)
	}
	// The other session's own message goes through the tenant's silo
	// queue, whose one worker finished the first message's fan-out before
	// it: so its echo is the first frame it gets, unless it received the
	// first message too. No timed wait for nothing to arrive.
	write(t, other, `{"action":"silo","data":"mine"}`)
	if m := read(t, other); m["type"] != "echo" || m["data"] != "mine" {
		t.Fatalf("another session received %v before its own echo", m)
	}
}

// TestDeliveredFrames: the frames a delivery sends, built around the
// client's data as it sent it, decode to what marshalling them whole gave.
func TestDeliveredFrames(t *testing.T) {
	for _, in := range []string{
		`{"action":"pooled","data":{"b": [1, 2.50, "x"], "a":null},"id":"m1"}`,
		`{"action":"silo","data":"<a href=\"x\">&amp;</a> \u00e9 é \ud83d\ude00"}`,
		`{"action":"pooled"}`,
		`{"action":"pooled","data":null,"id":"\"quoted\" \n id"}`,
		`{"data":  [ ] , "action":"pooled"}`,
	} {
		var f frame
		if err := json.Unmarshal([]byte(in), &f); err != nil {
			t.Fatal(err)
		}
		conn := `s"1.abc`
		for _, tc := range []struct {
			typ, key string
			want     map[string]any
		}{
			{"message", "from", map[string]any{"type": "message", "from": conn, "action": f.Action, "data": f.Data, "id": f.ID}},
			{"reply", "to", map[string]any{"type": "reply", "to": conn, "action": f.Action, "data": f.Data, "id": f.ID}},
			{"echo", "", map[string]any{"type": "echo", "action": f.Action, "data": f.Data, "id": f.ID}},
		} {
			var got, want any
			b := delivered(f, tc.typ, tc.key, conn)
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatalf("%s of %s: %s: %v", tc.typ, in, b, err)
			}
			json.Unmarshal(mustJSON(tc.want), &want)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s of %s: %s, want %s", tc.typ, in, b, mustJSON(tc.want))
			}
		}
	}
}

func TestMessageLimitAtTheDoor(t *testing.T) {
	s := roomy
	s.MessagesPerMinute = 2
	f := newFixture(t, s, Options{})
	f.session(t, "s1")
	a := f.mustDial(t, "acme", "s1")
	defer a.Close(websocket.StatusNormalClosure, "")
	for i := range 3 {
		write(t, a, `{"action":"pooled","data":1}`)
		m := read(t, a)
		if i < 2 && m["type"] != "echo" {
			t.Fatalf("message %d: %v", i, m)
		}
		if i == 2 && (m["error"] != "Too Many Requests" || m["retryAfterMs"].(float64) <= 0) {
			t.Fatalf("third message: %v", m)
		}
	}
}

// TestTenantCannotResetGatewayCounters: a tenant's own check named as the
// gateway's message limit, under another algorithm, counts elsewhere: the
// gateway's counter is untouched, and the next message is still throttled.
func TestTenantCannotResetGatewayCounters(t *testing.T) {
	s := roomy
	s.MessagesPerMinute = 1
	f := newFixture(t, s, Options{})
	f.session(t, "s1")
	a := f.mustDial(t, "acme", "s1")
	defer a.Close(websocket.StatusNormalClosure, "")
	write(t, a, `{"action":"pooled","data":1}`)
	if m := read(t, a); m["type"] != "echo" {
		t.Fatalf("first message: %v", m)
	}
	// What POST /v1/check with an inline policy of that name does.
	for _, alg := range []sluice.Algorithm{sluice.FixedWindow, sluice.SlidingWindow, sluice.TokenBucket} {
		p := sluice.Policy{Name: policyTenantMessage, Algorithm: alg, Limit: 1000, Window: time.Minute}
		res, err := f.eng.Check(context.Background(), sluice.Request{Tenant: "acme", Hits: 1, Checks: []sluice.Check{{Policy: p}}})
		if err != nil || !res.Allowed {
			t.Fatalf("tenant's own %s check: %v %+v", alg, err, res)
		}
	}
	write(t, a, `{"action":"pooled","data":2}`)
	if m := read(t, a); m["error"] != "Too Many Requests" {
		t.Fatalf("second message after the tenant's checks: %v, want throttled", m)
	}
}

// TestStoreFailureIsNotALimit: a store that misses the deadline fails the
// connect with 503, never a 429 naming a limit nobody reached (the
// connection limits fail closed); a message is never throttled by it (the
// message limit fails open).
func TestStoreFailureIsNotALimit(t *testing.T) {
	f := newFixture(t, roomy, Options{})
	f.session(t, "s1")
	a := f.mustDial(t, "acme", "s1")
	defer a.Close(websocket.StatusNormalClosure, "")
	f.store.stalled.Store(true)
	_, resp, err := f.dial("acme", "s1")
	if err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("connect on a stalled store: %v %+v, want 503", err, resp)
	}
	var body map[string]any
	json.NewDecoder(resp.Body).Decode(&body)
	if body["error"] != "unavailable" || body["limit"] != nil {
		t.Fatalf("refusal body %v, want unavailable and no limit", body)
	}
	// The message limit fails open: the message goes through.
	write(t, a, `{"action":"pooled","data":1,"id":"m1"}`)
	if m := read(t, a); m["type"] != "echo" {
		t.Fatalf("message on a stalled store: %v, want it through (fail open), never throttled", m)
	}
	f.store.stalled.Store(false)
	write(t, a, `{"action":"pooled","data":2}`)
	if m := read(t, a); m["type"] != "echo" {
		t.Fatalf("message once the store is back: %v", m)
	}
}

// TestOriginChecked: a browser page of another origin cannot connect with
// a session id it got hold of, and consumes nothing trying; the server's
// own origin, an allowed one, and clients without an Origin connect.
func TestOriginChecked(t *testing.T) {
	s := roomy
	s.TenantPerMinute = 3
	f := newFixture(t, s, Options{AllowedOrigins: []string{"*.example.com"}})
	f.session(t, "s1")
	dial := func(origin string) (int, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		h := http.Header{}
		if origin != "" {
			h.Set("Origin", origin)
		}
		ws, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(f.srv.URL, "http")+"/v1/ws?tenant=acme&session=s1", &websocket.DialOptions{HTTPHeader: h})
		if err != nil {
			if resp == nil {
				return 0, err
			}
			return resp.StatusCode, nil
		}
		t.Cleanup(func() { ws.Close(websocket.StatusNormalClosure, "") })
		return 101, nil
	}
	for range 5 {
		if code, err := dial("https://evil.test"); code != http.StatusForbidden {
			t.Fatalf("another origin: %d %v, want 403", code, err)
		}
	}
	for _, origin := range []string{"", f.srv.URL, "https://app.example.com"} {
		if code, err := dial(origin); code != 101 {
			t.Fatalf("origin %q: %d %v, want admitted", origin, code, err)
		}
	}
}

// TestConnectionKnownBeforeItsID: when the 101 answer hands out a
// connection's id, the management API already knows it.
func TestConnectionKnownBeforeItsID(t *testing.T) {
	f := newFixture(t, roomy, Options{})
	f.session(t, "s1")
	var checked atomic.Int32
	f.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.g.ServeHTTP(&onHeader{ResponseWriter: w, f: func(code int) {
			if code != http.StatusSwitchingProtocols {
				return
			}
			id := w.Header().Get("Sluice-Connection")
			if _, err := f.g.ConnectionInfo(context.Background(), "acme", id, true); err != nil {
				t.Errorf("connection %q answered %v when its 101 was written", id, err)
			}
			checked.Add(1)
		}}, r)
	})
	ws := f.mustDial(t, "acme", "s1")
	defer ws.Close(websocket.StatusNormalClosure, "")
	if checked.Load() != 1 {
		t.Fatal("the 101 answer was not seen")
	}
}

// onHeader calls f with the status of the answer as it is written.
type onHeader struct {
	http.ResponseWriter
	f func(int)
}

func (o *onHeader) WriteHeader(code int) { o.f(code); o.ResponseWriter.WriteHeader(code) }

// Hijack keeps the connection hijackable for the WebSocket upgrade.
func (o *onHeader) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return o.ResponseWriter.(http.Hijacker).Hijack()
}

// TestTenantDeletionCloses: deleting a tenant closes its connections with
// 4001 at once on the node that deleted it (CloseTenant), and on another
// node at its next sweep, which finds the tenant gone; other tenants stay.
func TestTenantDeletionCloses(t *testing.T) {
	f := newFixture(t, roomy, Options{ExpiryEvery: 20 * time.Millisecond, CheckEvery: 20 * time.Millisecond})
	f.session(t, "s1")
	now := f.clock.now()
	f.sessions.CreateSession(context.Background(), sluice.Session{Tenant: "beta", ID: "b1", CreatedAt: now, ExpiresAt: now.Add(time.Hour)})
	here := f.mustDial(t, "acme", "s1")
	other := f.mustDial(t, "beta", "b1")
	defer other.Close(websocket.StatusNormalClosure, "")
	f.g.CloseTenant("acme")
	if code := closeCode(t, here); code != 4001 {
		t.Fatalf("deleted tenant's connection closed with %v, want 4001", code)
	}
	// Deleted through another node: this one's sweep sees it.
	f.session(t, "s2")
	there := f.mustDial(t, "acme", "s2")
	f.deleted.Store("acme", true)
	if code := closeCode(t, there); code != 4001 {
		t.Fatalf("connection of a tenant deleted elsewhere closed with %v, want 4001", code)
	}
	if _, resp, err := f.dial("acme", "s2"); err == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("connect to a deleted tenant: %v", err)
	}
	write(t, other, `{"action":"pooled","data":1}`)
	if m := read(t, other); m["type"] != "echo" {
		t.Fatalf("another tenant's connection: %v", m)
	}

	// Made anew under the same id, through another node, between two
	// sweeps: the sessions and connections of the earlier tenant are not
	// the new one's.
	f.deleted.Delete("acme")
	f.session(t, "old")
	old := f.mustDial(t, "acme", "old")
	f.clock.advance(time.Second)
	f.since.Store("acme", f.clock.now())
	if code := closeCode(t, old); code != 4001 {
		t.Fatalf("an earlier tenant's connection closed with %v, want 4001", code)
	}
	if _, resp, err := f.dial("acme", "old"); err == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("connect to an earlier tenant's session: %v", err)
	}
}

func closeCode(t *testing.T, ws *websocket.Conn) websocket.StatusCode {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	for {
		if _, _, err := ws.Read(ctx); err != nil {
			return websocket.CloseStatus(err)
		}
	}
}

func TestProtocolLimits(t *testing.T) {
	f := newFixture(t, roomy, Options{MaxMessage: 1024})
	f.session(t, "s1")
	big := f.mustDial(t, "acme", "s1")
	big.Write(context.Background(), websocket.MessageText, []byte(strings.Repeat("x", 2048)))
	if code := closeCode(t, big); code != websocket.StatusMessageTooBig {
		t.Fatalf("oversized message closed with %v, want 1009", code)
	}
	bad := f.mustDial(t, "acme", "s1")
	bad.Write(context.Background(), websocket.MessageText, []byte{'{', 0xff, 0xfe, '}'})
	if code := closeCode(t, bad); code != websocket.StatusInvalidFramePayloadData {
		t.Fatalf("invalid UTF-8 closed with %v, want 1007", code)
	}
}

// TestDeletionAndExpiryClose: deleting a session closes its connections at
// once; an expired session's are closed by the sweep; leases come back.
func TestDeletionAndExpiryClose(t *testing.T) {
	t.Run("deletion", func(t *testing.T) {
		// No sweep while the test runs: between the deletion and
		// CloseSession a sweep would find the session gone and close its
		// connections as expired (4000), not deleted.
		f := newFixture(t, roomy, Options{ExpiryEvery: time.Hour})
		f.session(t, "del")
		d, _, err := f.dial("acme", "del")
		if err != nil {
			t.Fatal(err)
		}
		f.sessions.DeleteSession(context.Background(), f.clock.now(), "acme", "del")
		f.g.CloseSession("acme", "del")
		if code := closeCode(t, d); code != 4001 {
			t.Fatalf("deleted session closed with %v, want 4001", code)
		}
		f.leasesBack(t)
	})
	t.Run("expiry", func(t *testing.T) {
		f := newFixture(t, roomy, Options{ExpiryEvery: 20 * time.Millisecond})
		f.session(t, "exp")
		e, _, err := f.dial("acme", "exp")
		if err != nil {
			t.Fatal(err)
		}
		f.clock.advance(301 * time.Second)
		if code := closeCode(t, e); code != 4000 {
			t.Fatalf("expired session closed with %v, want 4000", code)
		}
		f.leasesBack(t)
	})
}

// leasesBack waits for the connections to be gone and the tenant's
// connection count to be whole again.
func (f *fixture) leasesBack(t *testing.T) {
	t.Helper()
	waitFor(t, "connections gone", func() bool { return f.g.Connections() == 0 })
	tenantConns := sluice.Policy{Name: policyTenantConns, Algorithm: sluice.Concurrency, Limit: f.settings.TenantConnections, LeaseTTL: 3 * f.g.opts.RenewEvery}
	// A connection releases its leases just after it unregisters.
	waitFor(t, "the tenant's connection count whole again", func() bool {
		dec, err := f.peekInternal("acme", tenantConns, "")
		return err == nil && dec.Remaining == f.settings.TenantConnections
	})
}

// waitFor polls cond until it holds, and fails the test if it does not
// within patience.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", patience, what)
		}
		time.Sleep(5 * time.Millisecond) // the poll's period, not a handshake
	}
}

// TestQueuedInOrder: a burst of messages through either queue comes back
// in order, and a repeated id is refused as a duplicate.
func TestQueuedInOrder(t *testing.T) {
	f := newFixture(t, roomy, Options{})
	f.session(t, "s1")
	a := f.mustDial(t, "acme", "s1")
	defer a.Close(websocket.StatusNormalClosure, "")
	for _, action := range []string{"silo", "pooled"} {
		for i := range 20 {
			write(t, a, `{"action":"`+action+`","data":`+strconv.Itoa(i)+`,"id":"`+action+strconv.Itoa(i)+`"}`)
		}
		for i := range 20 {
			if m := read(t, a); m["type"] != "echo" || m["data"] != float64(i) {
				t.Fatalf("%s message %d: %v", action, i, m)
			}
		}
	}
	write(t, a, `{"action":"pooled","data":0,"id":"pooled0"}`)
	if m := read(t, a); m["duplicate"] != true {
		t.Fatalf("repeated id: %v", m)
	}
}

// TestManagementAPI: post to a connection, read its times, close it; a
// gone connection, or another tenant's, answers ErrGone (410).
func TestManagementAPI(t *testing.T) {
	f := newFixture(t, roomy, Options{})
	f.session(t, "s1")
	a, resp, err := f.dial("acme", "s1")
	if err != nil {
		t.Fatal(err)
	}
	id := resp.Header.Get("Sluice-Connection")
	if id == "" {
		t.Fatal("no connection id in the handshake")
	}
	if err := f.g.PostToConnection(context.Background(), "acme", id, []byte(`{"note":"from the backend"}`), true); err != nil {
		t.Fatal(err)
	}
	if m := read(t, a); m["note"] != "from the backend" {
		t.Fatalf("posted frame %v", m)
	}
	info, err := f.g.ConnectionInfo(context.Background(), "acme", id, true)
	if err != nil || info.ConnectedAt.IsZero() || info.LastActiveAt.Before(info.ConnectedAt) || info.Session != "s1" {
		t.Fatalf("info %+v %v", info, err)
	}
	if _, err := f.g.ConnectionInfo(context.Background(), "beta", id, true); !errors.Is(err, ErrGone) {
		t.Fatalf("another tenant reading it: %v", err)
	}
	if err := f.g.CloseConnection(context.Background(), "acme", id, websocket.StatusNormalClosure, "closed by the server", true); err != nil {
		t.Fatal(err)
	}
	if code := closeCode(t, a); code != websocket.StatusNormalClosure {
		t.Fatalf("closed with %v", code)
	}
	waitFor(t, "gone", func() bool { return f.g.Connections() == 0 })
	if err := f.g.PostToConnection(context.Background(), "acme", id, []byte(`{}`), true); !errors.Is(err, ErrGone) {
		t.Fatalf("post to a gone connection: %v", err)
	}
}

// TestFourLimitsExact: each of the four limits, alone the tight one, holds
// exactly under 20 concurrent connects.
func TestFourLimitsExact(t *testing.T) {
	for _, tc := range []struct {
		name   string
		limit  func(*sluice.TenantSettings)
		policy string
		keep   bool // keep connections open: a count, not a rate
	}{
		{"tenantConnections", func(s *sluice.TenantSettings) { s.TenantConnections = 4 }, policyTenantConns, true},
		{"connectionsPerSession", func(s *sluice.TenantSettings) { s.ConnectionsPerSession = 4 }, policySessionConns, true},
		{"tenantPerMinute", func(s *sluice.TenantSettings) { s.TenantPerMinute = 4 }, policyTenantRate, false},
		{"sessionPerMinute", func(s *sluice.TenantSettings) { s.SessionPerMinute = 4 }, policySessionRate, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := roomy
			tc.limit(&s)
			f := newFixture(t, s, Options{})
			f.session(t, "s1")
			// A store that takes a while: connects wait together and
			// are decided in batches, which must count as exactly.
			f.store.slow.Store(int64(5 * time.Millisecond))
			var admitted atomic.Int64
			var refusedBy sync.Map
			var wg sync.WaitGroup
			for range 20 {
				wg.Go(func() {
					ws, resp, err := f.dial("acme", "s1")
					if err == nil {
						admitted.Add(1)
						if !tc.keep {
							ws.Close(websocket.StatusNormalClosure, "")
						} else {
							t.Cleanup(func() { ws.Close(websocket.StatusNormalClosure, "") })
						}
						return
					}
					if resp != nil && resp.StatusCode == 429 {
						var body refusal
						json.NewDecoder(resp.Body).Decode(&body)
						refusedBy.Store(body.Limit, true)
					}
				})
			}
			wg.Wait()
			if admitted.Load() != 4 {
				t.Fatalf("admitted %d of 20 at a limit of 4", admitted.Load())
			}
			if _, ok := refusedBy.Load(tc.policy); !ok {
				t.Fatalf("no refusal named %s", tc.policy)
			}
		})
	}
}

// TestConnectRefreshesTTL: a connect is activity (seed 000, step 5): it
// moves the session's expiry to a full TTL from now, so that a connection
// opened near the end of the TTL is not closed a moment later.
func TestConnectRefreshesTTL(t *testing.T) {
	f := newFixture(t, roomy, Options{ExpiryEvery: 10 * time.Millisecond})
	f.session(t, "s1") // expires 300s from now
	f.clock.advance(290 * time.Second)
	a := f.mustDial(t, "acme", "s1")
	defer a.Close(websocket.StatusNormalClosure, "")
	x, err := f.sessions.GetSession(context.Background(), f.clock.now(), "acme", "s1")
	if err != nil || !x.ExpiresAt.Equal(f.clock.now().Add(300*time.Second)) {
		t.Fatalf("after a connect the session expires at %v (%v), want %v", x.ExpiresAt, err, f.clock.now().Add(300*time.Second))
	}
	f.clock.advance(20 * time.Second) // past the TTL of the session's creation
	write(t, a, `{"action":"pooled","data":1}`)
	if m := read(t, a); m["type"] != "echo" {
		t.Fatalf("a connection opened near the end of the TTL: %v", m)
	}
}

// TestSessionDeletedElsewhereIs4001: a session deleted through another
// node, found gone by this node's sweep before its expiry, closes its
// connections with 4001 (deleted), not 4000 (expired).
func TestSessionDeletedElsewhereIs4001(t *testing.T) {
	f := newFixture(t, roomy, Options{ExpiryEvery: 10 * time.Millisecond, CheckEvery: 10 * time.Millisecond})
	f.session(t, "s1")
	a := f.mustDial(t, "acme", "s1")
	if err := f.sessions.DeleteSession(context.Background(), f.clock.now(), "acme", "s1"); err != nil {
		t.Fatal(err)
	}
	if code := closeCode(t, a); code != 4001 {
		t.Fatalf("a session deleted elsewhere closed its connection with %v, want 4001", code)
	}
}

// TestIdleSiloReleased: a tenant's silo queue and worker go once it is
// idle, and its next message makes them anew, in order.
func TestIdleSiloReleased(t *testing.T) {
	f := newFixture(t, roomy, Options{ExpiryEvery: 10 * time.Millisecond})
	f.session(t, "s1")
	a := f.mustDial(t, "acme", "s1")
	defer a.Close(websocket.StatusNormalClosure, "")
	silos := func() int { f.g.silosMu.Lock(); defer f.g.silosMu.Unlock(); return len(f.g.silos) }
	for i := range 3 {
		write(t, a, fmt.Sprintf(`{"action":"silo","data":%d}`, i))
		if m := read(t, a); m["type"] != "echo" || m["data"] != float64(i) {
			t.Fatalf("message %d: %v", i, m)
		}
		waitFor(t, "the idle silo released", func() bool { return silos() == 0 })
	}
}

// TestFailedRemoteDeliveryRetried: a node that cannot be reached fails the
// delivery, which the queue makes again for the connections not reached
// yet: the remote connection gets the message once it is reachable, and
// the sender its echo once.
func TestFailedRemoteDeliveryRetried(t *testing.T) {
	reg := &memstore.Registry{}
	p := &flakyPeer{failures: 2, posted: make(chan string, 8)}
	f := newFixture(t, roomy, Options{Registry: reg, Node: "http://self", Peer: p, RenewEvery: 50 * time.Millisecond})
	f.session(t, "s1")
	a := f.mustDial(t, "acme", "s1")
	defer a.Close(websocket.StatusNormalClosure, "")
	reg.Register(context.Background(), sluice.Registration{Tenant: "acme", Session: "s1", Node: "http://other", ExpiresAt: f.clock.now().Add(time.Hour)})
	f.g.SessionChanged("acme", "s1", true) // as the other node says once it has registered its first
	write(t, a, `{"action":"pooled","data":1,"id":"m1"}`)
	if m := read(t, a); m["type"] != "echo" {
		t.Fatalf("echo: %v", m)
	}
	for _, want := range []string{"message", "reply"} {
		select {
		case got := <-p.posted:
			if got != want {
				t.Fatalf("the other node got %q, want %q", got, want)
			}
		case <-time.After(patience):
			t.Fatalf("the other node got no %s within %v", want, patience)
		}
	}
	if p.calls.Load() != 4 {
		t.Fatalf("%d posts to the other node, want 2 failed then 2 delivered", p.calls.Load())
	}
	// No second echo: the retry reached only what the first did not.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, b, err := a.Read(ctx); err == nil {
		t.Fatalf("the sender got another frame: %s", b)
	}
}

// TestNodeThatFailsCalledOncePerDelivery: a node that cannot be reached
// holds a delivery for one call, whatever the connections it holds: they
// wait for the delivery made again. Five deliveries,
// then the sender is told the message was not delivered.
func TestNodeThatFailsCalledOncePerDelivery(t *testing.T) {
	reg := &memstore.Registry{}
	p := &flakyPeer{failures: 1 << 30}
	f := newFixture(t, roomy, Options{Registry: reg, Node: "http://self", Peer: p, RenewEvery: 50 * time.Millisecond})
	f.session(t, "s1")
	a := f.mustDial(t, "acme", "s1")
	defer a.Close(websocket.StatusNormalClosure, "")
	reg.Register(context.Background(), sluice.Registration{Tenant: "acme", Session: "s1", Node: "http://down", ExpiresAt: f.clock.now().Add(time.Hour)})
	f.g.SessionChanged("acme", "s1", true)
	write(t, a, `{"action":"pooled","data":1,"id":"m1"}`)
	if m := read(t, a); m["type"] != "echo" {
		t.Fatalf("echo: %v", m)
	}
	if m := read(t, a); m["error"] != "Not Delivered" {
		t.Fatalf("after five failed deliveries: %v", m)
	}
	if n := p.calls.Load(); n != 5 {
		t.Fatalf("%d calls to the node that cannot be reached, want 5: one per delivery", n)
	}
}

// flakyPeer fails its first posts, then takes them.
type flakyPeer struct {
	failures int64
	calls    atomic.Int64
	posted   chan string
}

func (p *flakyPeer) Post(ctx context.Context, node, tenant, conn string, data []byte) error {
	if p.calls.Add(1) <= p.failures {
		return errors.New("connection refused")
	}
	var m map[string]any
	json.Unmarshal(data, &m)
	p.posted <- m["type"].(string)
	return nil
}

// Deliver posts the frames one after another, as one post each.
func (p *flakyPeer) Deliver(ctx context.Context, node, tenant, session, id string, frames ...[]byte) error {
	for _, f := range frames {
		if err := p.Post(ctx, node, tenant, session+".remote", f); err != nil {
			return err
		}
	}
	return nil
}

func (p *flakyPeer) Info(ctx context.Context, node, tenant, conn string) (ConnectionInfo, error) {
	return ConnectionInfo{}, ErrGone
}

func (p *flakyPeer) Close(ctx context.Context, node, tenant, conn string, code websocket.StatusCode, reason string) error {
	return ErrGone
}

func (p *flakyPeer) Changed(ctx context.Context, node, tenant, session string, newNode bool) error {
	return nil
}

func (p *flakyPeer) SessionGone(ctx context.Context, node, tenant, session string) error {
	return nil
}

// countingSessions counts the gateway's session reads and writes.
type countingSessions struct {
	*memstore.Sessions
	gets, touches atomic.Int64
}

func (c *countingSessions) GetSession(ctx context.Context, now time.Time, tenant, id string) (sluice.Session, error) {
	c.gets.Add(1)
	return c.Sessions.GetSession(ctx, now, tenant, id)
}

func (c *countingSessions) TouchSession(ctx context.Context, now time.Time, tenant, id string, expiresAt time.Time) (sluice.Session, error) {
	c.touches.Add(1)
	return c.Sessions.TouchSession(ctx, now, tenant, id, expiresAt)
}

// TestMessagesCostLittleOfTheSessionStore: messages do not each write the
// session's expiry (one write per tenth of the TTL at most), and the sweep
// reads only sessions whose known expiry has passed, not every live one at
// every tick.
func TestMessagesCostLittleOfTheSessionStore(t *testing.T) {
	f := newFixture(t, roomy, Options{ExpiryEvery: 5 * time.Millisecond, CheckEvery: time.Hour})
	f.session(t, "s1")
	a := f.mustDial(t, "acme", "s1")
	defer a.Close(websocket.StatusNormalClosure, "")
	gets, touches := f.counted.gets.Load(), f.counted.touches.Load()
	for i := range 20 {
		write(t, a, fmt.Sprintf(`{"action":"pooled","data":%d}`, i))
		if m := read(t, a); m["type"] != "echo" {
			t.Fatalf("message %d: %v", i, m)
		}
		f.clock.advance(time.Second) // 20s in all: under a tenth of the TTL of 300s
	}
	if n := f.counted.touches.Load() - touches; n != 0 {
		t.Errorf("20 messages within a tenth of the TTL of the connect wrote the expiry %d times, want 0", n)
	}
	// At most the sweep's first, full check read the session.
	if n := f.counted.gets.Load() - gets; n > 1 {
		t.Errorf("the session was read %d times during the messages", n)
	}
	f.clock.advance(15 * time.Second) // past a tenth of the TTL
	write(t, a, `{"action":"pooled","data":"late"}`)
	read(t, a)
	if n := f.counted.touches.Load() - touches; n != 1 {
		t.Errorf("a message past a tenth of the TTL wrote the expiry %d times, want 1", n)
	}
}

// TestBurstDropsNoReaderThatReads: another member's 1,000-frame burst
// reaches a member that reads as it goes, whole and in order. Its 2 MiB
// are twice the default outbox: the reader keeps them because its writer
// drains the outbox while the burst arrives, and nothing in the fan-out
// waits for it. The sender keeps at most 100 messages unechoed, as a client
// that reads its echoes does, so that a machine too busy to run the
// reader's side for a while does not make the burst arrive at once.
func TestBurstDropsNoReaderThatReads(t *testing.T) {
	s := roomy
	s.MessagesPerMinute = 100_000
	f := newFixture(t, s, Options{})
	f.session(t, "s1")
	sender := f.mustDial(t, "acme", "s1")
	defer sender.Close(websocket.StatusNormalClosure, "")
	reader := f.mustDial(t, "acme", "s1")
	defer reader.Close(websocket.StatusNormalClosure, "")
	const burst = 1000
	kib := strings.Repeat("x", 1<<10) // each message's data: 1,000 of them, twice each, 2 MiB in all
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	echoed := make(chan struct{}, burst)
	go func() { // the sender reads its echoes, as a client does
		for {
			_, b, err := sender.Read(ctx)
			if err != nil {
				return
			}
			if bytes.Contains(b, []byte(`"type":"echo"`)) {
				echoed <- struct{}{}
			}
		}
	}()
	go func() {
		for i := range burst {
			if i >= 100 {
				select {
				case <-echoed:
				case <-ctx.Done():
					return
				}
			}
			if err := sender.Write(ctx, websocket.MessageText, fmt.Appendf(nil, `{"action":"pooled","data":{"i":%d,"pad":%q}}`, i, kib)); err != nil {
				return
			}
		}
	}()
	next := 0
	for next < burst {
		_, b, err := reader.Read(ctx)
		if err != nil {
			t.Fatalf("the reader was dropped after %d of %d messages: %v", next, burst, err)
		}
		var m map[string]any
		json.Unmarshal(b, &m)
		if m["type"] != "message" {
			continue // its reply
		}
		if d, _ := m["data"].(map[string]any); d["i"] != float64(next) {
			t.Fatalf("message %.40v, want %d: out of order", m["data"], next)
		}
		next++
	}
}

// TestFloodingSenderThrottledNotClosed: a sender past its message limit
// gets a throttle frame for each message, and stays connected.
func TestFloodingSenderThrottledNotClosed(t *testing.T) {
	s := roomy
	s.MessagesPerMinute = 10
	f := newFixture(t, s, Options{SendBuffer: 4 << 10})
	f.session(t, "s1")
	a := f.mustDial(t, "acme", "s1")
	defer a.Close(websocket.StatusNormalClosure, "")
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	const flood = 500
	go func() {
		for i := range flood {
			if err := a.Write(ctx, websocket.MessageText, fmt.Appendf(nil, `{"action":"pooled","data":%d}`, i)); err != nil {
				return
			}
		}
	}()
	throttled := 0
	for got := 0; got < flood; got++ {
		_, b, err := a.Read(ctx)
		if err != nil {
			t.Fatalf("the flooding sender was closed after %d answers: %v", got, err)
		}
		if strings.Contains(string(b), "Too Many Requests") {
			throttled++
		}
	}
	if throttled != flood-10 {
		t.Fatalf("%d throttle frames, want %d", throttled, flood-10)
	}
	write(t, a, `{"action":"pooled","data":"still here"}`)
	if m := read(t, a); m["error"] != "Too Many Requests" {
		t.Fatalf("after the flood: %v", m)
	}
}

// TestClientThatDoesNotReadIsDropped: a member that takes no frame being
// written within the write timeout is dropped by its writer (1008),
// however roomy its outbox; the others go on.
func TestClientThatDoesNotReadIsDropped(t *testing.T) {
	s := roomy
	s.MessagesPerMinute = 100_000
	closes := &closeRecorder{}
	f := newFixture(t, s, Options{SendBuffer: 256 << 20, WriteTimeout: 200 * time.Millisecond, Observer: closes})
	f.smallSocketBuffers()
	f.session(t, "s1")
	sender := f.mustDial(t, "acme", "s1")
	defer sender.Close(websocket.StatusNormalClosure, "")
	sender.SetReadLimit(1 << 20)
	deaf, id := f.dialDeaf(t, "acme", "s1")
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	// Large frames, so that the deaf member's socket buffers fill too.
	big := strings.Repeat("x", 32<<10)
	for i := 0; !f.closed("acme", id); i++ {
		if i > 10_000 {
			t.Fatal("the member that does not read was never dropped")
		}
		sender.Write(ctx, websocket.MessageText, fmt.Appendf(nil, `{"action":"pooled","data":"%s"}`, big))
		if _, _, err := sender.Read(ctx); err != nil {
			t.Fatalf("the sender, which reads, was dropped: %v", err)
		}
	}
	// Its socket is full: it cannot be sent a close frame, only cut off.
	closeCode(t, deaf)
	waitFor(t, "the drop counted", func() bool { return closes.count(websocket.StatusPolicyViolation) == 1 })
}

// closeRecorder is an Observer that counts close codes.
type closeRecorder struct {
	nopObserver
	mu    sync.Mutex
	codes []websocket.StatusCode
}

func (r *closeRecorder) Closed(tenant string, code websocket.StatusCode) {
	r.mu.Lock()
	r.codes = append(r.codes, code)
	r.mu.Unlock()
}

func (r *closeRecorder) count(code websocket.StatusCode) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.codes {
		if c == code {
			n++
		}
	}
	return n
}

// TestListenerNotIdleWhileReceiving: a member that only listens is not
// closed as idle while it receives traffic.
func TestListenerNotIdleWhileReceiving(t *testing.T) {
	f := newFixture(t, roomy, Options{IdleTimeout: 10 * time.Minute, ExpiryEvery: 5 * time.Millisecond})
	f.session(t, "s1")
	talker := f.mustDial(t, "acme", "s1")
	defer talker.Close(websocket.StatusNormalClosure, "")
	listener := f.mustDial(t, "acme", "s1")
	defer listener.Close(websocket.StatusNormalClosure, "")
	sweep := func() { // wait for a whole sweep after now
		n := f.g.sweeps.Load()
		waitFor(t, "a sweep", func() bool { return f.g.sweeps.Load() >= n+2 })
	}
	for i := range 4 { // 16 minutes, past the idle timeout
		f.clock.advance(4 * time.Minute)
		sweep()
		write(t, talker, fmt.Sprintf(`{"action":"pooled","data":%d}`, i))
		read(t, talker)
		if m := read(t, listener); m["type"] != "message" {
			t.Fatalf("the listener, at minute %d: %v", 4*(i+1), m)
		}
		read(t, listener) // the reply
	}
}

// dialAt connects to a gateway's server; it returns the connection, or
// the refusal's status.
func dialAt(srv *httptest.Server, tenant, session string) (*websocket.Conn, int) {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	ws, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"/v1/ws?tenant="+tenant+"&session="+session, nil)
	if err != nil {
		if resp != nil {
			return nil, resp.StatusCode
		}
		return nil, -1
	}
	return ws, 101
}

// TestBigTenantAcrossNodes: a tenant may hold more connections than a
// counter holds leases (each node counts its connections in one lease), up
// to its limit exactly, across two nodes; closing them gives the count
// back.
func TestBigTenantAcrossNodes(t *testing.T) {
	s := roomy
	const limit = sluice.MaxLeases + 200
	s.TenantConnections, s.ConnectionsPerSession, s.TenantPerMinute, s.SessionPerMinute = limit, limit, 10*limit, 10*limit
	f := newFixture(t, s, Options{})
	f.session(t, "s1")
	_, other := f.node(t)
	var conns []*websocket.Conn
	defer func() {
		for _, ws := range conns {
			ws.CloseNow()
		}
	}()
	for i := range limit {
		srv := f.srv
		if i%2 == 1 {
			srv = other
		}
		ws, status := dialAt(srv, "acme", "s1")
		if status != 101 {
			t.Fatalf("connect %d of %d: %d", i+1, limit, status)
		}
		conns = append(conns, ws)
	}
	if _, status := dialAt(other, "acme", "s1"); status != http.StatusTooManyRequests {
		t.Fatalf("connect %d at a limit of %d: %d, want 429", limit+1, limit, status)
	}
	for _, ws := range conns {
		ws.Close(websocket.StatusNormalClosure, "")
	}
	conns = nil
	tenantConns := sluice.Policy{Name: policyTenantConns, Algorithm: sluice.Concurrency, Limit: limit, LeaseTTL: 3 * f.g.opts.RenewEvery}
	waitFor(t, "the count given back", func() bool {
		d, err := f.peekInternal("acme", tenantConns, "")
		return err == nil && d.Remaining == limit
	})
}

// TestSmallLimitExactAcrossNodes: 200 concurrent connects spread over two
// nodes, at a tenant limit of 50, admit exactly 50.
func TestSmallLimitExactAcrossNodes(t *testing.T) {
	s := roomy
	s.TenantConnections, s.ConnectionsPerSession, s.TenantPerMinute, s.SessionPerMinute = 50, 1000, 1000, 1000
	f := newFixture(t, s, Options{})
	f.session(t, "s1")
	_, other := f.node(t)
	var admitted atomic.Int64
	var mu sync.Mutex
	var conns []*websocket.Conn
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() {
			srv := f.srv
			if i%2 == 1 {
				srv = other
			}
			ws, status := dialAt(srv, "acme", "s1")
			switch status {
			case 101:
				admitted.Add(1)
				mu.Lock()
				conns = append(conns, ws)
				mu.Unlock()
			case http.StatusTooManyRequests:
			default:
				t.Errorf("connect: %d", status)
			}
		})
	}
	wg.Wait()
	for _, ws := range conns {
		ws.CloseNow()
	}
	if admitted.Load() != 50 {
		t.Fatalf("admitted %d of 200 at a limit of 50", admitted.Load())
	}
}

// TestShrinkFailureCountsMoreNeverLess: a disconnect the store cannot
// record leaves the node's lease counting one more connection than there
// is (never one fewer, which could admit past the limit), and the next
// renewal brings it right.
func TestShrinkFailureCountsMoreNeverLess(t *testing.T) {
	s := roomy
	s.TenantConnections = 5
	f := newFixture(t, s, Options{RenewEvery: 50 * time.Millisecond})
	f.session(t, "s1")
	a := f.mustDial(t, "acme", "s1")
	defer a.Close(websocket.StatusNormalClosure, "")
	b := f.mustDial(t, "acme", "s1")
	tenantConns := sluice.Policy{Name: policyTenantConns, Algorithm: sluice.Concurrency, Limit: 5, LeaseTTL: 3 * f.g.opts.RenewEvery}
	remaining := func() int64 {
		f.store.stalled.Store(false)
		d, err := f.peekInternal("acme", tenantConns, "")
		if err != nil {
			t.Fatal(err)
		}
		return d.Remaining
	}
	if r := remaining(); r != 3 {
		t.Fatalf("two connections of 5: remaining %d", r)
	}
	f.store.stalled.Store(true)
	b.Close(websocket.StatusNormalClosure, "")
	waitFor(t, "the connection gone", func() bool { return f.g.Stats().Connections == 1 })
	// While the store stalls the lease still counts two; once it is back,
	// the next renewal brings it to one.
	waitFor(t, "the lease brought right", func() bool { return remaining() == 4 })
}

// TestLostAnswerLeavesNoLease: a connect whose write lands but whose answer
// is lost is refused (503), and its unit, counted in the store, is taken
// back by the next renewal: the node names its leases, so it sets them
// right whichever way the write went, and the tenant connects up to its
// limit, not one fewer. The clock stands still: no lease expires here.
func TestLostAnswerLeavesNoLease(t *testing.T) {
	s := roomy
	s.TenantConnections = 5
	f := newFixture(t, s, Options{RenewEvery: 50 * time.Millisecond})
	f.session(t, "s1")
	a := f.mustDial(t, "acme", "s1")
	defer a.Close(websocket.StatusNormalClosure, "")
	tenantConns := sluice.Policy{Name: policyTenantConns, Algorithm: sluice.Concurrency, Limit: 5, LeaseTTL: 3 * f.g.opts.RenewEvery}
	remaining := func() int64 {
		d, err := f.peekInternal("acme", tenantConns, "")
		if err != nil {
			t.Fatal(err)
		}
		return d.Remaining
	}
	f.store.lose.Store(1)
	if _, resp, err := f.dial("acme", "s1"); err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("connect whose answer was lost: %v %+v, want 503", err, resp)
	}
	if n := f.store.lost.Load(); n != 1 {
		t.Fatalf("%d writes landed with their answer lost, want 1", n)
	}
	waitFor(t, "the lease set back to the one connection", func() bool { return remaining() == 4 })
	for range 4 {
		ws := f.mustDial(t, "acme", "s1")
		defer ws.Close(websocket.StatusNormalClosure, "")
	}
	if _, resp, err := f.dial("acme", "s1"); err == nil || resp == nil || resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("the sixth connect of 5: %v %+v, want 429", err, resp)
	}
}

// TestConnectBurstDecidedInBatches: connects of a tenant that arrive while
// one is being decided wait together and are decided in few decisions,
// not one each, with the limits still exact: on a store that takes 20ms a
// decision, 60 concurrent connects over 6 sessions admit exactly the
// tenant's 40, 10 at most per session, and consume nothing for the 20
// refused.
func TestConnectBurstDecidedInBatches(t *testing.T) {
	s := roomy
	s.TenantConnections, s.ConnectionsPerSession, s.TenantPerMinute = 40, 10, 1000
	f := newFixture(t, s, Options{})
	sessions := []string{"s1", "s2", "s3", "s4", "s5", "s6"}
	for _, id := range sessions {
		f.session(t, id)
	}
	f.store.slow.Store(int64(20 * time.Millisecond))
	before := f.store.applies.Load()
	var admitted, refused atomic.Int64
	perSession := make([]atomic.Int64, len(sessions))
	var wg sync.WaitGroup
	for i := range 60 {
		wg.Go(func() {
			ws, status := dialAt(f.srv, "acme", sessions[i%len(sessions)])
			switch status {
			case http.StatusSwitchingProtocols:
				admitted.Add(1)
				perSession[i%len(sessions)].Add(1)
				t.Cleanup(func() { ws.CloseNow() })
			case http.StatusTooManyRequests:
				refused.Add(1)
			default:
				t.Errorf("connect %d: status %d", i, status)
			}
		})
	}
	wg.Wait()
	decisions := f.store.applies.Load() - before
	f.store.slow.Store(0)
	if admitted.Load() != 40 || refused.Load() != 20 {
		t.Fatalf("admitted %d, refused %d; want 40 and 20", admitted.Load(), refused.Load())
	}
	for i := range perSession {
		if n := perSession[i].Load(); n > 10 {
			t.Fatalf("session %s admitted %d, over its 10", sessions[i], n)
		}
	}
	rate := sluice.Policy{Name: policyTenantRate, Algorithm: sluice.SlidingWindow, Limit: 1000, Window: time.Minute}
	if d, err := f.peekInternal("acme", rate, ""); err != nil || d.Remaining != 1000-40 {
		t.Fatalf("the connect rate after 40 admitted: %+v %v, want 960 left", d, err)
	}
	t.Logf("60 connects in %d decisions", decisions)
	if decisions >= 40 {
		t.Fatalf("60 connects took %d decisions: not batched", decisions)
	}
}

// connectsBehind dials sessions of acme, each once, while another connect
// (to session first) is being decided on a store that takes d a
// decision, so that they wait together for the next batch; it returns
// each one's status, and first's.
func (f *fixture) connectsBehind(t *testing.T, d time.Duration, first string, sessions ...string) (int, []int) {
	t.Helper()
	f.store.slow.Store(int64(d))
	defer f.store.slow.Store(0)
	before := f.store.applies.Load()
	statuses := make([]int, len(sessions))
	var firstStatus int
	var wg sync.WaitGroup
	wg.Go(func() {
		ws, status := dialAt(f.srv, "acme", first)
		if ws != nil {
			t.Cleanup(func() { ws.CloseNow() })
		}
		firstStatus = status
	})
	waitFor(t, "the first connect's decision under way", func() bool { return f.store.applies.Load() > before })
	for i, id := range sessions {
		wg.Go(func() {
			ws, status := dialAt(f.srv, "acme", id)
			if ws != nil {
				t.Cleanup(func() { ws.CloseNow() })
			}
			statuses[i] = status
		})
	}
	wg.Wait()
	return firstStatus, statuses
}

// TestBatchBesideAFullSession: connects waiting together, one of them to a
// session this node already fills, are decided: the full session's is
// refused (429), the others admitted, and the tenant goes on.
func TestBatchBesideAFullSession(t *testing.T) {
	s := roomy
	s.ConnectionsPerSession = 1
	f := newFixture(t, s, Options{})
	for _, id := range []string{"s1", "s2", "s3", "s4", "s5"} {
		f.session(t, id)
	}
	held := f.mustDial(t, "acme", "s1")
	defer held.CloseNow()
	first, statuses := f.connectsBehind(t, 50*time.Millisecond, "s2", "s3", "s1", "s4")
	if first != 101 || !slices.Equal(statuses, []int{101, 429, 101}) {
		t.Fatalf("s2 %d; s3, s1, s4: %v; want 101; 101, 429, 101", first, statuses)
	}
	if ws, status := dialAt(f.srv, "acme", "s5"); status != 101 {
		t.Fatalf("a later connect: %d", status)
	} else {
		ws.CloseNow()
	}
}

// TestBatchDeniedAdmitsWhatFits: a connect that fits this node's counts
// alone but not beside a batch waits for the next batch rather than being
// refused: when the batch is denied (one session's connect rate is spent)
// and decided one at a time, the tenant still fills its limit exactly.
func TestBatchDeniedAdmitsWhatFits(t *testing.T) {
	s := roomy
	s.TenantConnections, s.SessionPerMinute = 4, 1
	f := newFixture(t, s, Options{})
	for _, id := range []string{"s1", "s2", "s3", "s4", "s5"} {
		f.session(t, id)
	}
	held := f.mustDial(t, "acme", "s1")
	defer held.CloseNow()
	spent := f.mustDial(t, "acme", "s3") // s3's one connect this minute
	spent.Close(websocket.StatusNormalClosure, "")
	waitFor(t, "s3's connection gone", func() bool { return f.g.Stats().Connections == 1 })
	first, statuses := f.connectsBehind(t, 20*time.Millisecond, "s5", "s2", "s3", "s4")
	if first != 101 || !slices.Equal(statuses, []int{101, 429, 101}) {
		t.Fatalf("s5 %d; s2, s3, s4: %v; want 101; 101, 429, 101", first, statuses)
	}
	if n := f.g.Stats().Connections; n != 4 {
		t.Fatalf("%d connections at a limit of 4", n)
	}
}

// TestEachDecisionItsOwnDeadline: a batch decided one connect at a time on
// a slow store gives each decision its own deadline: 10 connects at a rate
// of 5 a minute, 60ms a decision, a write timeout of 200ms, admit 5 and
// refuse 5 with 429, none with 503.
func TestEachDecisionItsOwnDeadline(t *testing.T) {
	s := roomy
	s.TenantPerMinute = 5
	f := newFixture(t, s, Options{WriteTimeout: 200 * time.Millisecond})
	sessions := []string{"s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9", "s10"}
	for _, id := range sessions {
		f.session(t, id)
	}
	f.session(t, "s0")
	first, statuses := f.connectsBehind(t, 60*time.Millisecond, "s0", sessions...)
	count := map[int]int{first: 1}
	for _, st := range statuses {
		count[st]++
	}
	if count[101] != 5 || count[429] != 6 {
		t.Fatalf("statuses %v (first %d), want 5 admitted and 6 refused with 429", statuses, first)
	}
}
