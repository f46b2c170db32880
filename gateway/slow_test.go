package gateway

import (
	"context"
	"fmt"
	"net"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// The attack of issue 22: clients that never read, in sessions whose
// senders send 32 KiB frames. Whatever their outboxes do, no queue worker
// and no other connection waits for them. The bound asserted is a quarter
// of the write timeout, 5s, against a few milliseconds when nothing waits:
// before, a worker waited for a full outbox up to the write timeout, and
// everything behind it with it.

// pad is the attack's frame: 32 KiB of data, pooled.
var pad = strings.Repeat("x", 32<<10)

// dialDeaf connects a client that reads the ready frame and never reads
// again, and returns it with its connection's id.
func (f *fixture) dialDeaf(t *testing.T, tenant, session string) (*websocket.Conn, string) {
	t.Helper()
	ws, resp, err := f.dial(tenant, session)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.CloseNow() })
	return ws, resp.Header.Get("Sluice-Connection")
}

// smallSocketBuffers serves the fixture's gateway anew on sockets whose
// kernel send buffer is 64 KiB (Linux grows it to 4 MiB by itself), so
// that a client that does not read reaches its outbox after a few frames,
// not after 4 MiB of them: the same attack, in less of the test's time.
func (f *fixture) smallSocketBuffers() {
	f.srv.Close()
	f.srv = httptest.NewUnstartedServer(f.g)
	f.srv.Listener = smallBuffers{f.srv.Listener}
	f.srv.Start()
}

type smallBuffers struct{ net.Listener }

func (l smallBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetWriteBuffer(64 << 10) // at worst, the test takes longer
	}
	return c, err
}

// closed reports whether the gateway has closed tenant's connection id
// (its close decided: the handshake may still run).
func (f *fixture) closed(tenant, id string) bool {
	_, err := f.g.lookup(tenant, id)
	return err != nil
}

// TestDeafMemberDelaysNoOther: a member of a session that never reads
// delays nobody. While 32 KiB messages fill its socket and its outbox, the
// member that reads gets each message at once, and the deaf member is
// closed for its outbox (1008), not after the write timeout.
func TestDeafMemberDelaysNoOther(t *testing.T) {
	s := roomy
	s.MessagesPerMinute = 1_000_000
	closes := &closeRecorder{}
	f := newFixture(t, s, Options{WriteTimeout: 20 * time.Second, Observer: closes})
	f.smallSocketBuffers()
	hostage := f.g.opts.WriteTimeout / 4
	f.session(t, "s1")
	sender := f.mustDial(t, "acme", "s1")
	defer sender.Close(websocket.StatusNormalClosure, "")
	reader := f.mustDial(t, "acme", "s1")
	defer reader.Close(websocket.StatusNormalClosure, "")
	for _, ws := range []*websocket.Conn{sender, reader} {
		ws.SetReadLimit(1 << 20)
	}
	_, deaf := f.dialDeaf(t, "acme", "s1")

	var worst time.Duration
	i := 0
	for ; !f.closed("acme", deaf); i++ {
		if i == 2_000 { // 128 MiB for the deaf member: far past any socket's buffers and its outbox
			t.Fatal("the member that does not read was never closed")
		}
		start := time.Now()
		write(t, sender, fmt.Sprintf(`{"action":"pooled","data":{"i":%d,"pad":%q}}`, i, pad))
		m := read(t, reader)
		if d, _ := m["data"].(map[string]any); m["type"] != "message" || d["i"] != float64(i) {
			t.Fatalf("message %d: the reader got %.80v", i, m)
		}
		worst = max(worst, time.Since(start))
		if worst >= hostage {
			t.Fatalf("message %d reached the member that reads after %v, behind the deaf member (bound %v)", i, worst, hostage)
		}
		if m := read(t, reader); m["type"] != "reply" {
			t.Fatalf("reply %d: %.80v", i, m)
		}
		if m := read(t, sender); m["type"] != "echo" {
			t.Fatalf("echo %d: %.80v", i, m)
		}
	}
	waitFor(t, "the deaf member's close counted as 1008", func() bool { return closes.count(websocket.StatusPolicyViolation) == 1 })
	// The session goes on without it.
	write(t, sender, `{"action":"pooled","data":"after"}`)
	if m := read(t, reader); m["type"] != "message" || m["data"] != "after" {
		t.Fatalf("after the drop: %.80v", m)
	}
	t.Logf("%d messages; worst delay to the member that reads: %v", i, worst)
}

