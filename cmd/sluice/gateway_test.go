package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sluicehq/sluice/store/dynamostore/dynamotest"
)

func dialWS(t *testing.T, p *process, tenant, session string) (*websocket.Conn, int) {
	t.Helper()
	ws, status, _ := dialWSID(t, p, tenant, session)
	return ws, status
}

// dialWSID also returns the connection's id, from the handshake. It
// returns once the node has registered the connection, locally and for
// other nodes: the handshake's answer comes before that, and a message sent
// in between would miss the connection. The signal is a frame posted to the
// connection through the management API, which finds it only once
// registered locally, and which the node writes only after registering it
// for other nodes; the frame is read here.
func dialWSID(t *testing.T, p *process, tenant, session string) (*websocket.Conn, int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	ws, resp, err := websocket.Dial(ctx, "ws://"+p.addr+"/v1/ws?tenant="+tenant+"&session="+session, nil)
	if err != nil {
		if resp == nil {
			t.Fatalf("dial: %v", err)
		}
		return nil, resp.StatusCode, ""
	}
	id := resp.Header.Get("Sluice-Connection")
	const ready = `{"ready":true}`
	waitFor(t, "the connection's registration", func() bool {
		code, out := p.call(t, "", "POST", "/v1/tenants/"+tenant+"/connections/"+id, ready)
		if code == 401 || code == 403 {
			t.Fatalf("the management API refused the ready frame (a server with an admin key?): %d %v", code, out)
		}
		return code == 200
	})
	if _, b, err := ws.Read(ctx); err != nil || string(b) != ready {
		t.Fatalf("connection %s: the ready frame: %q %v", id, b, err)
	}
	return ws, 101, id
}

// TestGatewayEndToEnd: a session made over the API, a connection to it,
// an echo, and the session's deletion closing the connection.
func TestGatewayEndToEnd(t *testing.T) {
	p := start(t, "--config", "../../examples/sluice.yaml")
	code, out := p.call(t, "", "PUT", "/v1/tenants/demo/sessions", "")
	if code != 201 {
		t.Fatal(code, out)
	}
	id := out["id"].(string)
	ws, status := dialWS(t, p, "demo", id)
	if status != 101 {
		t.Fatalf("connect: %d", status)
	}
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	ws.Write(ctx, websocket.MessageText, []byte(`{"action":"silo","data":"hi"}`))
	_, b, err := ws.Read(ctx)
	var m map[string]any
	if err != nil || json.Unmarshal(b, &m) != nil || m["type"] != "echo" {
		t.Fatalf("echo: %s %v", b, err)
	}
	// The management API: a second connection, read, closed, then gone.
	ws2, status, cid := dialWSID(t, p, "demo", id)
	if status != 101 || cid == "" {
		t.Fatalf("second connect: %d %q", status, cid)
	}
	if code, out := p.call(t, "", "GET", "/v1/tenants/demo/connections/"+cid, ""); code != 200 || out["session"] != id {
		t.Fatalf("connection info: %d %v", code, out)
	}
	if code, _ := p.call(t, "", "GET", "/v1/tenants/acme/connections/"+cid, ""); code != 410 {
		t.Fatalf("another tenant's view of the connection: %d, want 410", code)
	}
	if code, _ := p.call(t, "", "DELETE", "/v1/tenants/demo/connections/"+cid, ""); code != 200 {
		t.Fatalf("close: %d", code)
	}
	if _, _, err := ws2.Read(ctx); websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Fatalf("closed by the API: %v", err)
	}
	waitFor(t, "a post to the closed connection to answer 410", func() bool {
		code, _ := p.call(t, "", "POST", "/v1/tenants/demo/connections/"+cid, `{"x":1}`)
		return code == 410
	})
	if code, _ := p.call(t, "", "DELETE", "/v1/tenants/demo/sessions/"+id, ""); code != 200 {
		t.Fatal(code)
	}
	if _, _, err := ws.Read(ctx); websocket.CloseStatus(err) != 4001 {
		t.Fatalf("after the deletion: %v", err)
	}
	if _, status := dialWS(t, p, "demo", id); status != 403 {
		t.Fatalf("connect to a deleted session: %d", status)
	}
}

