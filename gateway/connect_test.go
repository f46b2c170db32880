package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sluicehq/sluice"
)

// What a connect costs of the session store (issue 25, deliverable 4): a
// session this node holds live connections of is not read again, and of
// concurrent connects of a session new to the node one reads it and one
// writes its expiry. No sweep runs in these tests (ExpiryEvery and
// CheckEvery an hour): every read counted is a connect's.

// TestConnectsOfAHeldSessionReadItOnce: 10 connects of one session on one
// node, one after another and kept open, read the session once and write
// its expiry once; a connect a tenth of the TTL later writes it again, and
// still reads nothing.
func TestConnectsOfAHeldSessionReadItOnce(t *testing.T) {
	f := newFixture(t, roomy, Options{ExpiryEvery: time.Hour, CheckEvery: time.Hour})
	f.session(t, "s1")
	gets, touches := f.counted.gets.Load(), f.counted.touches.Load()
	for range 10 {
		ws := f.mustDial(t, "acme", "s1")
		defer ws.Close(websocket.StatusNormalClosure, "")
		f.clock.advance(time.Second) // 10s in all: under a tenth of the TTL of 300s
	}
	if n := f.counted.gets.Load() - gets; n != 1 {
		t.Errorf("10 connects of a session held here read it %d times, want 1", n)
	}
	if n := f.counted.touches.Load() - touches; n != 1 {
		t.Errorf("10 connects within a tenth of the TTL wrote the session's expiry %d times, want 1", n)
	}
	f.clock.advance(25 * time.Second) // past a tenth of the TTL since the first
	ws := f.mustDial(t, "acme", "s1")
	defer ws.Close(websocket.StatusNormalClosure, "")
	if n := f.counted.touches.Load() - touches; n != 2 {
		t.Errorf("a connect past a tenth of the TTL: the expiry written %d times in all, want 2", n)
	}
	if n := f.counted.gets.Load() - gets; n != 1 {
		t.Errorf("a connect past a tenth of the TTL read the session: %d reads in all, want 1", n)
	}
	x, err := f.sessions.GetSession(context.Background(), f.clock.now(), "acme", "s1")
	if want := f.clock.now().Add(300 * time.Second); err != nil || !x.ExpiresAt.Equal(want) {
		t.Fatalf("the session expires at %v (%v), want %v", x.ExpiresAt, err, want)
	}
}

// gatedSessions is a session store whose reads wait for the gate to open,
// counting those that arrive.
type gatedSessions struct {
	*countingSessions
	gate    chan struct{}
	arrived atomic.Int64
}

func (s *gatedSessions) GetSession(ctx context.Context, now time.Time, tenant, id string) (sluice.Session, error) {
	s.arrived.Add(1)
	select {
	case <-s.gate:
	case <-ctx.Done():
		return sluice.Session{}, ctx.Err()
	}
	return s.countingSessions.GetSession(ctx, now, tenant, id)
}

// TestConcurrentFirstConnectsReadOnce: 20 connects at once of a session
// new to the node, all under way before its tenant's read answers, read
// the tenant once, the session once and write its expiry once, not once
// each.
func TestConcurrentFirstConnectsReadOnce(t *testing.T) {
	f := newFixture(t, roomy, Options{ExpiryEvery: time.Hour, CheckEvery: time.Hour})
	f.session(t, "s1")
	gated := &gatedSessions{countingSessions: f.counted, gate: make(chan struct{})}
	var tenantReads atomic.Int64
	tenantGate := make(chan struct{})
	tenant := f.opts.Tenant
	f.opts.Sessions = gated
	f.opts.Tenant = func(ctx context.Context, id string) (Tenant, bool, error) {
		tenantReads.Add(1)
		select {
		case <-tenantGate:
		case <-ctx.Done():
			return Tenant{}, false, ctx.Err()
		}
		return tenant(ctx, id)
	}
	g := New(f.opts)
	var arrived atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Add(1)
		g.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { srv.Close(); g.Close() })
	const connects = 20
	var wg sync.WaitGroup
	statuses := make([]int, connects)
	for i := range connects {
		wg.Go(func() {
			ws, status := dialAt(srv, "acme", "s1")
			if ws != nil {
				t.Cleanup(func() { ws.CloseNow() })
			}
			statuses[i] = status
		})
	}
	// Every connect at the gateway, one of them (at least) at its
	// tenant's read: then the read answers; and then the session's.
	waitFor(t, "every connect under way", func() bool { return arrived.Load() == connects && tenantReads.Load() > 0 })
	close(tenantGate)
	waitFor(t, "the session read", func() bool { return gated.arrived.Load() > 0 })
	close(gated.gate)
	wg.Wait()
	for i, s := range statuses {
		if s != http.StatusSwitchingProtocols {
			t.Fatalf("connect %d: status %d", i, s)
		}
	}
	if n := tenantReads.Load(); n != 1 {
		t.Errorf("%d concurrent connects read their tenant %d times, want 1", connects, n)
	}
	if n := f.counted.gets.Load(); n != 1 {
		t.Errorf("%d concurrent first connects read the session %d times, want 1", connects, n)
	}
	if n := f.counted.touches.Load(); n != 1 {
		t.Errorf("%d concurrent first connects wrote the session's expiry %d times, want 1", connects, n)
	}
}

