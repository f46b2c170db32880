package storetest

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// NewSessionStore returns a new, empty session store for one test.
type NewSessionStore func(t *testing.T) sluice.SessionStore

// RunSessions runs the session store's conformance suite.
func RunSessions(t *testing.T, newStore NewSessionStore) {
	ctx := context.Background()
	sess := func(id string, ttl time.Duration) sluice.Session {
		return sluice.Session{Tenant: "acme", ID: id, CreatedAt: t0, ExpiresAt: t0.Add(ttl)}
	}

	t.Run("Lifecycle", func(t *testing.T) {
		s := newStore(t)
		if err := s.CreateSession(ctx, sess("s1", time.Minute)); err != nil {
			t.Fatal(err)
		}
		if err := s.CreateSession(ctx, sess("s1", time.Minute)); !errors.Is(err, sluice.ErrSessionExists) {
			t.Fatalf("create twice: %v", err)
		}
		got, err := s.GetSession(ctx, t0, "acme", "s1")
		if err != nil || got.ID != "s1" || !got.ExpiresAt.Equal(t0.Add(time.Minute)) || !got.CreatedAt.Equal(t0) {
			t.Fatalf("get: %+v %v", got, err)
		}
		// Another tenant's session of the same id does not exist.
		if _, err := s.GetSession(ctx, t0, "beta", "s1"); !errors.Is(err, sluice.ErrSessionNotFound) {
			t.Fatalf("beta sees acme's session: %v", err)
		}
		// Touch extends, never shortens.
		if got, err := s.TouchSession(ctx, t0.Add(30*time.Second), "acme", "s1", t0.Add(90*time.Second)); err != nil || !got.ExpiresAt.Equal(t0.Add(90*time.Second)) {
			t.Fatalf("touch: %+v %v", got, err)
		}
		if got, _ := s.TouchSession(ctx, t0.Add(31*time.Second), "acme", "s1", t0.Add(40*time.Second)); !got.ExpiresAt.Equal(t0.Add(90 * time.Second)) {
			t.Fatalf("touch shortened the session: %+v", got)
		}
		if err := s.DeleteSession(ctx, t0.Add(time.Minute), "acme", "s1"); err != nil {
			t.Fatal(err)
		}
		// Deleted: gone for good, and a late touch cannot bring it back.
		if _, err := s.TouchSession(ctx, t0.Add(time.Minute), "acme", "s1", t0.Add(time.Hour)); !errors.Is(err, sluice.ErrSessionNotFound) {
			t.Fatalf("touch after delete: %v", err)
		}
		if _, err := s.GetSession(ctx, t0.Add(time.Minute), "acme", "s1"); !errors.Is(err, sluice.ErrSessionNotFound) {
			t.Fatalf("get after delete: %v", err)
		}
		if err := s.DeleteSession(ctx, t0.Add(time.Minute), "acme", "s1"); !errors.Is(err, sluice.ErrSessionNotFound) {
			t.Fatalf("delete twice: %v", err)
		}
	})

	t.Run("Expiry", func(t *testing.T) {
		s := newStore(t)
		if err := s.CreateSession(ctx, sess("s2", time.Minute)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.GetSession(ctx, t0.Add(time.Minute-1), "acme", "s2"); err != nil {
			t.Fatalf("a nanosecond before expiry: %v", err)
		}
		// Expired at its ExpiresAt, whatever any storage TTL says; and no
		// late touch revives it.
		if _, err := s.GetSession(ctx, t0.Add(time.Minute), "acme", "s2"); !errors.Is(err, sluice.ErrSessionNotFound) {
			t.Fatalf("at expiry: %v", err)
		}
		if _, err := s.TouchSession(ctx, t0.Add(time.Minute), "acme", "s2", t0.Add(time.Hour)); !errors.Is(err, sluice.ErrSessionNotFound) {
			t.Fatalf("touch after expiry: %v", err)
		}
		if _, err := s.GetSession(ctx, t0.Add(time.Minute), "acme", "s2"); !errors.Is(err, sluice.ErrSessionNotFound) {
			t.Fatalf("revived: %v", err)
		}
	})

	t.Run("DeleteRacesTouch", func(t *testing.T) {
		// Touches racing a delete: once the delete is done, the session
		// stays gone, however the touches land.
		s := newStore(t)
		if err := s.CreateSession(ctx, sess("s3", time.Minute)); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var deleted atomic.Bool
		for range 8 {
			wg.Go(func() {
				for i := range 20 {
					s.TouchSession(ctx, t0, "acme", "s3", t0.Add(time.Duration(i+2)*time.Minute))
				}
			})
		}
		wg.Go(func() {
			if err := s.DeleteSession(ctx, t0, "acme", "s3"); err == nil {
				deleted.Store(true)
			}
		})
		wg.Wait()
		if !deleted.Load() {
			t.Fatal("the delete failed")
		}
		if _, err := s.GetSession(ctx, t0, "acme", "s3"); !errors.Is(err, sluice.ErrSessionNotFound) {
			t.Fatalf("a touch brought the session back: %v", err)
		}
	})
}

// NewRegistry returns a new, empty registry for one test.
type NewRegistry func(t *testing.T) sluice.Registry

// RunRegistry runs the registry's conformance suite.
func RunRegistry(t *testing.T, newRegistry NewRegistry) {
	ctx := context.Background()
	r := newRegistry(t)
	reg := func(session, node string, ttl time.Duration) sluice.Registration {
		return sluice.Registration{Tenant: "acme", Session: session, Node: node, ExpiresAt: t0.Add(ttl)}
	}
	nodes := func(regs []sluice.Registration) []string {
		var out []string
		for _, x := range regs {
			out = append(out, x.Node)
		}
		slices.Sort(out)
		return out
	}
	for _, x := range []sluice.Registration{reg("s1", "http://a", time.Minute), reg("s1", "http://b", time.Second), reg("s2", "http://a", time.Minute)} {
		if err := r.Register(ctx, x); err != nil {
			t.Fatal(err)
		}
	}
	got, err := r.Registrations(ctx, t0, "acme", "s1")
	if err != nil || !slices.Equal(nodes(got), []string{"http://a", "http://b"}) {
		t.Fatalf("s1: %+v %v", got, err)
	}
	// b's registration expires unless renewed; renewed, it lives on, once.
	if got, _ := r.Registrations(ctx, t0.Add(2*time.Second), "acme", "s1"); !slices.Equal(nodes(got), []string{"http://a"}) {
		t.Fatalf("after b's expiry: %+v", got)
	}
	if err := r.Register(ctx, reg("s1", "http://b", time.Hour)); err != nil {
		t.Fatal(err)
	}
	got, _ = r.Registrations(ctx, t0.Add(2*time.Second), "acme", "s1")
	if !slices.Equal(nodes(got), []string{"http://a", "http://b"}) || got[0].Tenant != "acme" || got[0].Session != "s1" {
		t.Fatalf("after b's renewal: %+v", got)
	}
	if i := slices.IndexFunc(got, func(x sluice.Registration) bool { return x.Node == "http://b" }); !got[i].ExpiresAt.Equal(t0.Add(time.Hour)) {
		t.Fatalf("b's renewed registration: %+v, want it to expire at %v", got[i], t0.Add(time.Hour))
	}
	if err := r.Deregister(ctx, "acme", "s1", "http://a"); err != nil {
		t.Fatal(err)
	}
	if got, _ := r.Registrations(ctx, t0, "acme", "s1"); !slices.Equal(nodes(got), []string{"http://b"}) {
		t.Fatalf("after a's deregistration: %+v", got)
	}
	if got, _ := r.Registrations(ctx, t0, "acme", "s2"); !slices.Equal(nodes(got), []string{"http://a"}) {
		t.Fatalf("another session, after a's deregistration of s1: %+v", got)
	}
	if got, _ := r.Registrations(ctx, t0, "beta", "s1"); len(got) != 0 {
		t.Fatalf("another tenant's view: %+v", got)
	}
	if err := r.Deregister(ctx, "acme", "s9", "http://nope"); err != nil {
		t.Fatalf("deregistering nothing: %v", err)
	}
}