// TestGatewayNodeKilled: two nodes on one DynamoDB table share the tenant's
// connection count; a node killed with SIGKILL stops its heartbeat, and its
// connections' counts come back by themselves within five heartbeats: the
// other node's next connect names its run dead, and its leases count for
// nothing.
func TestGatewayNodeKilled(t *testing.T) {
	ps := nodes(t, 2, "--ws-renew", "200ms", "--heartbeat", "500ms")
	a, b := ps[0], ps[1]
	if code, out := a.call(t, "", "POST", "/v1/tenants", `{"id":"acme","settings":{"tenantConnections":2,"connectionsPerSession":10,"tenantPerMinute":100,"sessionPerMinute":100,"sessionTTL":300,"messagesPerMinute":100}}`); code != 201 {
		t.Fatal(code, out)
	}
	_, out := a.call(t, "", "PUT", "/v1/tenants/acme/sessions", "")
	id := out["id"].(string)
	for range 2 {
		if _, status := dialWS(t, a, "acme", id); status != 101 {
			t.Fatalf("connect on A: %d", status)
		}
	}
	if _, status := dialWS(t, b, "acme", id); status != 429 {
		t.Fatalf("third connect on B: %d, want 429: B sees A's connections", status)
	}
	a.kill9(t)
	// A's run is dead 2s after its last heartbeat, and B knows it within
	// 500ms more; the bound is patience, not five heartbeats, so that a
	// loaded machine cannot fail the test: what it checks is that the
	// count comes back by itself, long before the leases' backstop.
	killed := time.Now()
	waitFor(t, "A's connections to stop counting after its SIGKILL (heartbeats of 500ms)", func() bool {
		ws, status := dialWS(t, b, "acme", id)
		if status == 101 {
			ws.Close(websocket.StatusNormalClosure, "")
		}
		return status == 101
	})
	t.Logf("A's connections released %v after its SIGKILL", time.Since(killed).Round(time.Millisecond))
}

// TestGatewayTwoNodeFanOut: two nodes on one DynamoDB table; a session's
// connection on node A receives the message and the reply of a message
// sent by its connection on node B.
func TestGatewayTwoNodeFanOut(t *testing.T) {
	ps := nodes(t, 2)
	a, b := ps[0], ps[1]
	if code, out := a.call(t, "", "POST", "/v1/tenants", `{"id":"acme"}`); code != 201 {
		t.Fatal(code, out)
	}
	_, out := a.call(t, "", "PUT", "/v1/tenants/acme/sessions", "")
	id := out["id"].(string)
	onA, status := dialWS(t, a, "acme", id)
	if status != 101 {
		t.Fatalf("connect on A: %d", status)
	}
	defer onA.Close(websocket.StatusNormalClosure, "")
	onB, status := dialWS(t, b, "acme", id)
	if status != 101 {
		t.Fatalf("connect on B: %d", status)
	}
	defer onB.Close(websocket.StatusNormalClosure, "")

	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	onB.Write(ctx, websocket.MessageText, []byte(`{"action":"pooled","data":"across"}`))
	got := map[string]bool{}
	for len(got) < 2 {
		_, b, err := onA.Read(ctx)
		if err != nil {
			t.Fatalf("A received %v, then: %v", got, err)
		}
		var m map[string]any
		json.Unmarshal(b, &m)
		if m["data"] != "across" {
			t.Fatalf("unexpected frame on A: %s", b)
		}
		got[m["type"].(string)] = true
	}
	if !got["message"] || !got["reply"] {
		t.Fatalf("A received %v, want the message and the reply", got)
	}
}

// TestGatewayManagementAcrossNodes: the management API on node B reads,
// posts to and closes a connection held by node A, forwarding to it; a
// session deleted through node A closes B's connections at once, with
// 4001.
func TestGatewayManagementAcrossNodes(t *testing.T) {
	ps := nodes(t, 2)
	a, b := ps[0], ps[1]
	if code, out := a.call(t, "", "POST", "/v1/tenants", `{"id":"acme"}`); code != 201 {
		t.Fatal(code, out)
	}
	_, out := a.call(t, "", "PUT", "/v1/tenants/acme/sessions", "")
	session := out["id"].(string)
	onA, status, id := dialWSID(t, a, "acme", session)
	if status != 101 {
		t.Fatalf("connect on A: %d", status)
	}
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()

	conn := "/v1/tenants/acme/connections/" + id
	if code, info := b.call(t, "", "GET", conn, ""); code != 200 || info["id"] != id || info["session"] != session {
		t.Fatalf("B reading A's connection: %d %v", code, info)
	}
	if code, out := b.call(t, "", "POST", conn, `{"via":"B"}`); code != 200 {
		t.Fatalf("B posting to A's connection: %d %v", code, out)
	}
	if _, m, err := onA.Read(ctx); err != nil || string(m) != `{"via":"B"}` {
		t.Fatalf("A's connection received %q, %v", m, err)
	}
	if code, out := b.call(t, "", "DELETE", conn, ""); code != 200 {
		t.Fatalf("B closing A's connection: %d %v", code, out)
	}
	if _, _, err := onA.Read(ctx); websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Fatalf("A's connection closed with %v, want 1000", err)
	}
	waitFor(t, "the closed connection gone", func() bool {
		code, _ := b.call(t, "", "GET", conn, "")
		return code == 410
	})

	// Deletion through A closes B's connection at once, with 4001.
	onB, status := dialWS(t, b, "acme", session)
	if status != 101 {
		t.Fatalf("connect on B: %d", status)
	}
	start := time.Now()
	if code, out := a.call(t, "", "DELETE", "/v1/tenants/acme/sessions/"+session, ""); code != 200 {
		t.Fatalf("delete: %d %v", code, out)
	}
	_, _, err := onB.Read(ctx)
	if code := websocket.CloseStatus(err); code != 4001 {
		t.Fatalf("B's connection of the deleted session closed with %v, want 4001", err)
	}
	t.Logf("B's connection closed %v after the deletion was asked of A", time.Since(start))
}

