package peer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/wire"
)

// patience bounds every wait: generous, for shared machines, yet bounded.
const patience = 30 * time.Second

// node is one node of a test cluster: a real gateway, the management
// routes mounted on a mux, and the client its gateway reaches the other
// nodes with.
type node struct {
	url    string
	gw     *gateway.Gateway
	client *Client
}

// mux is a Router without authentication: the routes get the tenant of
// the path. (The server's is httpapi.Handler's, behind its keys.)
type mux struct{ *http.ServeMux }

func (m mux) TenantRoute(method, path string, fn func(w http.ResponseWriter, r *http.Request, tenant string)) {
	m.HandleFunc(method+" "+path, func(w http.ResponseWriter, r *http.Request) { fn(w, r, r.PathValue("id")) })
}

// newNodes starts n nodes sharing one memory store, session store and
// registry, as the nodes of a DynamoDB table do, each reaching the others
// through a Client.
func newNodes(t *testing.T, n int) []*node {
	t.Helper()
	st := memstore.New(memstore.Options{})
	t.Cleanup(func() { st.Close() })
	eng := engine.New(st, engine.Options{})
	sessions, reg := &memstore.Sessions{}, &memstore.Registry{}
	settings := sluice.TenantSettings{ConnectionsPerSession: 10, TenantConnections: 10, SessionPerMinute: 10, TenantPerMinute: 10, SessionTTL: 300, MessagesPerMinute: 10}
	var nodes []*node
	for range n {
		m := mux{http.NewServeMux()}
		srv := httptest.NewUnstartedServer(m)
		nd := &node{url: "http://" + srv.Listener.Addr().String(), client: NewClient("")}
		nd.gw = gateway.New(gateway.Options{
			Limiter: eng, Sessions: sessions, Registry: reg, Node: nd.url, Peer: nd.client,
			Tenant: func(context.Context, string) (gateway.Tenant, bool, error) {
				return gateway.Tenant{Settings: settings}, true, nil
			},
		})
		m.Handle("GET /v1/ws", nd.gw)
		Mount(m, nd.gw)
		srv.Start()
		t.Cleanup(func() {
			srv.Close()
			nd.gw.Close()
			nd.client.client.CloseIdleConnections()
		})
		nodes = append(nodes, nd)
	}
	now := time.Now()
	if err := sessions.CreateSession(context.Background(), sluice.Session{Tenant: "acme", ID: "s1", CreatedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	return nodes
}

// dial connects to nd as a client of acme's session s1, and returns the
// connection and its id.
func (nd *node) dial(t *testing.T) (*websocket.Conn, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	ws, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(nd.url, "http")+"/v1/ws?tenant=acme&session=s1", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.CloseNow() })
	return ws, resp.Header.Get("Sluice-Connection")
}

// call makes a client's call on a node, marked forwarded if asked, and
// returns its status and body.
func call(t *testing.T, method, u, body string, forwarded bool) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if forwarded {
		req.Header.Set(ForwardedHeader, "1")
	}
	c := &http.Client{}
	defer c.CloseIdleConnections()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// waitFor polls cond until it holds, failing after patience.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(patience); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, patience)
		}
		time.Sleep(10 * time.Millisecond) // the poll's period
	}
}

