package peer

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them: a
// gather waits for every node it asks, Announce ends with its context,
// and every test's servers, gateways and clients are closed.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