// TestGatewayMetrics: the gateway's metrics count what the test did:
// connects admitted and refused, messages by outcome, closes by code, and
// the live connections.
func TestGatewayMetrics(t *testing.T) {
	p := start(t, "--config", "../../examples/sluice.yaml", "--metrics-tenant-labels", "5")
	_, out := p.call(t, "", "PUT", "/v1/tenants/demo/sessions", "")
	session := out["id"].(string)
	ws, status := dialWS(t, p, "demo", session)
	if status != 101 {
		t.Fatalf("connect: %d", status)
	}
	if _, status := dialWS(t, p, "demo", "no-such-session"); status != 403 {
		t.Fatalf("connect to a session that is not: %d", status)
	}
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	for _, m := range []string{`{"action":"pooled","data":1}`, `{"action":"silo","data":2}`, `not json`} {
		ws.Write(ctx, websocket.MessageText, []byte(m))
		if _, _, err := ws.Read(ctx); err != nil {
			t.Fatal(err)
		}
	}
	scrape := func() string { b, _ := httpGet("http://" + p.addr + "/metrics"); return b }
	if live := scrape(); !strings.Contains(live, "sluice_gateway_connections 1\n") {
		t.Fatalf("live connections not 1:\n%s", grepLines(live, "sluice_gateway_"))
	}
	ws.Close(websocket.StatusNormalClosure, "")
	waitFor(t, "the close counted", func() bool { return strings.Contains(scrape(), `sluice_gateway_closes_total{code="1000"} 1`) })
	m := scrape()
	for _, want := range []string{
		`sluice_gateway_connects_total{outcome="admitted",tenant="demo"} 1`,
		`sluice_gateway_connects_total{outcome="forbidden",tenant="demo"} 1`,
		`sluice_gateway_messages_total{outcome="accepted",tenant="demo"} 2`,
		`sluice_gateway_messages_total{outcome="invalid",tenant="demo"} 1`,
		`sluice_gateway_queue_wait_seconds_count{queue="pooled"} 1`,
		`sluice_gateway_queue_wait_seconds_count{queue="silo"} 1`,
		"sluice_gateway_connections 0\n",
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s:\n%s", want, grepLines(m, "sluice_gateway_"))
		}
	}
}

