package dynamostore

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// TestKeysApart: a decision on one key never waits on another key's:
// while one key's turn is held (as by a write stuck on a slow table), the
// node decides on 2,000 other keys, each within a deadline of its own,
// none of them unavailable. (A fixed set of 1,024 stripes shared by
// hashing would make a few of them wait on the held key.)
func TestKeysApart(t *testing.T) {
	s := newStore(t)
	p := sluice.Policy{Name: "fw", Algorithm: sluice.FixedWindow, Limit: 10, Window: 24 * time.Hour}
	held := sluice.Key{Tenant: "acme", Policy: "fw", Value: "held"}
	unlock, err := s.lock(context.Background(), counterPK(&held))
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	now := time.Now()
	keys := make(chan int)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			dst := make([]sluice.Decision, 1)
			for i := range keys {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				ops := []sluice.Op{{Key: sluice.Key{Tenant: "acme", Policy: "fw", Value: fmt.Sprint("k", i)}, Policy: &p, Hits: 1}}
				err := s.Apply(ctx, now, ops, dst)
				cancel()
				if err != nil || !dst[0].Allowed {
					t.Errorf("key %d, beside a key whose turn is held: %+v %v", i, dst[0], err)
				}
			}
		})
	}
	for i := range 2000 {
		keys <- i
	}
	close(keys)
	wg.Wait()
	if n := s.keys.size(); n != 1 {
		t.Fatalf("%d keys at work, want the one held", n)
	}
}
