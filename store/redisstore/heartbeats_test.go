package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/redisstore"
	"github.com/sluicehq/sluice/store/storetest"
)

// TestHeartbeats: the nodes' runs, as every store keeps them
// (storetest.RunHeartbeats); and a run past NodesKept is dropped, read
// after read.
func TestHeartbeats(t *testing.T) {
	s := newStore(t, redisstore.Options{})
	now := storetest.RunHeartbeats(t, s)
	old := sluice.Heartbeat{Node: "http://c:1", Tag: 1, Until: now.Add(-redisstore.NodesKept - time.Hour)}
	if err := s.Announce(context.Background(), old); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		storetest.CheckHeartbeats(t, s, now, "http://a:1 7 1m0s", "http://a:1 8 2m0s", "http://b:1 9 1s")
	}
}
