package memstore

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them: a
// store's sweep is owned by the store and ends at Close.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
