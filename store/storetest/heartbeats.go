package storetest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// HeartbeatStore is a store of the nodes' runs, as peer.Cluster uses one.
type HeartbeatStore interface {
	Announce(ctx context.Context, h sluice.Heartbeat) error
	Heartbeats(ctx context.Context) ([]sluice.Heartbeat, error)
}

// RunHeartbeats checks s, empty: each run of a node is its own heartbeat,
// by node and tag; announcing again moves its until; a run restarted under
// a new tag leaves the earlier run's heartbeat as it was, for the other
// nodes to know it dead. It returns the time the untils were set from, for
// a store's own cases after these.
func RunHeartbeats(t *testing.T, s HeartbeatStore) time.Time {
	t.Helper()
	ctx := context.Background()
	now := time.Now().Truncate(time.Millisecond)
	for _, h := range []sluice.Heartbeat{
		{Node: "http://a:1", Tag: 7, Until: now.Add(time.Minute)},
		{Node: "http://b:1", Tag: 9, Until: now.Add(-time.Second)},
		{Node: "http://b:1", Tag: 9, Until: now.Add(time.Second)}, // renewed
		{Node: "http://a:1", Tag: 8, Until: now.Add(2 * time.Minute)},
	} {
		if err := s.Announce(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
	CheckHeartbeats(t, s, now, "http://a:1 7 1m0s", "http://a:1 8 2m0s", "http://b:1 9 1s")
	return now
}

// CheckHeartbeats checks that s holds exactly the runs want, each written
// "node tag until-from-now".
func CheckHeartbeats(t *testing.T, s HeartbeatStore, now time.Time, want ...string) {
	t.Helper()
	got, err := s.Heartbeats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, h := range got {
		lines = append(lines, fmt.Sprintf("%s %d %v", h.Node, h.Tag, h.Until.Sub(now)))
	}
	slices.Sort(lines)
	if !slices.Equal(lines, want) {
		t.Fatalf("heartbeats %q, want %q", lines, want)
	}
}