// TestDeletedSessionRefusesTheNextConnect: a session held here, deleted
// and told to this node (CloseSession on this node, SessionGone from the
// node that deleted it), refuses the next connect at once (403), though
// the node knew it live a moment before.
func TestDeletedSessionRefusesTheNextConnect(t *testing.T) {
	for _, how := range []string{"CloseSession", "SessionGone"} {
		t.Run(how, func(t *testing.T) {
			f := newFixture(t, roomy, Options{ExpiryEvery: time.Hour, CheckEvery: time.Hour})
			f.session(t, "s1")
			a := f.mustDial(t, "acme", "s1")
			defer a.CloseNow()
			deleteSession(t, f, "s1", how)
			refused(t, f, "s1", "a connect of a deleted session")
			if code := closeCode(t, a); code != statusDeleted {
				t.Fatalf("the deleted session's connection closed with %v, want 4001", code)
			}
		})
	}
}

// TestDeletedSessionStaleRead: a connect that comes after a session's
// deletion is refused even while another connect, admitted from a read
// made before the deletion, is still under way (its handler not yet
// returned, its read still shared): the deletion drops that read.
func TestDeletedSessionStaleRead(t *testing.T) {
	for _, how := range []string{"CloseSession", "SessionGone", "CloseTenant"} {
		t.Run(how, func(t *testing.T) {
			f := newFixture(t, roomy, Options{ExpiryEvery: time.Hour, CheckEvery: time.Hour})
			f.session(t, "s1")
			// A connect under way: the session read, and shared.
			k := sessionKey{"acme", "s1"}
			fl, lead := f.g.flights.join(k, nil)
			if !lead {
				t.Fatal("a flight before any connect")
			}
			var err error
			if fl.x, err = f.sessions.GetSession(context.Background(), f.clock.now(), "acme", "s1"); err != nil {
				t.Fatal(err)
			}
			fl.s.know(fl.x)
			fl.s.touchDue(f.clock.now(), time.Nanosecond) // its expiry written just now, as its connect does
			close(fl.read)
			defer f.g.flights.leave(k, fl)
			deleteSession(t, f, "s1", how)
			refused(t, f, "s1", "a connect of a deleted session while a read from before is shared")
		})
	}
}

// deleteSession deletes acme's session from the store and tells the
// gateway how: CloseSession (this node deleted it), SessionGone (another
// node did) or CloseTenant (its tenant went).
func deleteSession(t *testing.T, f *fixture, session, how string) {
	t.Helper()
	if err := f.sessions.DeleteSession(context.Background(), f.clock.now(), "acme", session); err != nil {
		t.Fatal(err)
	}
	switch how {
	case "CloseSession":
		f.g.CloseSession("acme", session)
	case "SessionGone":
		if err := f.g.SessionGone(context.Background(), "acme", session); err != nil {
			t.Fatal(err)
		}
	case "CloseTenant":
		f.g.CloseTenant("acme")
	default:
		t.Fatalf("no way to delete %q", how)
	}
}

// refused fails the test unless a connect to acme's session is refused
// with 403.
func refused(t *testing.T, f *fixture, session, what string) {
	t.Helper()
	if ws, status := dialAt(f.srv, "acme", session); status != http.StatusForbidden {
		if ws != nil {
			ws.CloseNow()
		}
		t.Fatalf("%s: status %d, want 403", what, status)
	}
}

// TestHeldSessionOlderThanItsTenantRefused: a session held here whose
// tenant was deleted and made again since (its creation after the
// session's) is refused from what the node knows of the session, without
// reading it again.
func TestHeldSessionOlderThanItsTenantRefused(t *testing.T) {
	f := newFixture(t, roomy, Options{ExpiryEvery: time.Hour, CheckEvery: time.Hour})
	f.session(t, "s1")
	a := f.mustDial(t, "acme", "s1")
	defer a.CloseNow()
	f.clock.advance(time.Second)
	f.since.Store("acme", f.clock.now())
	refused(t, f, "s1", "a connect of a session older than its tenant")
}
