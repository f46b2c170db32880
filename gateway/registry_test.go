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

// recordingRegistry records every registration written.
type recordingRegistry struct {
	memstore.Registry
	mu    sync.Mutex
	calls []sluice.NodeRegistration
}

func (r *recordingRegistry) Register(ctx context.Context, x sluice.NodeRegistration) error {
	r.mu.Lock()
	r.calls = append(r.calls, sluice.NodeRegistration{Tenant: x.Tenant, Session: x.Session, Node: x.Node, Conns: slices.Clone(x.Conns), ExpiresAt: x.ExpiresAt})
	r.mu.Unlock()
	return r.Registry.Register(ctx, x)
}

func (r *recordingRegistry) written() []sluice.NodeRegistration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

// TestRegistrationPerNodeAndSession: a node registers its connections of
// a session in one record, renewed with one write per renewal period
// however many connections it holds (issue 25): each renewal carries all
// of the session's connections on the node, never one write per
// connection. A disconnect rewrites the record without it; the last
// removes it.
func TestRegistrationPerNodeAndSession(t *testing.T) {
	reg := &recordingRegistry{}
	f := newFixture(t, roomy, Options{Registry: reg, Node: "http://self", RenewEvery: 50 * time.Millisecond})
	f.session(t, "s1")
	f.session(t, "s2")
	var s1, s2 []*websocket.Conn
	for range 3 {
		s1 = append(s1, f.mustDial(t, "acme", "s1"))
	}
	for range 2 {
		s2 = append(s2, f.mustDial(t, "acme", "s2"))
	}
	live := func(session string) []string {
		regs, err := reg.Registrations(context.Background(), f.clock.now(), "acme", session)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, r := range regs {
			if r.Node != "http://self" {
				t.Fatalf("registered on node %q", r.Node)
			}
			ids = append(ids, r.Conn)
		}
		return ids
	}
	if n1, n2 := len(live("s1")), len(live("s2")); n1 != 3 || n2 != 2 {
		t.Fatalf("registered %d connections of s1 and %d of s2, want 3 and 2", n1, n2)
	}
	// Two renewal rounds at least: each write is a whole session's.
	c0 := len(reg.written())
	waitFor(t, "two renewals", func() bool { return len(reg.written()) >= c0+4 })
	for _, x := range reg.written()[c0:] {
		want := map[string]int{"s1": 3, "s2": 2}[x.Session]
		if len(x.Conns) != want {
			t.Fatalf("a renewal of %s wrote %d connections, want all %d in one write: %+v", x.Session, len(x.Conns), want, x)
		}
	}
	// A disconnect takes its connection off; the last takes the record.
	s1[0].Close(websocket.StatusNormalClosure, "")
	waitFor(t, "s1's registration without its first connection", func() bool { return len(live("s1")) == 2 })
	for _, ws := range append(s1[1:], s2...) {
		ws.Close(websocket.StatusNormalClosure, "")
	}
	waitFor(t, "no registrations", func() bool { return len(live("s1"))+len(live("s2")) == 0 })
}
