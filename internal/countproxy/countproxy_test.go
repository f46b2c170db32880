package countproxy_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/countproxy"
	"github.com/sluicehq/sluice/store/dynamostore"
	"github.com/sluicehq/sluice/store/dynamostore/dynamotest"
)

func TestMain(m *testing.M) {
	code := dynamotest.Main(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			os.Stderr.WriteString("countproxy tests: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}

// through starts a counting proxy in front of endpoint, stopped at the end
// of the test.
func through(t *testing.T, endpoint string) (*countproxy.Proxy, string) {
	t.Helper()
	p, err := countproxy.New(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	t.Cleanup(func() { srv.Close(); p.Close() })
	return p, srv.URL
}

// TestCounts: a dynamostore client works through the proxy, and the proxy
// counts by operation exactly what reached the emulator, as a
// dynamotest.FaultProxy behind it counts it; its /metrics says the same.
func TestCounts(t *testing.T) {
	fp := dynamotest.NewFaultProxy(t, dynamotest.Get(t).Endpoint)
	p, endpoint := through(t, fp.Endpoint)
	db := dynamotest.NewClient(endpoint)
	ctx := dynamotest.Context(t)
	table := dynamotest.TableName(t)
	if err := dynamostore.CreateTable(ctx, db, table); err != nil {
		t.Fatal(err)
	}
	st, err := dynamostore.New(db, dynamostore.Options{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now()
	s := sluice.Session{Tenant: "acme", ID: "s1", CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
	if err := st.CreateSession(ctx, s); err != nil {
		t.Fatal(err)
	}
	if _, err := st.GetSession(ctx, now, "acme", "s1"); err != nil {
		t.Fatal(err)
	}
	for _, node := range []string{"http://127.0.0.1:1", "http://127.0.0.1:2"} {
		if err := st.Register(ctx, sluice.Registration{Tenant: "acme", Session: "s1", Node: node, ExpiresAt: now.Add(time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}
	if rs, err := st.Registrations(ctx, now, "acme", "s1"); err != nil || len(rs) != 2 {
		t.Fatalf("registrations %v, %v", rs, err)
	}
	if err := st.Deregister(ctx, "acme", "s1", "http://127.0.0.1:1"); err != nil {
		t.Fatal(err)
	}
	policy := &sluice.Policy{Name: "p", Algorithm: sluice.FixedWindow, Limit: 10, Window: time.Minute}
	dst := make([]sluice.Decision, 1)
	for range 3 {
		op := sluice.Op{Key: sluice.Key{Tenant: "acme", Algorithm: sluice.FixedWindow, Policy: "p", Value: "k"}, Policy: policy, Hits: 1}
		if err := st.Apply(ctx, now, []sluice.Op{op}, dst); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Scan(ctx, &dynamodb.ScanInput{TableName: aws.String(table), Limit: aws.Int32(1)}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{table: {{
		PutRequest: &types.PutRequest{Item: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "acme#x"}, "sk": &types.AttributeValueMemberS{Value: "x"}}},
	}}}}); err != nil {
		t.Fatal(err)
	}

	got := p.Counts()
	if fp.Total() == 0 || got.Total() != fp.Total() {
		t.Fatalf("the proxy counted %d requests (%v), the emulator's side %d", got.Total(), got, fp.Total())
	}
	for op, n := range got {
		if want := fp.Requests(op); n != want {
			t.Errorf("%s: counted %d, %d reached the emulator", op, n, want)
		}
	}
	for _, class := range []string{countproxy.Read, countproxy.Write, countproxy.Other} {
		if got.Class(class) == 0 {
			t.Errorf("no %s requests counted: %v", class, got)
		}
	}
	if got["Scan"] != 1 || got["BatchWriteItem"] != 1 {
		t.Errorf("Scan %d, BatchWriteItem %d, want 1 each", got["Scan"], got["BatchWriteItem"])
	}
	t.Logf("counted: %v", got)

	scraped, err := countproxy.Scrape(ctx, http.DefaultClient, endpoint+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if d := scraped.Sub(got); d.Total() != 0 || len(scraped) != len(got) {
		t.Fatalf("/metrics says %v, the proxy %v", scraped, got)
	}
	if p.Counts().Total() != got.Total() {
		t.Fatal("a GET of /metrics was counted as a DynamoDB request")
	}
}

// TestOther: a request of an operation the proxy does not know is
// forwarded and counted as "other", so the label set stays bounded.
func TestOther(t *testing.T) {
	p, endpoint := through(t, dynamotest.Get(t).Endpoint)
	for _, target := range []string{"DynamoDB_20120810.Frobnicate", "", "DynamoDB_20120810.Frobnicate2"} {
		req, _ := http.NewRequestWithContext(dynamotest.Context(t), http.MethodPost, endpoint+"/", strings.NewReader("{}"))
		req.Header.Set("X-Amz-Target", target)
		req.Header.Set("Content-Type", "application/x-amz-json-1.0")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusBadGateway {
			t.Fatalf("%q: not forwarded: %s", target, resp.Status)
		}
	}
	if c := p.Counts(); c["other"] != 3 || c.Total() != 3 {
		t.Fatalf("counts %v, want 3 other", c)
	}
}

// TestUnreachable: a request the endpoint does not answer is a 502, and
// counted.
func TestUnreachable(t *testing.T) {
	ln := httptest.NewServer(http.NotFoundHandler())
	dead := ln.URL
	ln.Close()
	p, endpoint := through(t, dead)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, endpoint+"/", strings.NewReader("{}"))
	req.Header.Set("X-Amz-Target", "DynamoDB_20120810.GetItem")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway || p.Counts()["GetItem"] != 1 {
		t.Fatalf("%s, counts %v", resp.Status, p.Counts())
	}
	resp, err = http.Get(endpoint + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || !strings.Contains(string(b), "sluice_proxy_dynamodb_failed_total 1\n") {
		t.Fatalf("/metrics: %v\n%s", err, b)
	}
}

func TestOperationAndClass(t *testing.T) {
	for _, tc := range []struct{ target, op, class string }{
		{"DynamoDB_20120810.PutItem", "PutItem", "write"},
		{"DynamoDB_20120810.TransactWriteItems", "TransactWriteItems", "write"},
		{"DynamoDB_20120810.BatchWriteItem", "BatchWriteItem", "write"},
		{"DynamoDB_20120810.GetItem", "GetItem", "read"},
		{"DynamoDB_20120810.TransactGetItems", "TransactGetItems", "read"},
		{"DynamoDB_20120810.Query", "Query", "read"},
		{"DynamoDB_20120810.DescribeTable", "DescribeTable", "other"},
		{"DynamoDB_20120810.NotAnOperation", "other", "other"},
		{"", "other", "other"},
		{"GetItem", "GetItem", "read"},
	} {
		if op := countproxy.Operation(tc.target); op != tc.op || countproxy.Class(op) != tc.class {
			t.Errorf("%q: %s %s, want %s %s", tc.target, op, countproxy.Class(op), tc.op, tc.class)
		}
	}
}

func TestParse(t *testing.T) {
	c, err := countproxy.Parse(strings.NewReader("# HELP x\nsluice_proxy_dynamodb_requests_total{class=\"write\",operation=\"PutItem\"} 7\n" +
		"sluice_proxy_dynamodb_requests_total{class=\"read\",operation=\"GetItem\"} 3\nsluice_proxy_dynamodb_failed_total 0\n"))
	if err != nil || c["PutItem"] != 7 || c["GetItem"] != 3 || c.Class("write") != 7 || c.Total() != 10 {
		t.Fatalf("%v %v", c, err)
	}
	if s := c.String(); s != "PutItem 7, GetItem 3" {
		t.Fatalf("String() = %q", s)
	}
	for _, bad := range []string{"", "go_goroutines 3\n", "sluice_proxy_dynamodb_requests_total{class=\"write\"} 7\n", "sluice_proxy_dynamodb_requests_total{operation=\"PutItem\"} x\n"} {
		if c, err := countproxy.Parse(strings.NewReader(bad)); err == nil {
			t.Errorf("%q parsed: %v", bad, c)
		}
	}
}
