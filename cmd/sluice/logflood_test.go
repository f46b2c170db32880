package main

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/store/dynamostore/dynamotest"
)

// TestRefusalsDoNotFloodTheLog: 10,000 requests refused (429) by one
// tenant's policy reach the log as a few lines, not a line each: the first
// refusal of a tenant, route and status a minute, naming its policy; the
// rest are debug lines, which --log-level debug shows, one a request.
func TestRefusalsDoNotFloodTheLog(t *testing.T) {
	const requests = 10_000
	for _, level := range []string{"info", "debug"} {
		p := start(t, "--config", "../../examples/sluice.yaml", "--log-level", level)
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
		defer client.CloseIdleConnections()
		var refused atomic.Int64
		var wg sync.WaitGroup
		n := requests
		if level == "debug" {
			n = 1_000 // a line each: enough to see them
		}
		for w := range 8 {
			wg.Go(func() {
				for i := w; i < n; i += 8 {
					resp, err := client.Post("http://"+p.addr+"/v1/check", "application/json",
						strings.NewReader(`{"tenant":"acme","policies":["chat"],"key":{"user":"flood"}}`))
					if err != nil {
						t.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode == http.StatusTooManyRequests {
						refused.Add(1)
					}
				}
			})
		}
		wg.Wait()
		if refused.Load() < int64(n)/2 {
			t.Fatalf("%s: %d of %d refused; want most (chat admits 500 a minute)", level, refused.Load(), n)
		}
		lines := strings.Count(p.log(), "\n")
		refusalLines := strings.Count(p.log(), "status=429")
		switch level {
		case "info":
			if lines > 40 || refusalLines < 1 || !strings.Contains(p.log(), "policy=chat") || !strings.Contains(p.log(), "tenant=acme") {
				t.Fatalf("%d refusals logged %d lines (%d of refusals), want at most a few dozen, one naming the tenant and the policy:\n%s", refused.Load(), lines, refusalLines, p.log())
			}
		case "debug":
			// A request's line is written just after its answer: wait for
			// the last ones.
			waitFor(t, "a debug line for every refusal", func() bool {
				return strings.Count(p.log(), "status=429") >= int(refused.Load())
			})
		}
		t.Logf("--log-level %s: %d requests, %d refused, %d log lines", level, n, refused.Load(), lines)
	}
}

// TestStoreOutageDoesNotFloodTheLog: while every write to DynamoDB fails,
// each decision meets the failure and its fail mode decides; the log says
// so once an interval, counting the lines it held back, not once a request.
func TestStoreOutageDoesNotFloodTheLog(t *testing.T) {
	const requests = 300
	px := dynamotest.NewFaultProxy(t, dynamotest.Get(t).Endpoint)
	p := nodesVia(t, 1, px.Endpoint)[0]
	px.SetFaultRate(1)
	body := `{"tenant":"acme","checks":[{"policy":{"name":"open","algorithm":"fixed_window","limit":1000,"window":"1h","failMode":"open"}}]}`
	start := time.Now()
	for i := range requests {
		code, out := p.call(t, "", "POST", "/v1/check", body)
		if code != http.StatusOK || out["allowed"] != true || out["failedOpen"] != true {
			t.Fatalf("request %d in the outage: %d %v, want 200 allowed and failed open", i, code, out)
		}
	}
	elapsed := time.Since(start)
	lines := strings.Count(p.log(), "store failed; fail modes decide")
	// One line at the first failure, then at most one each 10 s.
	if want := 1 + int(elapsed/(10*time.Second)); lines < 1 || lines > want {
		t.Fatalf("%d requests failed open over %v; logged %d store-failure lines, want 1 to %d:\n%s", requests, elapsed.Round(time.Millisecond), lines, want, p.log())
	}
	if lines > 1 && !strings.Contains(p.log(), "suppressed=") {
		t.Fatalf("later lines do not count the failures held back:\n%s", p.log())
	}
}
