package insighthttp

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them: the
// streams' poller ends with the last stream or at CloseStreams, and every
// test server and client is closed.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
