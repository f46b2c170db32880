package main

import (
	"net/http"
	"time"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
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