// TestForwardedAnsweredByTheNodeAlone: a client's management call on one
// node reaches a connection another node holds, forwarded through the
// Client; the same call marked forwarded is answered by the node alone
// (410: it holds no such connection), so that no call goes round. A
// close forwarded keeps its code and reason, and a connection closed is
// gone everywhere.
func TestForwardedAnsweredByTheNodeAlone(t *testing.T) {
	nodes := newNodes(t, 2)
	a, b := nodes[0], nodes[1]
	ws, id := b.dial(t)
	conn := a.url + "/v1/tenants/acme/connections/" + id

	if code, body := call(t, "GET", conn, "", false); code != 200 || !strings.Contains(body, `"session":"s1"`) {
		t.Fatalf("GET through the other node: %d %s, want the connection's info", code, body)
	}
	if code, body := call(t, "GET", conn, "", true); code != 410 {
		t.Fatalf("GET forwarded to a node that does not hold it: %d %s, want 410", code, body)
	}
	if code, body := call(t, "POST", conn, `{"note":"from the backend"}`, true); code != 410 {
		t.Fatalf("POST forwarded to a node that does not hold it: %d %s, want 410", code, body)
	}
	if code, body := call(t, "POST", conn, `{"note":"from the backend"}`, false); code != 200 || body != `{"sent":"`+id+`"}`+"\n" {
		t.Fatalf("POST through the other node: %d %s", code, body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	if _, got, err := ws.Read(ctx); err != nil || string(got) != `{"note":"from the backend"}` {
		t.Fatalf("the connection read %s %v, want the frame posted", got, err)
	}
	if code, body := call(t, "DELETE", conn+"?code=4001&reason=bye", "", false); code != 200 {
		t.Fatalf("DELETE through the other node: %d %s", code, body)
	}
	if _, _, err := ws.Read(ctx); websocket.CloseStatus(err) != 4001 || !strings.Contains(err.Error(), "bye") {
		t.Fatalf("the connection ended with %v, want 4001 bye", err)
	}
	waitFor(t, "the connection gone on its node", func() bool {
		_, err := a.client.Info(ctx, b.url, "acme", id)
		return errors.Is(err, gateway.ErrGone)
	})
}

// TestClientErrorKinds: a node's error answers come back through the
// Client as errors of their kind, naming the field at fault: 410 is
// gateway.ErrGone; a body that is not JSON, or over wire.MaxBodyBytes
// (413), names the body; a close code or reason out of range names it.
func TestClientErrorKinds(t *testing.T) {
	nd := newNodes(t, 1)[0]
	c, ctx := nd.client, context.Background()
	for _, tc := range []struct {
		name  string
		call  func() error
		kind  sluice.Kind
		field string
	}{
		{"gone", func() error { _, err := c.Info(ctx, nd.url, "acme", "s1.none"); return err }, sluice.KindGone, ""},
		{"not JSON", func() error { return c.Post(ctx, nd.url, "acme", "s1.none", []byte("nope")) }, sluice.KindInvalid, "body"},
		{"too large", func() error {
			return c.Post(ctx, nd.url, "acme", "s1.none", []byte(`"`+strings.Repeat("x", wire.MaxBodyBytes)+`"`))
		}, sluice.KindInvalid, "body"},
		{"close code", func() error { return c.Close(ctx, nd.url, "acme", "s1.none", 3000, "") }, sluice.KindInvalid, "code"},
		{"close reason", func() error { return c.Close(ctx, nd.url, "acme", "s1.none", 4000, strings.Repeat("x", 124)) }, sluice.KindInvalid, "reason"},
		{"changed", func() error { return c.Changed(ctx, nd.url, "acme", "s1", true) }, sluice.KindInternal, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if tc.kind == sluice.KindInternal {
				if err != nil {
					t.Fatalf("%v, want none", err)
				}
				return
			}
			if sluice.KindOf(err) != tc.kind || sluice.FieldOf(err) != tc.field {
				t.Fatalf("%v (%v, field %q), want %v naming %q", err, sluice.KindOf(err), sluice.FieldOf(err), tc.kind, tc.field)
			}
			if tc.kind == sluice.KindGone && !errors.Is(err, gateway.ErrGone) {
				t.Fatalf("%v, want gateway.ErrGone", err)
			}
		})
	}
	big := `"` + strings.Repeat("x", wire.MaxBodyBytes) + `"`
	if code, body := call(t, "POST", nd.url+"/v1/tenants/acme/connections/s1.none", big, true); code != 413 || !strings.Contains(body, `"field":"body"`) {
		t.Fatalf("a body over the limit: %d %s, want 413 naming the body", code, body)
	}
}

// recorder is a Gateway that records the calls the routes make.
type recorder struct {
	mu    sync.Mutex
	calls []string
}

func (g *recorder) add(format string, args ...any) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.calls = append(g.calls, fmt.Sprintf(format, args...))
}

// take returns the calls recorded, and forgets them.
func (g *recorder) take() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	calls := g.calls
	g.calls = nil
	return calls
}

func (g *recorder) PostToConnection(_ context.Context, tenant, id string, data []byte, forward bool) error {
	g.add("post %s %s %s forward=%v", tenant, id, data, forward)
	return nil
}

func (g *recorder) ConnectionInfo(_ context.Context, tenant, id string, forward bool) (gateway.ConnectionInfo, error) {
	g.add("info %s %s forward=%v", tenant, id, forward)
	return gateway.ConnectionInfo{ID: id, Tenant: tenant}, nil
}

func (g *recorder) CloseConnection(_ context.Context, tenant, id string, code websocket.StatusCode, reason string, forward bool) error {
	g.add("close %s %s %d %q forward=%v", tenant, id, code, reason, forward)
	return nil
}

func (g *recorder) SessionChanged(tenant, session string, newNode bool) {
	g.add("changed %s %s new=%v", tenant, session, newNode)
}

func (g *recorder) SessionGone(_ context.Context, tenant, session string) error {
	g.add("gone %s %s", tenant, session)
	return nil
}

// TestMountedRoutes: each route asks the gateway what its path, query
// and body say, forwarding a client's call and not a node's.
func TestMountedRoutes(t *testing.T) {
	g := &recorder{}
	m := mux{http.NewServeMux()}
	Mount(m, g)
	srv := httptest.NewServer(m)
	defer srv.Close()
	conn := srv.URL + "/v1/tenants/acme/connections/s1.c"
	for _, tc := range []struct {
		method, url, body string
		forwarded         bool
		want              string
	}{
		{"POST", conn, `{"a":1}`, false, `post acme s1.c {"a":1} forward=true`},
		{"POST", conn, `[1]`, true, `post acme s1.c [1] forward=false`},
		{"GET", conn, "", false, `info acme s1.c forward=true`},
		{"DELETE", conn, "", false, `close acme s1.c 1000 "closed by the server" forward=true`},
		{"DELETE", conn + "?" + url.Values{"code": {"4999"}, "reason": {"moved on"}}.Encode(), "", true, `close acme s1.c 4999 "moved on" forward=false`},
		{"POST", srv.URL + "/v1/tenants/acme/sessions/s1/changed?node=new", "", true, `changed acme s1 new=true`},
		{"POST", srv.URL + "/v1/tenants/acme/sessions/s1/changed", "", true, `changed acme s1 new=false`},
		{"POST", srv.URL + "/v1/tenants/acme/sessions/s1/gone", "", true, `gone acme s1`},
	} {
		code, body := call(t, tc.method, tc.url, tc.body, tc.forwarded)
		if calls := g.take(); code != 200 || len(calls) != 1 || calls[0] != tc.want {
			t.Errorf("%s %s: %d %s, asked %q; want %q", tc.method, tc.url, code, body, calls, tc.want)
		}
	}
}

func (g *recorder) DeliverLocal(tenant, session string, frames ...[]byte) int {
	g.add("deliver %s %s %q", tenant, session, frames)
	return 1
}
