package fairsim

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them: a
// cluster's store sweeps on a goroutine of its own, which ends when the run
// closes it.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
