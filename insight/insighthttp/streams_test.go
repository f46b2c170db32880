package insighthttp

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/insight"
	"github.com/sluicehq/sluice/peer"
	"github.com/sluicehq/sluice/store/memstore"
)

// openStream opens an insight stream with key; its status, and its
// events (event name, data) until the stream ends or cancel is called.
func (n *insightNode) openStream(t *testing.T, key, path string) (int, http.Header, <-chan [2]string, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	req, _ := http.NewRequestWithContext(ctx, "GET", n.srv.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	events := make(chan [2]string, 64)
	if resp.StatusCode != 200 {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		close(events)
		return resp.StatusCode, resp.Header, events, cancel
	}
	go func() {
		defer close(events)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		var event string
		for sc.Scan() {
			line := sc.Text()
			if e, ok := strings.CutPrefix(line, "event: "); ok {
				event = e
			} else if d, ok := strings.CutPrefix(line, "data: "); ok {
				select {
				case events <- [2]string{event, d}:
				default: // the test reads what it needs
				}
			}
		}
	}()
	return resp.StatusCode, resp.Header, events, cancel
}

// Streams are capped per tenant and per node: past either, 429 with
// Retry-After; a stream closed gives its place back.
func TestInsightStreamsCapped(t *testing.T) {
	tenants := &memstore.Tenants{}
	n := newInsightNode(t, tenants, Options{MaxStreams: 5, MaxTenantStreams: 2})
	keys := map[string]string{}
	for _, id := range []string{"acme", "beta"} {
		n.do(t, adminKey, "POST", "/v1/tenants", `{"id":"`+id+`"}`)
		_, out := n.do(t, adminKey, "POST", "/v1/tenants/"+id+"/keys", `{"name":"k"}`)
		keys[id] = out["token"].(string)
	}
	var cancels []context.CancelFunc
	defer func() {
		for _, c := range cancels {
			c()
		}
	}()
	open := func(key, path string, want int) {
		t.Helper()
		code, hdr, _, cancel := n.openStream(t, key, path)
		cancels = append(cancels, cancel)
		if code != want {
			t.Fatalf("GET %s: %d, want %d", path, code, want)
		}
		if want == http.StatusTooManyRequests && hdr.Get("Retry-After") == "" {
			t.Errorf("GET %s: 429 without Retry-After", path)
		}
	}
	open(keys["acme"], "/v1/tenants/acme/insight/stream", 200)
	open(keys["acme"], "/v1/tenants/acme/insight/stream", 200)
	open(keys["acme"], "/v1/tenants/acme/insight/stream", 429) // acme's cap
	open(keys["beta"], "/v1/tenants/beta/insight/stream", 200)
	open(keys["beta"], "/v1/tenants/beta/insight/stream", 200)
	open(adminKey, "/v1/insight/stream", 200)
	open(adminKey, "/v1/insight/stream", 429) // the node's cap
	// Closing one of acme's gives its place back, once the server sees it
	// gone.
	cancels[0]()
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, _, _, cancel := n.openStream(t, keys["acme"], "/v1/tenants/acme/insight/stream")
		cancels = append(cancels, cancel)
		if code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("acme's stream after closing one: %d, want 200", code)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A stream's key and tenant are checked again every second: deleting the
// key ends a tenant's stream, and deleting the tenant and creating it
// again ends the admin's stream of it, so neither delivers the decisions
// of a tenant it was not opened for.
func TestInsightStreamEndsWithItsKeyOrTenant(t *testing.T) {
	tenants := &memstore.Tenants{}
	n := newInsightNode(t, tenants, Options{})
	n.do(t, adminKey, "POST", "/v1/tenants", `{"id":"acme"}`)
	_, out := n.do(t, adminKey, "POST", "/v1/tenants/acme/keys", `{"name":"k"}`)
	token, id := out["token"].(string), out["id"].(string)

	code, _, events, cancel := n.openStream(t, token, "/v1/tenants/acme/insight/stream")
	defer cancel()
	if code != 200 {
		t.Fatalf("acme's stream: %d", code)
	}
	waitEvent(t, events, "second")
	if code, _ := n.do(t, adminKey, "DELETE", "/v1/tenants/acme/keys/"+id, ""); code != 200 && code != 204 {
		t.Fatalf("deleting acme's key: %d", code)
	}
	if e := waitEvent(t, events, "end"); !strings.Contains(e, "key") {
		t.Errorf("the end of a stream whose key was deleted: %s", e)
	}

	code, _, events, cancel2 := n.openStream(t, adminKey, "/v1/tenants/acme/insight/stream")
	defer cancel2()
	if code != 200 {
		t.Fatalf("the admin's stream of acme: %d", code)
	}
	waitEvent(t, events, "second")
	n.do(t, adminKey, "DELETE", "/v1/tenants/acme", "")
	time.Sleep(10 * time.Millisecond) // a creation time of its own
	n.do(t, adminKey, "POST", "/v1/tenants", `{"id":"acme"}`)
	if e := waitEvent(t, events, "end"); !strings.Contains(e, "tenant") {
		t.Errorf("the end of a stream whose tenant was made anew: %s", e)
	}
}

// waitEvent returns the data of the next event named name, failing if the
// stream ends first.
func waitEvent(t *testing.T, events <-chan [2]string, name string) string {
	t.Helper()
	for e := range events {
		if e[0] == name {
			return e[1]
		}
	}
	t.Fatalf("the stream ended without an event %q", name)
	return ""
}

// Many streams open on one node make one request a second to each other
// node, not one each, and still sum the other node's counts.
func TestInsightStreamsPollPeersOnce(t *testing.T) {
	tenants := &memstore.Tenants{}
	b := newInsightNode(t, tenants, Options{})
	var asked atomic.Int64
	counted := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		b.h.ServeHTTP(w, r)
	}))
	t.Cleanup(counted.Close)
	a := newInsightNode(t, tenants, Options{Cluster: peer.NewCluster("a", nodes{counted.URL}, peer.NewClient(adminKey), nil)})
	a.do(t, adminKey, "POST", "/v1/tenants", `{"id":"acme"}`)
	const streams = 20
	var all []<-chan [2]string
	for range streams {
		code, _, events, cancel := a.openStream(t, adminKey, "/v1/tenants/acme/insight/stream")
		defer cancel()
		if code != 200 {
			t.Fatalf("stream: %d", code)
		}
		all = append(all, events)
	}
	// Decisions on node b, every 100 ms, until a stream of node a shows
	// one of them.
	check := `{"tenant":"acme","checks":[{"policy":{"name":"api","algorithm":"fixed_window","limit":1000,"window":"1m"},"key":"k"}]}`
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go func() {
		for ctx.Err() == nil {
			b.request(t, adminKey, "POST", "/v1/check", check).Body.Close()
			time.Sleep(100 * time.Millisecond)
		}
	}()
	start := time.Now()
	for seen := false; !seen; {
		var got []insight.NamedPoints
		if err := json.Unmarshal([]byte(waitEvent(t, all[0], "second")), &got); err != nil {
			t.Fatal(err)
		}
		for _, s := range got {
			for _, p := range s.Points {
				seen = seen || p.Counts[0] > 0 // node a decided nothing: node b's
			}
		}
		if time.Since(start) > 20*time.Second {
			t.Fatal("node a's stream never showed node b's decisions")
		}
	}
	stop()
	secs := time.Since(start).Seconds() + 2 // the streams' first seconds too
	if got := float64(asked.Load()); got > secs*1.5+2 {
		t.Errorf("%d streams asked node b %v times in %.1fs: want one poll a second, not one a stream", streams, got, secs)
	}
}

// nodes is a shared store's list of live nodes, fixed.
type nodes []string

func (n nodes) Announce(context.Context, sluice.Heartbeat) error { return nil }

func (n nodes) Heartbeats(context.Context) ([]sluice.Heartbeat, error) {
	out := make([]sluice.Heartbeat, len(n))
	for i, node := range n {
		out[i] = sluice.Heartbeat{Node: node, Tag: uint16(i + 1), Until: time.Now().Add(time.Hour)}
	}
	return out, nil
}
