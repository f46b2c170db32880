package main

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/coder/websocket"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluicehq/sluice/store/dynamostore"
	"github.com/sluicehq/sluice/store/dynamostore/dynamotest"
)

// grafanaDashboard is what the test reads of the Grafana dashboard: its
// panels and its variables' queries.
type grafanaDashboard struct {
	Panels     []grafanaPanel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Query string `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

// grafanaPanel is what the test reads of a panel of the Grafana dashboard.
type grafanaPanel struct {
	Title       string `json:"title"`
	Type        string `json:"type"`
	FieldConfig struct {
		Defaults struct {
			Unit string `json:"unit"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

func readGrafanaDashboard(t *testing.T) grafanaDashboard {
	t.Helper()
	b, err := os.ReadFile("../../docs/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("docs/grafana-dashboard.json: %v", err)
	}
	if len(d.Panels) == 0 {
		t.Fatal("the dashboard has no panels")
	}
	return d
}

var (
	// metricRead is a metric a query reads.
	metricRead = regexp.MustCompile(`\b(?:sluice|process|go)_[a-z_]+`)
	// rangeWindow is a range selector's window, [1m] or [$__rate_interval].
	rangeWindow = regexp.MustCompile(`\[[^\]]*\]`)
	// perSecond are Grafana's units of a rate; quantile panels are in
	// seconds.
	perSecond = []string{"reqps", "ops", "rps", "wps", "cps"}
	// units are the units a panel may have: a rate's, seconds, a ratio,
	// bytes, or a plain count.
	units = append([]string{"s", "percentunit", "bytes", "short", "none"}, perSecond...)
)

// TestGrafanaDashboard: the Grafana dashboard in docs/ is valid JSON; every
// range of its queries is $__rate_interval, never a fixed window that a
// scrape interval longer than it would leave empty; every panel has a
// unit, a rate a per-second one and a quantile seconds; and it has the API
// latency panels (p50, p90 and p99 of HTTP by route and of gRPC by
// method), request rates by code and the upstreams' panels.
func TestGrafanaDashboard(t *testing.T) {
	panels := readGrafanaDashboard(t).Panels
	exprs := ""
	for _, p := range panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		unit := p.FieldConfig.Defaults.Unit
		if !slices.Contains(units, unit) {
			t.Errorf("panel %q has unit %q, want one of %v", p.Title, unit, units)
		}
		for _, tg := range p.Targets {
			exprs += tg.Expr + "\n"
			for _, w := range rangeWindow.FindAllString(tg.Expr, -1) {
				if w != "[$__rate_interval]" {
					t.Errorf("panel %q reads a fixed window %s, want [$__rate_interval]: %s", p.Title, w, tg.Expr)
				}
			}
			switch {
			case strings.Contains(tg.Expr, "histogram_quantile(") && unit != "s":
				t.Errorf("panel %q shows quantiles of seconds in %q, want s", p.Title, unit)
			case strings.Contains(tg.Expr, " / "):
				// a ratio of rates: a share, or whatever the panel says
			case !strings.Contains(tg.Expr, "histogram_quantile(") && strings.Contains(tg.Expr, "rate(") && !slices.Contains(perSecond, unit):
				t.Errorf("panel %q shows a rate in %q, want one of %v", p.Title, unit, perSecond)
			}
		}
	}
	for _, want := range []string{
		`histogram_quantile(0.5, sum by (route, le) (rate(sluice_http_request_duration_seconds_bucket`,
		`histogram_quantile(0.9, sum by (route, le) (rate(sluice_http_request_duration_seconds_bucket`,
		`histogram_quantile(0.99, sum by (route, le) (rate(sluice_http_request_duration_seconds_bucket`,
		`histogram_quantile(0.5, sum by (method, le) (rate(sluice_grpc_request_duration_seconds_bucket`,
		`histogram_quantile(0.9, sum by (method, le) (rate(sluice_grpc_request_duration_seconds_bucket`,
		`histogram_quantile(0.99, sum by (method, le) (rate(sluice_grpc_request_duration_seconds_bucket`,
		`sum by (code) (rate(sluice_http_requests_total`,
		`sum by (code) (rate(sluice_grpc_requests_total`,
		`sluice_upstream_grants_total`,
		`sluice_upstream_refusals_total`,
		`sluice_upstream_queue_depth`,
		`sluice_upstream_wait_seconds_bucket`,
		`sluice_build_info`,
	} {
		if !strings.Contains(exprs, want) {
			t.Errorf("no query of the dashboard reads %s", want)
		}
	}
}

// TestGrafanaDashboardMetrics: every metric the dashboard reads is one
// that /metrics of a real server declares (a # TYPE line), once the
// server has seen each kind of traffic: HTTP checks, gRPC calls, an
// upstream's acquire, a WebSocket connect and message, on DynamoDB. A
// metric renamed or never declared breaks this test, not an operator's
// dashboard.
func TestGrafanaDashboardMetrics(t *testing.T) {
	d := readGrafanaDashboard(t)
	endpoint := dynamotest.Get(t).Endpoint
	table := dynamotest.TableName(t)
	if err := dynamostore.CreateTable(dynamotest.Context(t), dynamotest.NewClient(endpoint), table); err != nil {
		t.Fatal(err)
	}
	grpcAddr := freeAddr(t)
	p := start(t, "--store", "dynamodb", "--dynamodb-endpoint", endpoint, "--dynamodb-table", table,
		"--config", "../../examples/sluice.yaml", "--grpc-addr", grpcAddr)

	p.check(t, `{"tenant":"acme","checks":[{"key":"u1","policy":{"name":"chat","algorithm":"fixed_window","limit":1,"window":"1h"}}]}`)
	r := dialRLS(t, grpcAddr)
	if _, err := healthpb.NewHealthClient(r.conn).Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	if code, out := p.call(t, "", "POST", "/v1/upstreams/partner-api/acquire", `{"tenant":"acme","key":"u1"}`); code != 200 {
		t.Fatalf("acquire: %d %v", code, out)
	}
	ws := demoConnection(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	if err := ws.Write(ctx, websocket.MessageText, []byte(`{"action":"silo","data":"hi"}`)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ws.Read(ctx); err != nil {
		t.Fatalf("echo: %v", err)
	}

	_, declared := scrape(t, p)
	n := 0
	reads := func(where, expr string) {
		for _, m := range metricRead.FindAllString(expr, -1) {
			n++
			name := m
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if base, ok := strings.CutSuffix(m, suffix); ok && declared[base] == "histogram" {
					name = base
				}
			}
			if declared[name] == "" {
				t.Errorf("%s reads %s, which /metrics does not declare", where, m)
			}
		}
	}
	for _, panel := range d.Panels {
		for _, tg := range panel.Targets {
			reads("panel "+strconv.Quote(panel.Title), tg.Expr)
		}
	}
	for _, v := range d.Templating.List {
		reads("variable "+v.Name, v.Query)
	}
	if n == 0 {
		t.Fatal("the dashboard reads no metric")
	}
}
