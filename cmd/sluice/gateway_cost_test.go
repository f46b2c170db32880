package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sluicehq/sluice/store/dynamostore/dynamotest"
	"github.com/sluicehq/sluice/wire"
)

// The store requests of a message on two and three real nodes, counted by
// a proxy in front of the emulator (issue 25, deliverable 2), and the
// tenant's message limit held across the nodes as they decide it from
// leased batches. See docs/design/gateway-scale.md for where the requests
// go.

// costNodes starts n nodes behind a counting proxy, renewing once a
// minute (no renewal falls in a count), with tenant "cost" of the
// settings given.
func costNodes(t *testing.T, n int, settings string) (*dynamotest.FaultProxy, []*process) {
	t.Helper()
	px := dynamotest.NewFaultProxy(t, dynamotest.Get(t).Endpoint)
	ps := nodesVia(t, n, px.Endpoint, "--ws-renew", "1m")
	if code, out := ps[0].call(t, "", "POST", "/v1/tenants", `{"id":"cost","settings":`+settings+`}`); code != 201 {
		t.Fatal(code, out)
	}
	return px, ps
}

// senders connects one client to each node, each in a session of its own.
func senders(t *testing.T, ps []*process) []*websocket.Conn {
	t.Helper()
	conns := make([]*websocket.Conn, len(ps))
	for i, p := range ps {
		_, out := ps[0].call(t, "", "PUT", "/v1/tenants/cost/sessions", "")
		ws, status := dialWS(t, p, "cost", out["id"].(string))
		if status != 101 {
			t.Fatalf("connect: %d", status)
		}
		t.Cleanup(func() { ws.Close(websocket.StatusNormalClosure, "") })
		conns[i] = ws
	}
	return conns
}

// TestGatewayStoreRequestsPerMessageTwoNodes: a sender on each node, of
// the same tenant, one message at a time each, all at once: a message
// costs at most 1.1 store requests, as on one node
// (TestGatewayStoreRequestsPerMessage), though every node decides the
// tenant's one message limit: each takes leased batches of it.
func TestGatewayStoreRequestsPerMessageTwoNodes(t *testing.T) { requestsPerMessage(t, 2) }

// TestGatewayStoreRequestsPerMessageThreeNodes: the same on three nodes.
func TestGatewayStoreRequestsPerMessageThreeNodes(t *testing.T) { requestsPerMessage(t, 3) }

func requestsPerMessage(t *testing.T, n int) {
	px, ps := costNodes(t, n, `{"tenantConnections":1000,"connectionsPerSession":100,"tenantPerMinute":100000,"sessionPerMinute":100000,"messagesPerMinute":1000000}`)
	const messages = 200 // per sender
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	conns := senders(t, ps)
	before, ops := px.Total(), counts(px)
	var wg sync.WaitGroup
	for _, ws := range conns {
		wg.Go(func() {
			for i := range messages {
				ws.Write(ctx, websocket.MessageText, []byte(fmt.Sprintf(`{"action":"pooled","data":%d}`, i)))
				if _, b, err := ws.Read(ctx); err != nil || !strings.Contains(string(b), `"echo"`) {
					t.Errorf("message %d: %s %v", i, b, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	reqs := px.Total() - before
	per := float64(reqs) / (messages * float64(len(conns)))
	t.Logf("%.3f store requests per message on %d nodes (%d for %d):%s", per, n, reqs, messages*len(conns), byOperation(px, ops))
	if per > 1.1 {
		t.Fatalf("%.3f store requests per message on %d nodes, want at most 1.1", per, n)
	}
}

// TestGatewayMessageLimitAcrossNodes: a tenant of 500 messages a minute
// sends 1,200 from two nodes at once, one at a time from a client on
// each; each message is answered by its echo (admitted) or a "Too Many
// Requests" frame (throttled), never "Service Unavailable". In one
// minute, the messages admitted over both nodes never pass the limit, and
// fall short of it by at most the batches the nodes hold unused (one each,
// at most 2% of the limit).
func TestGatewayMessageLimitAcrossNodes(t *testing.T) {
	const limit, messages = 500, 600 // messages per sender
	_, ps := costNodes(t, 2, fmt.Sprintf(`{"tenantConnections":1000,"connectionsPerSession":100,"tenantPerMinute":100000,"sessionPerMinute":100000,"messagesPerMinute":%d}`, limit))
	conns := senders(t, ps)
	// One aligned minute for the whole run: the sliding window's
	// estimate then counts every admitted message in full. A run that
	// starts late in a minute waits for the next.
	if s := time.Now().UTC().Second(); s > 50 {
		time.Sleep(time.Duration(61-s) * time.Second)
	}
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	begin := time.Now().UTC()
	var mu sync.Mutex
	admitted, throttled := 0, 0
	var wg sync.WaitGroup
	for _, ws := range conns {
		wg.Go(func() {
			for i := range messages {
				ws.Write(ctx, websocket.MessageText, []byte(fmt.Sprintf(`{"action":"pooled","data":%d}`, i)))
				_, b, err := ws.Read(ctx)
				if err != nil {
					t.Errorf("message %d: %v", i, err)
					return
				}
				mu.Lock()
				switch {
				case strings.Contains(string(b), `"echo"`):
					admitted++
				case strings.Contains(string(b), `"error":"`+wire.WSThrottled+`"`):
					throttled++
				default:
					t.Errorf("message %d: %s, want its echo or %q", i, b, wire.WSThrottled)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	end := time.Now().UTC()
	if t.Failed() {
		return
	}
	t.Logf("admitted %d, throttled %d of %d at a limit of %d a minute, in %v", admitted, throttled, 2*messages, limit, end.Sub(begin))
	if end.Truncate(time.Minute) != begin.Truncate(time.Minute) {
		// The run straddles two windows (slower than 10 s), where the
		// sliding window's bound is twice the limit.
		if admitted > 2*limit {
			t.Fatalf("admitted %d across a minute's end, at a limit of %d", admitted, limit)
		}
		return
	}
	if admitted > limit {
		t.Fatalf("admitted %d in one minute, at a limit of %d", admitted, limit)
	}
	if floor := limit - 2*limit/50; admitted < floor {
		t.Fatalf("admitted %d in one minute, at a limit of %d: short of it by more than the nodes' two batches (want at least %d)", admitted, limit, floor)
	}
}

// operations are the DynamoDB operations the gateway uses.
var operations = []string{"GetItem", "Query", "PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems"}

// counts returns the proxy's counts by operation.
func counts(px *dynamotest.FaultProxy) map[string]int64 {
	m := map[string]int64{}
	for _, op := range operations {
		m[op] = px.Requests(op)
	}
	return m
}

// byOperation lists the proxy's requests by operation since before, for
// the log.
func byOperation(px *dynamotest.FaultProxy, before map[string]int64) string {
	var s string
	for _, op := range operations {
		s += fmt.Sprintf(" %s %d", op, px.Requests(op)-before[op])
	}
	return s
}
