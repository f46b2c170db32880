package main

import (
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// awsHTTPClient is the SDK's HTTP client with room for many concurrent
// decisions: the default keeps few idle connections per host.
func awsHTTPClient() *awshttp.BuildableClient {
	return awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) {
		t.MaxIdleConns = 512
		t.MaxIdleConnsPerHost = 512
		t.IdleConnTimeout = 90 * time.Second
	})
}

// countingClient counts the requests an SDK client sends, every try
// included, by operation (the X-Amz-Target header's, DynamoDB_20120810.
// dropped): what the store costs the node, whichever part of it asked.
// The operations are the SDK's own few, never a caller's input.
type countingClient struct {
	next dynamodb.HTTPClient
	mu   sync.Mutex
	ops  map[string]*atomic.Int64
}

func newCountingClient(next dynamodb.HTTPClient) *countingClient {
	return &countingClient{next: next, ops: map[string]*atomic.Int64{}}
}

// Do counts the request and sends it.
func (c *countingClient) Do(req *http.Request) (*http.Response, error) {
	op := req.Header.Get("X-Amz-Target")
	if _, after, ok := strings.Cut(op, "."); ok {
		op = after
	}
	c.mu.Lock()
	n := c.ops[op]
	if n == nil {
		n = new(atomic.Int64)
		c.ops[op] = n
	}
	c.mu.Unlock()
	n.Add(1)
	return c.next.Do(req)
}

// counts returns the requests sent so far, by operation.
func (c *countingClient) counts() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int64, len(c.ops))
	for op, n := range c.ops {
		out[op] = n.Load()
	}
	return out
}
