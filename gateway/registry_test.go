package gateway

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memstore"
)

// recordingRegistry records every registration written and removed.
type recordingRegistry struct {
	memstore.Registry
	mu      sync.Mutex
	writes  []sluice.Registration
	removed []string // sessions
}

func (r *recordingRegistry) Register(ctx context.Context, x sluice.Registration) error {
	r.mu.Lock()
	r.writes = append(r.writes, x)
	r.mu.Unlock()
	return r.Registry.Register(ctx, x)
}

func (r *recordingRegistry) Deregister(ctx context.Context, tenant, session, node string) error {
	r.mu.Lock()
	r.removed = append(r.removed, session)
	r.mu.Unlock()
	return r.Registry.Deregister(ctx, tenant, session, node)
}

func (r *recordingRegistry) written() []sluice.Registration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.writes)
}

// liveness is a Liveness whose runs the test sets.
type liveness struct {
	mu   sync.Mutex
	tag  uint16
	live bool
	dead []uint16
	gone []string
}

func (l *liveness) Self() (uint16, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tag, l.live
}

func (l *liveness) Dead() []uint16 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.dead)
}

func (l *liveness) Gone(node string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Contains(l.gone, node)
}

func (l *liveness) Heartbeat() time.Duration { return 10 * time.Millisecond }

func (l *liveness) set(f func(l *liveness)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f(l)
}

// TestRegistrationPerNodeAndSession: a node registers that it holds
// connections of a session once, at its first, and removes it with its
// last (issue 25). With Liveness, connects after the first and renewal
// periods write nothing more; without, the registration lives three
// renewals and each renewal writes it once per session, however many
// connections.
func TestRegistrationPerNodeAndSession(t *testing.T) {
	for _, withLiveness := range []bool{true, false} {
		reg := &recordingRegistry{}
		opts := Options{Registry: reg, Node: "http://self", RenewEvery: 20 * time.Millisecond}
		if withLiveness {
			opts.Liveness = &liveness{tag: 1, live: true}
		}
		f := newFixture(t, roomy, opts)
		f.session(t, "s1")
		f.session(t, "s2")
		var conns []*websocket.Conn
		for _, s := range []string{"s1", "s1", "s1", "s2", "s2"} {
			conns = append(conns, f.mustDial(t, "acme", s))
		}
		nodes := func(session string) int {
			regs, err := reg.Registrations(context.Background(), f.clock.now(), "acme", session)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range regs {
				if r.Node != "http://self" {
					t.Fatalf("registered on node %q", r.Node)
				}
			}
			return len(regs)
		}
		if n1, n2 := nodes("s1"), nodes("s2"); n1 != 1 || n2 != 1 {
			t.Fatalf("liveness %v: registrations of s1 and s2: %d and %d, want one each", withLiveness, n1, n2)
		}
		for range 5 { // five renewals, each a renewal period later by the gateway's clock
			f.clock.advance(opts.RenewEvery)
			n := f.g.renewals.Load()
			waitFor(t, "a renewal", func() bool { return f.g.renewals.Load() >= n+2 })
		}
		w := reg.written()
		switch {
		case withLiveness && len(w) != 2:
			t.Fatalf("with liveness, five connects of two sessions and five renewals wrote %d registrations, want 2: %+v", len(w), w)
		case !withLiveness && len(w) < 2+2*4:
			t.Fatalf("without liveness, five renewals rewrote %d registrations, want each session's at each", len(w)-2)
		}
		for _, ws := range conns[:2] {
			ws.Close(websocket.StatusNormalClosure, "")
		}
		for _, ws := range conns[3:] {
			ws.Close(websocket.StatusNormalClosure, "")
		}
		waitFor(t, "s2's registration gone with its last connection", func() bool { return nodes("s2") == 0 })
		if nodes("s1") != 1 {
			t.Fatalf("liveness %v: s1, one connection left, is not registered", withLiveness)
		}
		conns[2].Close(websocket.StatusNormalClosure, "")
		waitFor(t, "no registrations", func() bool { return nodes("s1") == 0 })
	}
}
