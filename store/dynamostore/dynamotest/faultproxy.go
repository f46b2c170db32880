package dynamotest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// FaultProxy is an HTTP proxy between a DynamoDB client and a server (the
// emulator), that does to the traffic what real DynamoDB or a bad network
// does and the emulator does not:
//
//   - drop the Item from the ConditionalCheckFailedException of a failed
//     single-item write (PutItem, UpdateItem, DeleteItem), as some
//     DynamoDB-compatible servers do, ignoring
//     ReturnValuesOnConditionCheckFailure;
//   - answer a fraction of the writes (those and TransactWriteItems), without
//     passing them on, with a TransactionConflictException, a
//     ThrottlingException or a ProvisionedThroughputExceededException (HTTP
//     400, the JSON DynamoDB sends), or for a transaction a
//     TransactionCanceledException whose reasons are TransactionConflict;
//   - add latency to every request.
//
// It counts the requests by operation. The knobs can be turned while it
// runs; it is safe for concurrent use. It is not a mock: every request it
// does not refuse goes to the real server and its answer comes back.
type FaultProxy struct {
	// Endpoint is the proxy's URL, for a client's BaseEndpoint or
	// sluice's --dynamodb-endpoint.
	Endpoint string

	upstream string
	client   *http.Client

	drop     atomic.Bool
	rate     atomic.Uint64 // math.Float64bits of the fault rate
	latency  atomic.Int64
	injected atomic.Int64
	dropped  atomic.Int64

	next     atomic.Int64 // writes still to fail (FailNext)
	nextKind atomic.Value // string: their fault, "" for any

	mu     sync.Mutex
	counts map[string]int64
}

// NewFaultProxy starts a proxy to endpoint (a Server's Endpoint), passing
// everything through unchanged until a knob is turned, and stops it at
// the end of the test.
func NewFaultProxy(t testing.TB, endpoint string) *FaultProxy {
	t.Helper()
	p := &FaultProxy{
		upstream: strings.TrimSuffix(endpoint, "/"),
		client:   &http.Client{Transport: &http.Transport{MaxIdleConns: 512, MaxIdleConnsPerHost: 512}},
		counts:   map[string]int64{},
	}
	srv := httptest.NewServer(p)
	p.Endpoint = srv.URL
	t.Cleanup(func() {
		srv.Close()
		p.client.CloseIdleConnections()
	})
	return p
}

// DropConditionItems turns on or off the dropping of the Item of failed
// single-item writes.
func (p *FaultProxy) DropConditionItems(on bool) { p.drop.Store(on) }

// SetFaultRate sets the fraction, 0 to 1, of write requests answered with
// an injected conflict or throttle instead of being passed on.
func (p *FaultProxy) SetFaultRate(rate float64) {
	p.rate.Store(uint64(rate * (1 << 32)))
}

// FailNext makes the next n write requests fail with the fault kind
// ("ThrottlingException", "ProvisionedThroughputExceededException",
// "TransactionConflictException", or, for a transaction,
// "TransactionCanceledException" with a TransactionConflict reason), or
// any of them if kind is "", whatever the fault rate.
func (p *FaultProxy) FailNext(n int, kind string) {
	p.nextKind.Store(kind)
	p.next.Store(int64(n))
}

// SetLatency sets the delay added to every request before it is passed on.
func (p *FaultProxy) SetLatency(d time.Duration) { p.latency.Store(int64(d)) }

// Requests returns how many requests of an operation ("PutItem") came in,
// injected faults included.
func (p *FaultProxy) Requests(op string) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counts[op]
}

// Writes returns how many write requests came in: PutItem, UpdateItem,
// DeleteItem and TransactWriteItems, injected faults included.
func (p *FaultProxy) Writes() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := int64(0)
	for op := range writeOps {
		n += p.counts[op]
	}
	return n
}

// Total returns how many requests came in, of every operation.
func (p *FaultProxy) Total() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := int64(0)
	for _, c := range p.counts {
		n += c
	}
	return n
}

