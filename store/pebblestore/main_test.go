package pebblestore

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them: the
// sweep and Pebble's own goroutines (flushes, compactions) end at Close.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
