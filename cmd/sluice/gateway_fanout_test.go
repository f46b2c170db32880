package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/coder/websocket"
)

// TestGatewayFanOutOncePerNode: node B is reached by other nodes through
// a proxy that counts their calls (B's --advertise-url). A session has one
// connection on A and five on B; every message sent on A reaches each of
// B's five, in order, with one call from A to B per message, whatever the
// number of B's connections (it was two per connection: the message and
// the reply, each posted on its own).
func TestGatewayFanOutOncePerNode(t *testing.T) {
	addrB := freeAddr(t)
	target, err := url.Parse("http://" + addrB)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	posts := map[string]int{} // the proxy's calls that carry frames, by kind
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "POST" && (strings.Contains(r.URL.Path, "/connections/") || strings.HasSuffix(r.URL.Path, "/deliver")) {
			mu.Lock()
			posts[r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]]++
			mu.Unlock()
		}
		proxy.ServeHTTP(w, r)
	}))
	defer srv.Close()
	ps := nodes(t, 1)
	a := ps[0]
	b := startAt(t, addrB, append(argsOf(a), "--advertise-url", srv.URL)...)

	if code, out := a.call(t, "", "POST", "/v1/tenants", `{"id":"acme","settings":{"tenantConnections":20,"connectionsPerSession":10,"tenantPerMinute":100,"sessionPerMinute":100,"sessionTTL":300,"messagesPerMinute":100}}`); code != 201 {
		t.Fatal(code, out)
	}
	_, out := a.call(t, "", "PUT", "/v1/tenants/acme/sessions", "")
	id := out["id"].(string)
	onA, status := dialWS(t, a, "acme", id)
	if status != 101 {
		t.Fatalf("connect on A: %d", status)
	}
	defer onA.Close(websocket.StatusNormalClosure, "")
	var onB []*websocket.Conn
	for range 5 {
		ws, status := dialWS(t, b, "acme", id)
		if status != 101 {
			t.Fatalf("connect on B: %d", status)
		}
		defer ws.Close(websocket.StatusNormalClosure, "")
		onB = append(onB, ws)
	}
	mu.Lock()
	clear(posts) // the calls before the messages (none carry frames)
	mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	const messages = 3
	for i := range messages {
		if err := onA.Write(ctx, websocket.MessageText, fmt.Appendf(nil, `{"action":"pooled","data":%d}`, i)); err != nil {
			t.Fatal(err)
		}
	}
	for k, ws := range onB {
		for i := range messages {
			for _, typ := range []string{"message", "reply"} {
				_, b, err := ws.Read(ctx)
				if err != nil {
					t.Fatalf("connection %d on B, message %d: %v", k, i, err)
				}
				var m map[string]any
				json.Unmarshal(b, &m)
				if m["type"] != typ || m["data"] != float64(i) {
					t.Fatalf("connection %d on B: got %s, want the %s of message %d", k, b, typ, i)
				}
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	total := 0
	for _, n := range posts {
		total += n
	}
	if total != messages {
		t.Fatalf("A called B %d times for %d messages to B's 5 connections (%v), want once per message", total, messages, posts)
	}
}

// argsOf returns the arguments p was started with past "serve --addr
// ADDR", so that another node joins the same store and table.
func argsOf(p *process) []string {
	args := p.cmd.Args
	for i, a := range args {
		if a == "--addr" {
			args = args[i+2:]
			break
		}
	}
	var out []string
	for i := 0; i < len(args); i++ {
		if args[i] == "--data-dir" { // each node has its own
			i++
			continue
		}
		out = append(out, args[i])
	}
	return out
}
