package queue

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them: a
// queue's workers stop on Close.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
