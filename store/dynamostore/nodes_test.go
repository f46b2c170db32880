package dynamostore

import (
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/store/dynamostore/dynamotest"
)

// TestNodes: a node counts as live until the time it announced, and
// announcing again moves that time.
func TestNodes(t *testing.T) {
	s := newStore(t)
	ctx := dynamotest.Context(t)
	now := time.Now()
	for node, until := range map[string]time.Time{"http://a:1": now.Add(time.Minute), "http://b:1": now.Add(-time.Second)} {
		if err := s.Announce(ctx, node, until); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := s.Nodes(ctx, now); err != nil || !slices.Equal(got, []string{"http://a:1"}) {
		t.Fatalf("Nodes = %v, %v; want a only", got, err)
	}
	if err := s.Announce(ctx, "http://b:1", now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Nodes(ctx, now); !slices.Equal(got, []string{"http://a:1", "http://b:1"}) {
		t.Fatalf("Nodes = %v; want a and b", got)
	}
}
