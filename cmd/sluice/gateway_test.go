package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/coder/websocket"
)

func dialWS(t *testing.T, p *process, tenant, session string) (*websocket.Conn, int) {
	t.Helper()
	ws, status, _ := dialWSID(t, p, tenant, session)
	return ws, status
}

// dialWSID also returns the connection's id, from the handshake.
func dialWSID(t *testing.T, p *process, tenant, session string) (*websocket.Conn, int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, resp, err := websocket.Dial(ctx, "ws://"+p.addr+"/v1/ws?tenant="+tenant+"&session="+session, nil)
	if err != nil {
		if resp == nil {
			t.Fatalf("dial: %v", err)
		}
		return nil, resp.StatusCode, ""
	}
	return ws, 101, resp.Header.Get("Sluice-Connection")
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
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
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
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, _ := p.call(t, "", "POST", "/v1/tenants/demo/connections/"+cid, `{"x":1}`)
		if code == 410 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("post to a closed connection: %d, want 410", code)
		}
		time.Sleep(20 * time.Millisecond)
	}
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
// connection count; a node killed with SIGKILL stops renewing, and its
// connections' counts come back within three renewal periods.
func TestGatewayNodeKilled(t *testing.T) {
	ps := nodes(t, 2, "--ws-renew", "200ms")
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
	deadline := time.Now().Add(5 * time.Second)
	for {
		ws, status := dialWS(t, b, "acme", id)
		if status == 101 {
			ws.Close(websocket.StatusNormalClosure, "")
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("A's connections still counted 5s after its SIGKILL (leases of 600ms)")
		}
		time.Sleep(100 * time.Millisecond)
	}
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

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
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