// TestSlowTenantHoldsNoPooledWorker: one tenant keeps 8 sessions, each
// with a member that never reads (dialled again once it is closed) and a
// sender of 32 KiB frames; they hold none of the pooled queue's 4 workers.
// From the moment 4 of the deaf members are stuck (their outboxes over
// half full: before, each held a worker waiting for room) until every one
// is closed (1008), another tenant's pooled messages come back.
func TestSlowTenantHoldsNoPooledWorker(t *testing.T) {
	s := roomy
	s.MessagesPerMinute, s.TenantPerMinute = 1_000_000, 1_000
	closes := &closeRecorder{}
	f := newFixture(t, s, Options{WriteTimeout: 20 * time.Second, Observer: closes})
	f.smallSocketBuffers()
	hostage := f.g.opts.WriteTimeout / 4
	const sessions, rounds = 8, 2 // twice the pooled workers; each deaf member comes back once
	f.sessionOf(t, "beta", "victim")
	victim := f.mustDial(t, "beta", "victim")
	defer victim.Close(websocket.StatusNormalClosure, "")

	var mu sync.Mutex
	var deaf []string // the deaf members dialled so far
	ctx, cancel := context.WithCancel(context.Background())
	var attack sync.WaitGroup
	defer attack.Wait()
	defer cancel()
	for k := range sessions {
		id := fmt.Sprintf("a%d", k)
		f.session(t, id)
		sender := f.mustDial(t, "acme", id)
		sender.SetReadLimit(1 << 20)
		t.Cleanup(func() { sender.CloseNow() })
		attack.Go(func() {
			for range rounds {
				ws, resp, err := f.dial("acme", id)
				if err != nil {
					t.Errorf("dialling a deaf member: %v", err)
					return
				}
				defer ws.CloseNow()
				d := resp.Header.Get("Sluice-Connection")
				mu.Lock()
				deaf = append(deaf, d)
				mu.Unlock()
				// A sender that reads its echoes, until the deaf member
				// is closed.
				for i := 0; !f.closed("acme", d); i++ {
					if sender.Write(ctx, websocket.MessageText, fmt.Appendf(nil, `{"action":"pooled","data":{"i":%d,"pad":%q}}`, i, pad)) != nil {
						return
					}
					if _, _, err := sender.Read(ctx); err != nil {
						return
					}
				}
			}
		})
	}
	// stuck counts the deaf members closed or over half their outbox,
	// and reports whether every one of them is closed.
	stuck := func() (n int, allClosed bool) {
		mu.Lock()
		ids := slices.Clone(deaf)
		mu.Unlock()
		closed := 0
		for _, id := range ids {
			c, err := f.g.lookup("acme", id)
			if err != nil {
				n++
				closed++
				continue
			}
			c.out.mu.Lock()
			if c.out.size > f.g.opts.SendBuffer/2 {
				n++
			}
			c.out.mu.Unlock()
		}
		return n, closed == sessions*rounds
	}
	waitFor(t, "a pooled worker's worth of deaf members stuck", func() bool {
		n, _ := stuck()
		return n >= f.g.opts.PooledWorkers
	})

	var lat []time.Duration
	for i := 0; ; i++ {
		if _, done := stuck(); done && len(lat) >= 20 {
			break
		}
		start := time.Now()
		write(t, victim, fmt.Sprintf(`{"action":"pooled","data":%d}`, i))
		if m := read(t, victim); m["type"] != "echo" || m["data"] != float64(i) {
			t.Fatalf("the victim's message %d: %.80v", i, m)
		}
		lat = append(lat, time.Since(start))
		if d := lat[i]; d >= hostage {
			t.Fatalf("another tenant's pooled message %d took %v, held behind the deaf members (bound %v)", i, d, hostage)
		}
	}
	p50, p99 := percentiles(lat)
	t.Logf("the other tenant's round trip under the attack: %d messages, p50 %v, p99 %v, worst %v", len(lat), p50, p99, lat[len(lat)-1])
	waitFor(t, "every deaf member's close counted as 1008", func() bool {
		return closes.count(websocket.StatusPolicyViolation) == sessions*rounds
	})
}

// percentiles sorts ds and returns its median and 99th percentile.
func percentiles(ds []time.Duration) (p50, p99 time.Duration) {
	slices.Sort(ds)
	if n := len(ds); n > 0 {
		p50, p99 = ds[n/2], ds[min(n-1, n*99/100)]
	}
	return p50, p99
}
