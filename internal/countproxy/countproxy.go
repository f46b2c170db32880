// Package countproxy is a DynamoDB proxy that counts requests: `sluice
// dynamodb count-proxy` sits between sluice nodes and a DynamoDB endpoint
// (an emulator such as dynoxide), forwards every request unchanged, and
// serves how many of each operation went through on GET /metrics, so that
// `sluice bench-ws --store-metrics` can say what each phase of a run asks
// of the store, across all nodes at once.
//
// It keeps no state per request beyond counters, and its operations are a
// fixed set: an operation outside it is counted as "other".
//
// The handler and the reader of its /metrics (Scrape) live together here:
// the format is this package's.
package countproxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
)

// Metric is the name of the counter the proxy serves, one series per
// operation, labelled with its operation and class.
const Metric = "sluice_proxy_dynamodb_requests_total"

// The classes of operations.
const (
	Read  = "read"
	Write = "write"
	Other = "other" // the table's management, PartiQL, and operations not known here
)

// operations are the operations counted by name, with their class; any
// other is counted as Other.
var operations = []struct{ name, class string }{
	{"GetItem", Read}, {"Query", Read}, {"BatchGetItem", Read}, {"Scan", Read}, {"TransactGetItems", Read},
	{"PutItem", Write}, {"UpdateItem", Write}, {"DeleteItem", Write}, {"BatchWriteItem", Write}, {"TransactWriteItems", Write},
	{"CreateTable", Other}, {"DescribeTable", Other}, {"UpdateTable", Other}, {"DeleteTable", Other}, {"ListTables", Other},
	{"UpdateTimeToLive", Other}, {"DescribeTimeToLive", Other}, {"DescribeEndpoints", Other},
	{"ExecuteStatement", Other}, {"BatchExecuteStatement", Other}, {"ExecuteTransaction", Other},
	{Other, Other},
}

// index maps an operation's name to its place in operations.
var index = func() map[string]int {
	m := make(map[string]int, len(operations))
	for i, op := range operations {
		m[op.name] = i
	}
	return m
}()

// Operation returns the operation of a request's X-Amz-Target header
// ("DynamoDB_20120810.PutItem" is "PutItem"), or Other if it is none of
// the operations counted by name.
func Operation(target string) string {
	op := target[strings.LastIndexByte(target, '.')+1:]
	if _, ok := index[op]; ok {
		return op
	}
	return Other
}

// Class returns the class of an operation: Read, Write or Other.
func Class(op string) string {
	if i, ok := index[op]; ok {
		return operations[i].class
	}
	return Other
}

// Proxy forwards requests to a DynamoDB endpoint and counts them by
// operation; GET /metrics answers the counts itself (DynamoDB's requests
// are all POST /). Forwarding keeps the request's Host header, which the
// client signed: an emulator does not check the signature, real DynamoDB
// would refuse it, so the proxy is for emulators. Safe for concurrent use.
type Proxy struct {
	rp        *httputil.ReverseProxy
	transport *http.Transport
	counts    []atomic.Int64 // by place in operations
	failed    atomic.Int64   // requests the endpoint did not answer
}

// New returns a proxy to endpoint, an http or https URL.
func New(endpoint string) (*Proxy, error) {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("countproxy: endpoint %q is not an http(s) URL", endpoint)
	}
	p := &Proxy{
		// As many idle connections as a node keeps to DynamoDB: no
		// connection made per request under load.
		transport: &http.Transport{MaxIdleConns: 512, MaxIdleConnsPerHost: 512},
		counts:    make([]atomic.Int64, len(operations)),
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(u)
			r.Out.Host = r.In.Host // signed by the client
		},
		Transport: p.transport,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			p.failed.Add(1)
			http.Error(w, "countproxy: "+err.Error(), http.StatusBadGateway)
		},
	}
	return p, nil
}

