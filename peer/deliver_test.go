package peer

import (
	"context"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"github.com/sluicehq/sluice"
)

// TestDeliverOncePerConnection: one delivery reaches every connection of
// the session on the node, its frames in order, and the same message
// delivered again (its answer lost) is not sent again; a frame larger
// than the management API's body limit goes through, and a frame that is
// not JSON is refused.
func TestDeliverOncePerConnection(t *testing.T) {
	nodes := newNodes(t, 2)
	a, b := nodes[0], nodes[1]
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	var conns []*websocket.Conn
	for range 2 {
		ws, id := b.dial(t)
		ws.SetReadLimit(-1)
		waitFor(t, "the connection held by its node", func() bool {
			_, err := b.gw.ConnectionInfo(ctx, "acme", id, false)
			return err == nil
		})
		conns = append(conns, ws)
	}
	big := []byte(`"` + strings.Repeat("x", 100<<10) + `"`)
	for _, d := range []struct {
		id     string
		frames [][]byte
	}{
		{"m1", [][]byte{[]byte(`{"n":1}`), []byte(`{"n":2}`)}},
		{"m1", [][]byte{[]byte(`{"n":1}`), []byte(`{"n":2}`)}}, // a repeat
		{"m2", [][]byte{big}},
	} {
		if err := a.client.Deliver(ctx, b.url, "acme", "s1", d.id, d.frames...); err != nil {
			t.Fatalf("deliver %s: %v", d.id, err)
		}
	}
	err := a.client.Deliver(ctx, b.url, "acme", "s1", "m3", []byte("nope"))
	if sluice.KindOf(err) != sluice.KindInvalid {
		t.Fatalf("a frame that is not JSON: %v, want it refused", err)
	}
	for i, ws := range conns {
		for _, want := range []string{`{"n":1}`, `{"n":2}`, string(big)} {
			if _, got, err := ws.Read(ctx); err != nil || string(got) != want {
				t.Fatalf("connection %d read %.40s %v, want %.40s", i, got, err, want)
			}
		}
	}
}

// TestSeenBounded: the ids kept are the last seenPerSession of each of
// the last sessions, at most max of them, and at most max/16 of one
// tenant's: a tenant delivering to many sessions pushes out its own, not
// another tenant's.
func TestSeenBounded(t *testing.T) {
	s := newSeen(32)
	if !s.add("t", "a", "1") || s.add("t", "a", "1") {
		t.Fatal("a repeat not dropped")
	}
	for i := range seenPerSession {
		s.add("t", "a", string(rune('A'+i)))
	}
	if !s.add("t", "a", "1") {
		t.Fatalf("an id older than the last %d still kept", seenPerSession)
	}
	s.add("other", "x", "1")
	for i := range 100 {
		s.add("t", strconv.Itoa(i), "1")
	}
	if s.add("other", "x", "1") {
		t.Error("another tenant's id forgotten when one tenant delivered to 100 sessions")
	}
	if n := s.sessions["t"]; n != 2 || len(s.ids) != 3 {
		t.Errorf("tenant t keeps %d sessions, %d kept in all; want 2 (32/16) and 3", n, len(s.ids))
	}
	for i := range 40 {
		s.add(strconv.Itoa(i), "s", "1")
	}
	if len(s.ids) != 32 || len(s.order) != 32 {
		t.Errorf("%d sessions kept, %d in order; want at most 32", len(s.ids), len(s.order))
	}
}

// TestReadFramesClaims: a delivery whose header claims more than its body
// holds, or more than maxDeliveryBody, is refused, naming what was wrong.
func TestReadFramesClaims(t *testing.T) {
	for _, c := range []struct {
		name, lens, body, want string
	}{
		{"short body", "7,7", `{"n":1}`, "body"},
		{"long body", "7", `{"n":1}{"n":2}`, "body"},
		{"over the most", strconv.Itoa(maxDeliveryBody + 1), "", DeliveryFramesHeader},
		{"not a length", "x", "", DeliveryFramesHeader},
	} {
		r := httptest.NewRequest("POST", "/", strings.NewReader(c.body))
		r.Header.Set(DeliveryFramesHeader, c.lens)
		_, err := readFrames(httptest.NewRecorder(), r)
		if sluice.KindOf(err) != sluice.KindInvalid || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want it refused naming %s", c.name, err, c.want)
		}
	}
}
