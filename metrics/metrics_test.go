package metrics

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/store/dynamostore"
)

// TestRegistry: a node's collectors register side by side, and the
// handler serves theirs with the runtime's and the process's.
func TestRegistry(t *testing.T) {
	r := NewRegistry()
	g := NewGateway()
	stats := func() gateway.Stats { return gateway.Stats{Connections: 3} }
	dynamo := func() dynamostore.StatsSnapshot { return dynamostore.StatsSnapshot{Reads: 5} }
	if err := r.Register(NewDecisions(nil), g, GatewayStats(stats), DynamoDB(dynamo, nil)); err != nil {
		t.Fatal(err)
	}
	if err := r.Register(NewGateway()); err == nil {
		t.Error("a second gateway's metrics registered")
	}
	g.Closed("acme", 1000)
	w := httptest.NewRecorder()
	r.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	for _, want := range []string{
		`sluice_config_reloads_total{result="rejected"} 0`,
		`sluice_gateway_closes_total{code="1000"} 1`,
		`sluice_gateway_connections 3`,
		`sluice_dynamodb_reads_total 5`,
		`go_goroutines `,
	} {
		if !strings.Contains(w.Body.String(), want) {
			t.Errorf("no %q in\n%s", want, w.Body)
		}
	}
}
