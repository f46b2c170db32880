package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memstore"
)

// TestDeliveredOncePerNode: a message goes to each other
// node holding the session once, whatever the number of its connections
// there, with its message and reply in order; a node that cannot be
// reached is tried again by each delivery, five, and then the sender is
// told, while the node that took the message is not called again, and
// every delivery names the same message (its id).
func TestDeliveredOncePerNode(t *testing.T) {
	reg := &memstore.Registry{}
	p := &nodePeer{down: "http://down", calls: map[string]int{}, ids: map[string]bool{}}
	f := newFixture(t, roomy, Options{Registry: reg, Node: "http://self", Peer: p, RenewEvery: 50 * time.Millisecond})
	f.session(t, "s1")
	a := f.mustDial(t, "acme", "s1")
	defer a.Close(websocket.StatusNormalClosure, "")
	for _, node := range []string{"http://up", "http://down"} {
		reg.Register(context.Background(), sluice.Registration{Tenant: "acme", Session: "s1", Node: node, ExpiresAt: f.clock.now().Add(time.Hour)})
	}
	f.g.SessionChanged("acme", "s1", true)
	write(t, a, `{"action":"pooled","data":1,"id":"m1"}`)
	if m := read(t, a); m["type"] != "echo" {
		t.Fatalf("echo: %v", m)
	}
	if m := read(t, a); m["error"] != "Not Delivered" {
		t.Fatalf("after five failed deliveries: %v", m)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.calls["http://up"] != 1 || p.calls["http://down"] != 5 || len(p.ids) != 1 {
		t.Fatalf("calls %v, ids %v; want the node up called once, the node down five times, one message id", p.calls, p.ids)
	}
	if strings.Join(p.types, ",") != "message,reply" {
		t.Fatalf("the node up got %q, want the message and the reply", p.types)
	}
}

// nodePeer is a Peer whose node down cannot be reached.
type nodePeer struct {
	flakyPeer
	down  string
	mu    sync.Mutex
	calls map[string]int
	ids   map[string]bool
	types []string
}

func (p *nodePeer) Deliver(ctx context.Context, node, tenant, session, id string, frames ...[]byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls[node]++
	p.ids[id] = true
	if node == p.down {
		return errors.New("connection refused")
	}
	for _, f := range frames {
		var m map[string]any
		json.Unmarshal(f, &m)
		p.types = append(p.types, m["type"].(string))
	}
	return nil
}
