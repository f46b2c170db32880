package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sluicehq/sluice/store/dynamostore/dynamotest"
)

// TestGatewayIdleStoreWrites: idle connections cost (almost) no store
// writes (issue 25, deliverable 1). Two real nodes share a table behind a
// request-counting proxy, renewing every second; 100 idle connections in
// 10 sessions, every session on both nodes. Over ten renewal periods the
// nodes may write their liveness (one write per node per 5 s) and at most
// 1 write a second per node per 1,000 idle sessions, whatever the number of
// connections, and a couple more for slack.
//
// It fails on the gateway of issue 9, which renews every connection's
// registration and every count's lease each renewal period:
// (connections + nodes × (sessions + tenants)) / renewal, 122 writes a
// second here (docs/design/gateway-scale.md). A loaded machine renews
// late, which only lowers the count: the bound needs no quiet machine.
func TestGatewayIdleStoreWrites(t *testing.T) {
	const (
		nodeCount = 2
		sessions  = 10
		perNode   = 5 // connections of each session on each node
		renew     = time.Second
		window    = 10 * renew
	)
	px := dynamotest.NewFaultProxy(t, dynamotest.Get(t).Endpoint)
	ps := nodesVia(t, nodeCount, px.Endpoint, "--ws-renew", renew.String())
	if code, out := ps[0].call(t, "", "POST", "/v1/tenants", `{"id":"idle","settings":{"tenantConnections":1000,"connectionsPerSession":100,"tenantPerMinute":100000,"sessionPerMinute":100000}}`); code != 201 {
		t.Fatal(code, out)
	}
	for range sessions {
		_, out := ps[0].call(t, "", "PUT", "/v1/tenants/idle/sessions", "")
		id := out["id"].(string)
		for range perNode {
			for _, p := range ps {
				ws, status := dialWS(t, p, "idle", id)
				if status != 101 {
					t.Fatalf("connect to node %s: %d", p.addr, status)
				}
				defer ws.Close(websocket.StatusNormalClosure, "")
			}
		}
	}
	conns := sessions * perNode * nodeCount
	// The connects' own writes settle within a renewal period.
	time.Sleep(renew)
	ops := []string{"PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems"}
	before := map[string]int64{}
	for _, op := range ops {
		before[op] = px.Requests(op)
	}
	w0, start := px.Writes(), time.Now()
	time.Sleep(window)
	writes, elapsed := px.Writes()-w0, time.Since(start)
	var by string
	for _, op := range ops {
		by += fmt.Sprintf(" %s %d", op, px.Requests(op)-before[op])
	}
	rate := float64(writes) / elapsed.Seconds()
	t.Logf("%d idle connections in %d sessions on %d nodes: %d writes in %v (%.1f/s, %.4f per connection per second):%s",
		conns, sessions, nodeCount, writes, elapsed.Round(time.Millisecond), rate, rate/float64(conns), by)
	// Each node's liveness: a write every 5 s, so at most one more than
	// the window holds; the sessions' share of 1 write/s per 1,000; slack.
	heartbeats := nodeCount * (int(elapsed/(5*time.Second)) + 1)
	allowed := float64(heartbeats) + elapsed.Seconds()*nodeCount*sessions/1000 + 2
	if float64(writes) > allowed {
		t.Fatalf("%d store writes in %v for %d idle connections, want at most %.1f (1 write/s per node per 1,000 idle sessions, and the nodes' liveness)",
			writes, elapsed.Round(time.Millisecond), conns, allowed)
	}
}
