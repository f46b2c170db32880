package tenancy

import (
	"os"
	"testing"

	"github.com/sluicehq/sluice/store/dynamostore/dynamotest"
)

// TestMain runs the DynamoDB emulator for the tests over a real
// DynamoDB store (dynamotest.Get skips them without it, unless CI=true).
func TestMain(m *testing.M) { os.Exit(dynamotest.Main(m)) }
