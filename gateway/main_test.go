package gateway

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them: every
// goroutine the gateway starts has an owner and a stop signal.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