// grepLines returns the lines of s that start with prefix.
func grepLines(s, prefix string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestGatewayStoreRequestsPerMessage: on DynamoDB, a session's messages on
// one node cost one store request each, the message limit's decision, and
// little more (target: at most 1.1): the session's expiry is written once
// per tenth of its TTL, its connections on other nodes are read once and
// kept, and the sweep reads only sessions that may have expired. Counted
// by a proxy in front of the emulator.
func TestGatewayStoreRequestsPerMessage(t *testing.T) {
	px := dynamotest.NewFaultProxy(t, dynamotest.Get(t).Endpoint)
	p := nodesVia(t, 1, px.Endpoint, "--ws-renew", "1m")[0]
	if code, out := p.call(t, "", "POST", "/v1/tenants", `{"id":"acme","settings":{"messagesPerMinute":100000}}`); code != 201 {
		t.Fatal(code, out)
	}
	_, out := p.call(t, "", "PUT", "/v1/tenants/acme/sessions", "")
	ws, status := dialWS(t, p, "acme", out["id"].(string))
	if status != 101 {
		t.Fatalf("connect: %d", status)
	}
	defer ws.Close(websocket.StatusNormalClosure, "")
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	const messages = 200
	before := px.Total()
	for i := range messages {
		ws.Write(ctx, websocket.MessageText, []byte(fmt.Sprintf(`{"action":"pooled","data":%d}`, i)))
		if _, b, err := ws.Read(ctx); err != nil || !strings.Contains(string(b), `"echo"`) {
			t.Fatalf("message %d: %s %v", i, b, err)
		}
	}
	per := float64(px.Total()-before) / messages
	t.Logf("%.3f store requests per message (%d requests for %d messages)", per, px.Total()-before, messages)
	if per > 1.1 {
		t.Fatalf("%.3f store requests per message, want at most 1.1", per)
	}
}

// TestGatewayCountsOnDynamoDB: on two nodes sharing a table, each node
// counts its connections of a tenant in one lease: a tenant with
// tenantConnections 100,000 holds 20,000 connections over both (their
// client ends in two other processes), fills the rest of a limit exactly
// and is refused one more; meanwhile a tenant with a limit of 50 admits
// exactly 50 of 200 concurrent connects spread over both (a connect the
// store could not decide under contention answers 503 with Retry-After,
// and is tried again, as a client would).
func TestGatewayCountsOnDynamoDB(t *testing.T) {
	ps := nodes(t, 2, "--ws-renew", "1m")
	for _, tenant := range []string{`{"id":"big","settings":{"tenantConnections":100000,"connectionsPerSession":1000,"tenantPerMinute":1000000,"sessionPerMinute":1000000}}`,
		`{"id":"exact","settings":{"tenantConnections":120,"connectionsPerSession":1000,"tenantPerMinute":100000,"sessionPerMinute":100000}}`,
		`{"id":"small","settings":{"tenantConnections":50,"connectionsPerSession":1000,"tenantPerMinute":100000,"sessionPerMinute":100000}}`} {
		if code, out := ps[0].call(t, "", "POST", "/v1/tenants", tenant); code != 201 {
			t.Fatal(code, out)
		}
	}
	// 20,000 connections of one tenant, 10,000 on each node, over 25
	// sessions of 800.
	var sessions []string
	for range 25 {
		_, out := ps[0].call(t, "", "PUT", "/v1/tenants/big/sessions", "")
		sessions = append(sessions, out["id"].(string))
	}
	start := time.Now()
	holders := []*holder{
		startHolder(t, holdSpec{Addr: ps[0].addr, Tenant: "big", Sessions: sessions, N: 10_000}),
		startHolder(t, holdSpec{Addr: ps[1].addr, Tenant: "big", Sessions: sessions, N: 10_000}),
	}
	for _, h := range holders {
		h.held(t, time.Minute)
	}
	t.Logf("20,000 connections of one tenant over two nodes in %v", time.Since(start).Round(time.Millisecond))
	if n := metric(t, ps[0], "sluice_gateway_connections") + metric(t, ps[1], "sluice_gateway_connections"); n != 20_000 {
		t.Fatalf("the nodes count %v live connections, want 20000", n)
	}
	var mu sync.Mutex
	var conns []*websocket.Conn
	defer func() {
		for _, ws := range conns {
			ws.CloseNow()
		}
	}()
	// dial connects, trying again after a 503 as its Retry-After asks
	// (here sooner). Contention on the counts no longer answers 503 (the
	// nodes combine their connects: gateway's TestConcurrentConnectsOnDynamoDB);
	// a store too slow for the deadline on a loaded machine still may, as
	// it should. It returns the final status.
	dial := func(p *process, tenant, session string) int {
		for range 50 {
			ctx, cancel := context.WithTimeout(context.Background(), patience)
			ws, resp, err := websocket.Dial(ctx, "ws://"+p.addr+"/v1/ws?tenant="+tenant+"&session="+session, nil)
			cancel()
			switch {
			case err == nil:
				mu.Lock()
				conns = append(conns, ws)
				mu.Unlock()
				return 101
			case resp == nil:
				t.Errorf("dial: %v", err)
				return -1
			case resp.StatusCode != 503:
				return resp.StatusCode
			}
			time.Sleep(20 * time.Millisecond) // a client's pause before trying again, not a handshake
		}
		return 503
	}
	_, out := ps[0].call(t, "", "PUT", "/v1/tenants/exact/sessions", "")
	exact := out["id"].(string)
	for i := range 120 {
		if status := dial(ps[i%2], "exact", exact); status != 101 {
			t.Fatalf("connect %d of 120: %d", i+1, status)
		}
	}
	if status := dial(ps[1], "exact", exact); status != 429 {
		t.Fatalf("connect 121 at a limit of 120: %d, want 429", status)
	}

	_, out = ps[0].call(t, "", "PUT", "/v1/tenants/small/sessions", "")
	small := out["id"].(string)
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() {
			switch status := dial(ps[i%2], "small", small); status {
			case 101:
				admitted.Add(1)
			case 429:
			default:
				t.Errorf("connect: %d", status)
			}
		})
	}
	wg.Wait()
	if admitted.Load() != 50 {
		t.Fatalf("admitted %d of 200 at a limit of 50 over two nodes", admitted.Load())
	}
	// The big tenant still holds its 20,000, and has room for more.
	if n := metric(t, ps[0], "sluice_gateway_connections") + metric(t, ps[1], "sluice_gateway_connections"); n != 20_000+120+50 {
		t.Fatalf("the nodes count %v live connections, want 20170", n)
	}
	if status := dial(ps[1], "big", sessions[0]); status != 101 {
		t.Fatalf("connect 20,001 of the big tenant: %d", status)
	}
}

