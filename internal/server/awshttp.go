package server

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// DynamoConfig reaches a DynamoDB table.
type DynamoConfig struct {
	Table    string // --dynamodb-table
	Region   string // --dynamodb-region; default $AWS_REGION, then us-east-1
	Endpoint string // --dynamodb-endpoint; default AWS's
}

// Client returns a DynamoDB client from the usual AWS environment and
// credential chain, with c's region and endpoint.
func (c DynamoConfig) Client(ctx context.Context) (*dynamodb.Client, error) {
	return c.clientVia(ctx, nil)
}

// clientVia is Client, sending its requests through counter if not nil.
func (c DynamoConfig) clientVia(ctx context.Context, counter *countingClient) (*dynamodb.Client, error) {
	var opts []func(*awsconfig.LoadOptions) error
	region := c.Region
	if region == "" && os.Getenv("AWS_REGION") == "" && os.Getenv("AWS_DEFAULT_REGION") == "" {
		region = "us-east-1"
	}
	if region != "" {
		opts = append(opts, awsconfig.WithRegion(region))
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("dynamodb: AWS configuration: %w", err)
	}
	return dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
		if c.Endpoint != "" {
			o.BaseEndpoint = aws.String(c.Endpoint)
		}
		// Enough idle connections for a busy node.
		o.HTTPClient = awsHTTPClient()
		if counter != nil {
			counter.next = o.HTTPClient
			o.HTTPClient = counter
		}
	}), nil
}

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
