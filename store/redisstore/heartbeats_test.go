package redisstore_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/redisstore"
)

// TestHeartbeats: each run of a node is its own heartbeat, by node and
// tag; announcing again moves its until; a run restarted under a new tag
// leaves the earlier run's heartbeat as it was; a run past NodesKept is
// dropped.
func TestHeartbeats(t *testing.T) {
	s := newStore(t, redisstore.Options{})
	ctx := context.Background()
	now := time.Now().Truncate(time.Millisecond)
	for _, h := range []sluice.Heartbeat{
		{Node: "http://a:1", Tag: 7, Until: now.Add(time.Minute)},
		{Node: "http://b:1", Tag: 9, Until: now.Add(-time.Second)},
		{Node: "http://b:1", Tag: 9, Until: now.Add(time.Second)}, // renewed
		{Node: "http://a:1", Tag: 8, Until: now.Add(2 * time.Minute)},
		{Node: "http://c:1", Tag: 1, Until: now.Add(-redisstore.NodesKept - time.Hour)},
	} {
		if err := s.Announce(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		got, err := s.Heartbeats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var lines []string
		for _, h := range got {
			lines = append(lines, fmt.Sprintf("%s %d %v", h.Node, h.Tag, h.Until.Sub(now)))
		}
		slices.Sort(lines)
		if want := []string{"http://a:1 7 1m0s", "http://a:1 8 2m0s", "http://b:1 9 1s"}; !slices.Equal(lines, want) {
			t.Fatalf("heartbeats %q, want %q", lines, want)
		}
	}
}