// Injected returns how many faults the proxy answered itself; Dropped how
// many items it took out of failed conditions.
func (p *FaultProxy) Injected() int64 { return p.injected.Load() }

// Dropped returns how many items the proxy took out of failed conditions.
func (p *FaultProxy) Dropped() int64 { return p.dropped.Load() }

var (
	writeOps  = map[string]bool{"PutItem": true, "UpdateItem": true, "DeleteItem": true, "TransactWriteItems": true}
	singleOps = map[string]bool{"PutItem": true, "UpdateItem": true, "DeleteItem": true}
	faults    = []string{"TransactionConflictException", "ThrottlingException", "ProvisionedThroughputExceededException"}
)

func (p *FaultProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	op := r.Header.Get("X-Amz-Target")
	op = op[strings.LastIndexByte(op, '.')+1:]
	p.mu.Lock()
	p.counts[op]++
	p.mu.Unlock()
	if d := time.Duration(p.latency.Load()); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	if writeOps[op] && p.next.Add(-1) >= 0 {
		kind, _ := p.nextKind.Load().(string)
		p.injected.Add(1)
		p.fault(w, op, body, kind)
		return
	}
	if rate := p.rate.Load(); writeOps[op] && rate > 0 && rand.Uint64N(1<<32) < rate {
		p.injected.Add(1)
		p.fault(w, op, body, "")
		return
	}
	out, err := http.NewRequestWithContext(r.Context(), r.Method, p.upstream+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	out.Header = r.Header.Clone()
	out.Host = r.Host // signed
	resp, err := p.client.Do(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(resp.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	if resp.StatusCode == http.StatusBadRequest && singleOps[op] && p.drop.Load() {
		rb = p.dropItem(rb)
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(rb)))
	if w.Header().Get("X-Amz-Crc32") != "" {
		w.Header().Set("X-Amz-Crc32", strconv.FormatUint(uint64(crc32.ChecksumIEEE(rb)), 10))
	}
	w.WriteHeader(resp.StatusCode)
	w.Write(rb)
}

// dropItem returns a ConditionalCheckFailedException's body without its
// Item, and any other body as it is.
func (p *FaultProxy) dropItem(b []byte) []byte {
	var m map[string]json.RawMessage
	if json.Unmarshal(b, &m) != nil {
		return b
	}
	var typ string
	json.Unmarshal(m["__type"], &typ)
	if !strings.HasSuffix(typ, "ConditionalCheckFailedException") {
		return b
	}
	if _, ok := m["Item"]; !ok {
		return b
	}
	delete(m, "Item")
	out, err := json.Marshal(m)
	if err != nil {
		return b
	}
	p.dropped.Add(1)
	return out
}

// fault answers a write with an injected error, as DynamoDB would.
func (p *FaultProxy) fault(w http.ResponseWriter, op string, req []byte, kind string) {
	body := map[string]any{}
	typ := kind
	if typ == "" {
		typ = faults[rand.IntN(len(faults))]
		if op == "TransactWriteItems" && rand.IntN(2) == 0 {
			typ = "TransactionCanceledException"
		}
	}
	if typ == "TransactionCanceledException" {
		// Cancelled by a conflict on one item, none on the others.
		var in struct{ TransactItems []json.RawMessage }
		json.Unmarshal(req, &in)
		reasons := make([]map[string]string, max(1, len(in.TransactItems)))
		for i := range reasons {
			reasons[i] = map[string]string{"Code": "None"}
		}
		reasons[rand.IntN(len(reasons))] = map[string]string{"Code": "TransactionConflict", "Message": "Transaction is ongoing for the item"}
		body["CancellationReasons"] = reasons
	}
	body["__type"] = "com.amazonaws.dynamodb.v20120810#" + typ
	body["message"] = fmt.Sprintf("injected by dynamotest.FaultProxy: %s", typ)
	b, _ := json.Marshal(body)
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.Header().Set("X-Amzn-Requestid", "faultproxy")
	w.Header().Set("X-Amz-Crc32", strconv.FormatUint(uint64(crc32.ChecksumIEEE(b)), 10))
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusBadRequest)
	w.Write(b)
}