// ServeHTTP counts and forwards r, or answers GET /metrics.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && r.URL.Path == "/metrics" {
		p.serveMetrics(w)
		return
	}
	p.counts[index[Operation(r.Header.Get("X-Amz-Target"))]].Add(1)
	p.rp.ServeHTTP(w, r)
}

// Counts returns the requests counted so far, by operation.
func (p *Proxy) Counts() Counts {
	c := make(Counts, len(operations))
	for i, op := range operations {
		c[op.name] = p.counts[i].Load()
	}
	return c
}

// Close closes the idle connections to the endpoint.
func (p *Proxy) Close() { p.transport.CloseIdleConnections() }

// serveMetrics writes the counts in Prometheus's text format.
func (p *Proxy) serveMetrics(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "# HELP %s Requests forwarded to DynamoDB, by operation (\"other\": any operation not known to the proxy) and class (read, write, other).\n# TYPE %[1]s counter\n", Metric)
	for i, op := range operations {
		fmt.Fprintf(bw, "%s{class=%q,operation=%q} %d\n", Metric, op.class, op.name, p.counts[i].Load())
	}
	const failed = "sluice_proxy_dynamodb_failed_total"
	fmt.Fprintf(bw, "# HELP %s Requests the endpoint did not answer (502 to the client), counted in %[2]s too.\n# TYPE %[1]s counter\n%[1]s %[3]d\n", failed, Metric, p.failed.Load())
	bw.Flush()
}

// Counts are requests by operation.
type Counts map[string]int64

// Total returns the requests of every operation.
func (c Counts) Total() int64 {
	n := int64(0)
	for _, v := range c {
		n += v
	}
	return n
}

// Class returns the requests of the operations of a class.
func (c Counts) Class(class string) int64 {
	n := int64(0)
	for op, v := range c {
		if Class(op) == class {
			n += v
		}
	}
	return n
}

// Sub returns the requests of c not in before: what came between two
// scrapes.
func (c Counts) Sub(before Counts) Counts {
	d := make(Counts, len(c))
	for op, v := range c {
		d[op] = v - before[op]
	}
	return d
}

// String lists the operations with requests, most first: "PutItem 12,
// GetItem 3"; "none" if there are none.
func (c Counts) String() string {
	ops := slices.DeleteFunc(slices.Collect(maps.Keys(c)), func(op string) bool { return c[op] == 0 })
	slices.SortFunc(ops, func(a, b string) int {
		if c[a] != c[b] {
			return int(min(max(c[b]-c[a], -1), 1))
		}
		return strings.Compare(a, b)
	})
	if len(ops) == 0 {
		return "none"
	}
	parts := make([]string, len(ops))
	for i, op := range ops {
		parts[i] = op + " " + strconv.FormatInt(c[op], 10)
	}
	return strings.Join(parts, ", ")
}

// Scrape reads a proxy's counts from its /metrics URL.
func Scrape(ctx context.Context, hc *http.Client, metricsURL string) (Counts, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, metricsURL, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("countproxy: GET %s: %s", metricsURL, resp.Status)
	}
	return Parse(io.LimitReader(resp.Body, 1<<20))
}

// Parse reads the counts from a proxy's /metrics, ignoring the lines of
// other metrics; it is an error if there are none.
func Parse(r io.Reader) (Counts, error) {
	c := Counts{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), Metric+"{")
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			return nil, fmt.Errorf("countproxy: bad line %q", sc.Text())
		}
		op := ""
		for l := range strings.SplitSeq(labels, ",") {
			if v, ok := strings.CutPrefix(l, `operation="`); ok {
				op = strings.TrimSuffix(v, `"`)
			}
		}
		n, err := strconv.ParseInt(strings.TrimSpace(value), 10, 64)
		if op == "" || err != nil {
			return nil, fmt.Errorf("countproxy: bad line %q", sc.Text())
		}
		c[op] += n
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(c) == 0 {
		return nil, errors.New("countproxy: no " + Metric + " in the metrics")
	}
	return c, nil
}
