package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/coder/websocket"

	"github.com/sluicehq/sluice/store/dynamostore/dynamotest"
)

// The store requests of a connect and of a message on two real nodes,
// counted by a proxy in front of the emulator (issue 25, deliverables 2 and
// 4). Both fail on the gateway of issue 9: see
// docs/design/gateway-scale.md for where the requests go.

// costNodes starts two nodes behind a counting proxy, renewing once a
// minute (no renewal falls in a count), with tenant "cost".
func costNodes(t *testing.T) (*dynamotest.FaultProxy, []*process) {
	t.Helper()
	px := dynamotest.NewFaultProxy(t, dynamotest.Get(t).Endpoint)
	ps := nodesVia(t, 2, px.Endpoint, "--ws-renew", "1m")
	if code, out := ps[0].call(t, "", "POST", "/v1/tenants", `{"id":"cost","settings":{"tenantConnections":1000,"connectionsPerSession":100,"tenantPerMinute":100000,"sessionPerMinute":100000,"messagesPerMinute":1000000}}`); code != 201 {
		t.Fatal(code, out)
	}
	return px, ps
}

// TestGatewayStoreRequestsPerConnect: connects made one after another (a
// steady rate), alternating between two nodes over 10 sessions, cost at
// most 2 store requests each on average. The connect's requests are all
// made before its 101 answer, so the count after the last dial is whole.
func TestGatewayStoreRequestsPerConnect(t *testing.T) {
	px, ps := costNodes(t)
	var sessions []string
	for range 10 {
		_, out := ps[0].call(t, "", "PUT", "/v1/tenants/cost/sessions", "")
		sessions = append(sessions, out["id"].(string))
	}
	const connects = 100
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	before, ops := px.Total(), counts(px)
	for i := range connects {
		p := ps[i%2]
		ws, resp, err := websocket.Dial(ctx, "ws://"+p.addr+"/v1/ws?tenant=cost&session="+sessions[(i/2)%len(sessions)], nil)
		if err != nil {
			status := 0
			if resp != nil {
				status = resp.StatusCode
			}
			t.Fatalf("connect %d: %d %v", i, status, err)
		}
		defer ws.CloseNow()
	}
	n := px.Total() - before
	per := float64(n) / connects
	t.Logf("%.2f store requests per connect (%d for %d):%s", per, n, connects, byOperation(px, ops))
	if per > 2 {
		t.Fatalf("%.2f store requests per connect, want at most 2", per)
	}
}

// TestGatewayStoreRequestsPerMessageTwoNodes: a sender on each node, of
// the same tenant, one message at a time each, both at once: a message
// costs at most 1.1 store requests, as on one node
// (TestGatewayStoreRequestsPerMessage), though both nodes decide the
// tenant's one message limit.
func TestGatewayStoreRequestsPerMessageTwoNodes(t *testing.T) {
	px, ps := costNodes(t)
	const messages = 200 // per sender
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	senders := make([]*websocket.Conn, len(ps))
	for i, p := range ps {
		_, out := ps[0].call(t, "", "PUT", "/v1/tenants/cost/sessions", "")
		ws, status := dialWS(t, p, "cost", out["id"].(string))
		if status != 101 {
			t.Fatalf("connect: %d", status)
		}
		defer ws.Close(websocket.StatusNormalClosure, "")
		senders[i] = ws
	}
	before, ops := px.Total(), counts(px)
	var wg sync.WaitGroup
	for _, ws := range senders {
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
	n := px.Total() - before
	per := float64(n) / (messages * float64(len(senders)))
	t.Logf("%.3f store requests per message (%d for %d):%s", per, n, messages*len(senders), byOperation(px, ops))
	if per > 1.1 {
		t.Fatalf("%.3f store requests per message on two nodes, want at most 1.1", per)
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