// TestGatewayNodeStalled: a node stopped (SIGSTOP) past its heartbeat's
// life is a dead run to the other node, whose connects then take its share
// of the tenant's count; once it runs again (SIGCONT) it runs under a new
// tag and counts its connections anew, and those that no longer fit are
// closed (1013), so that the limit holds again: never a third connection
// for long, and the other node's two are not touched.
func TestGatewayNodeStalled(t *testing.T) {
	ps := nodes(t, 2, "--ws-renew", "200ms", "--heartbeat", "300ms")
	a, b := ps[0], ps[1]
	if code, out := a.call(t, "", "POST", "/v1/tenants", `{"id":"acme","settings":{"tenantConnections":2,"connectionsPerSession":10,"tenantPerMinute":1000,"sessionPerMinute":1000,"sessionTTL":300,"messagesPerMinute":100}}`); code != 201 {
		t.Fatal(code, out)
	}
	_, out := a.call(t, "", "PUT", "/v1/tenants/acme/sessions", "")
	id := out["id"].(string)
	var onA []*websocket.Conn
	for range 2 {
		ws, status := dialWS(t, a, "acme", id)
		if status != 101 {
			t.Fatalf("connect on A: %d", status)
		}
		onA = append(onA, ws)
	}
	if _, status := dialWS(t, b, "acme", id); status != 429 {
		t.Fatalf("third connect on B: %d, want 429", status)
	}
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	t.Cleanup(func() { // before the process's own cleanup, which cannot stop a stopped process
		if stopped {
			a.cmd.Process.Signal(syscall.SIGCONT)
		}
	})
	var onB []string // connection ids
	waitFor(t, "B to admit once A's run is dead", func() bool {
		ws, status, conn := dialWSID(t, b, "acme", id)
		if status == 101 {
			onB = append(onB, conn)
			t.Cleanup(func() { ws.Close(websocket.StatusNormalClosure, "") })
		}
		return status == 101
	})
	ws, status, conn := dialWSID(t, b, "acme", id)
	if status != 101 {
		t.Fatalf("second connect on B with A dead: %d", status)
	}
	defer ws.Close(websocket.StatusNormalClosure, "")
	onB = append(onB, conn)
	if _, status := dialWS(t, b, "acme", id); status != 429 {
		t.Fatalf("third connect on B: %d, want 429", status)
	}
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stopped = false
	for i, ws := range onA {
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		_, _, err := ws.Read(ctx)
		cancel()
		if code := websocket.CloseStatus(err); code != websocket.StatusTryAgainLater {
			t.Fatalf("A's connection %d after A ran again: %v, want closed 1013 (its count no longer fits)", i, err)
		}
	}
	// B's two are still open (a read with a deadline would close them),
	// and the limit still full, on both nodes.
	for _, conn := range onB {
		if code, out := b.call(t, "", "GET", "/v1/tenants/acme/connections/"+conn, ""); code != 200 {
			t.Fatalf("B's connection %s after A ran again: %d %v", conn, code, out)
		}
	}
	if _, status := dialWS(t, b, "acme", id); status != 429 {
		t.Fatalf("a connect on B after A ran again: %d, want 429 (B holds both)", status)
	}
	if _, status := dialWS(t, a, "acme", id); status != 429 {
		t.Fatalf("a connect on A after it ran again: %d, want 429 (B holds both)", status)
	}
}
