package gateway

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/coder/websocket"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/store/dynamostore"
	"github.com/sluicehq/sluice/store/dynamostore/dynamotest"
)

// outcomes counts the decisions of engines by outcome.
type outcomes struct{ n [6]atomic.Int64 }

func (o *outcomes) Decided(_ string, x engine.Outcome) { o.n[x].Add(1) }
func (o *outcomes) StoreDone(time.Duration, error)     {}

// failed returns the decisions that fell to their fail mode.
func (o *outcomes) failed() int64 {
	return o.n[engine.FailedOpen].Load() + o.n[engine.FailedClosed].Load()
}

// dynamoNodes starts dynoxide (skipping the test if `make deps` has not
// installed it, failing it with CI=true) and n gateway nodes on one new
// table of it, each with its own store, engine and server, as n `sluice
// serve` processes would be, their engines told to obs. Every store
// decision has timeout, the engine's deadline. Everything is stopped at
// the end of the test.
func dynamoNodes(t *testing.T, n int, s sluice.TenantSettings, timeout time.Duration, obs engine.Observer) ([]*httptest.Server, *dynamostore.Store) {
	t.Helper()
	bin, err := dynamotest.Find()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	srv, err := dynamotest.Start(bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	// A transport of the test's own, closed at its end: no idle
	// connection outlives it (TestMain checks for leaked goroutines).
	tr := &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256}
	t.Cleanup(tr.CloseIdleConnections)
	db := dynamodb.New(dynamodb.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(srv.Endpoint),
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
		HTTPClient:  &http.Client{Transport: tr},
	})
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	const table = "sluice_gateway_test"
	if err := dynamostore.CreateTable(ctx, db, table); err != nil {
		t.Fatal(err)
	}
	var servers []*httptest.Server
	var first *dynamostore.Store
	for range n {
		st, err := dynamostore.New(db, dynamostore.Options{Table: table})
		if err != nil {
			t.Fatal(err)
		}
		if first == nil {
			first = st
		}
		g := New(Options{
			Limiter:  engine.New(st, engine.Options{Timeout: timeout, Observer: obs}),
			Sessions: st,
			Tenant: func(ctx context.Context, tenant string) (Tenant, bool, error) {
				return Tenant{Settings: s}, tenant == "acme", nil
			},
			StoreTimeout: timeout,
		})
		hs := httptest.NewServer(g)
		t.Cleanup(func() { hs.Close(); g.Close(); st.Close() })
		servers = append(servers, hs)
	}
	return servers, first
}

// TestConcurrentConnectsOnDynamoDB: two gateway nodes on one DynamoDB
// table (dynoxide), 30 connects to one session at once, spread over both,
// at a tenant limit of 25, five times over: each time exactly 25 admitted,
// the other 5 refused with 429, not one answered 503, and, as the
// connections close, every count given back; and not one of the nodes'
// decisions, connects and disconnects alike, fell to its fail mode. Each
// node decides its tenant's waiting connects in one transaction of the
// four limits at a time, and shrinks a count one disconnect at a time, so
// the two nodes race each other for the tenant's and the session's
// counters: a write lost to the other node's is decided again from the
// items that won, never counted as a fault of the store. The engines'
// deadline is a test's generous one on a shared machine, so that
// contention, not slowness, is what is at stake.
func TestConcurrentConnectsOnDynamoDB(t *testing.T) {
	s := roomy
	s.TenantConnections, s.ConnectionsPerSession, s.TenantPerMinute, s.SessionPerMinute = 25, 30, 1000, 1000
	obs := &outcomes{}
	nodes, st := dynamoNodes(t, 2, s, patience, obs)
	now := time.Now()
	if err := st.CreateSession(context.Background(), sluice.Session{Tenant: "acme", ID: "s1", CreatedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	tenantConns := sluice.Policy{Name: policyTenantConns, Algorithm: sluice.Concurrency, Limit: 25, LeaseTTL: time.Hour}
	peek := engine.New(st, engine.Options{})
	for round := range 5 {
		var mu sync.Mutex
		statuses := map[int]int{}
		var conns []*websocket.Conn
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range 30 {
			wg.Go(func() {
				<-start
				ws, status := dialAt(nodes[i%len(nodes)], "acme", "s1")
				mu.Lock()
				defer mu.Unlock()
				statuses[status]++
				if ws != nil {
					conns = append(conns, ws)
				}
			})
		}
		close(start)
		wg.Wait()
		t.Logf("round %d: statuses %v", round, statuses)
		if statuses[http.StatusServiceUnavailable] != 0 {
			t.Errorf("round %d: %d connects answered 503 on a healthy, contended table", round, statuses[http.StatusServiceUnavailable])
		}
		if statuses[101] != 25 || statuses[http.StatusTooManyRequests] != 5 {
			t.Errorf("round %d: statuses %v; want 25 admitted and 5 refused with 429", round, statuses)
		}
		for _, ws := range conns {
			ws.Close(websocket.StatusNormalClosure, "")
		}
		// Every node has given its counts back before the next round.
		waitFor(t, fmt.Sprintf("round %d's connections gone", round), func() bool {
			res, err := peek.Check(context.Background(), sluice.Request{Tenant: "acme", Checks: []sluice.Check{{Policy: tenantConns, Space: sluice.SpaceInternal}}})
			return err == nil && res.Decision.Remaining == 25
		})
	}
	if n := obs.failed(); n != 0 {
		t.Errorf("%d of the nodes' decisions fell to their fail mode on a healthy, contended table", n)
	}
}
