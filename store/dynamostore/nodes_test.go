package dynamostore

import (
	"testing"

	"github.com/sluicehq/sluice/store/storetest"
)

// TestHeartbeats: the nodes' runs, as every store keeps them
// (storetest.RunHeartbeats).
func TestHeartbeats(t *testing.T) {
	storetest.RunHeartbeats(t, newStore(t))
}
