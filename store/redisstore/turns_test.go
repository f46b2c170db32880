package redisstore

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/redisstore/redistest"
)

// TestTurnsPerKey: while one key's turn is held (a hot key, its decision
// in flight), every other key's turn is free: no key waits behind
// another's queue. (With 1024 stripes shared by keys, about ten of these
// 10 000 keys waited for the hot key's stripe.) Once given back, the turns
// hold nothing.
func TestTurnsPerKey(t *testing.T) {
	tu := newTurns()
	hot, err := tu.take(context.Background(), []string{"hot"})
	if err != nil {
		t.Fatal(err)
	}
	var waited int
	for i := range 10_000 {
		// A deadline a free turn never meets: it is taken at once.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		done, err := tu.take(ctx, []string{"k" + strconv.Itoa(i), "j" + strconv.Itoa(i)})
		cancel()
		if err != nil {
			waited++
			continue
		}
		done()
	}
	if waited > 0 {
		t.Fatalf("%d decisions waited for a turn no other decision held", waited)
	}
	hot()
	if n := len(tu.keys); n != 0 {
		t.Fatalf("%d turns kept after every decision gave its back", n)
	}
}

// TestTurnsExclusive: decisions on overlapping keys, in any order, hold
// their turns one at a time and never wait for each other forever; one
// whose deadline passes while waiting gives back what it took.
func TestTurnsExclusive(t *testing.T) {
	tu := newTurns()
	var mu sync.Mutex
	inside := map[string]bool{}
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			keys := []string{"a", "b", "c"}[g%3:]
			if g%2 == 1 {
				keys = []string{"c", "a"}
			}
			for range 200 {
				done, err := tu.take(context.Background(), keys)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, k := range keys {
					if inside[k] {
						t.Errorf("two decisions hold %s's turn", k)
					}
					inside[k] = true
				}
				mu.Unlock()
				mu.Lock()
				for _, k := range keys {
					inside[k] = false
				}
				mu.Unlock()
				done()
			}
		})
	}
	wg.Wait()
	held, err := tu.take(context.Background(), []string{"b"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := tu.take(ctx, []string{"a", "b"}); err == nil {
		t.Fatal("a decision took a turn held by another")
	}
	held()
	if n := len(tu.keys); n != 0 {
		t.Fatalf("%d turns kept after every decision gave its back", n)
	}
}

// TestFixedWindowTakesNoTurn: a decision on a fixed window the script
// judges does not wait for its key's turn (held here as by a decision in
// flight), so a node's decisions on a hot fixed window run side by side; a
// token bucket's, compared as bytes, waits for it and fails at its
// deadline.
func TestFixedWindowTakesNoTurn(t *testing.T) {
	s, err := New(redistest.Client(t), Options{Prefix: redistest.Prefix(t), Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	fw := sluice.Policy{Name: "fw", Algorithm: sluice.FixedWindow, Limit: 5, Window: time.Minute}
	tb := sluice.Policy{Name: "tb", Algorithm: sluice.TokenBucket, Limit: 5, Window: time.Minute}
	for _, p := range []*sluice.Policy{&fw, &tb} {
		k := sluice.Key{Tenant: "acme", Algorithm: p.Algorithm, Policy: p.Name, Value: "hot"}
		held, err := s.turns.take(context.Background(), []string{s.counterKey(&k)})
		if err != nil {
			t.Fatal(err)
		}
		// Ample for a round trip on a loaded machine; the token bucket,
		// which cannot be decided, is given less.
		wait := 10 * time.Second
		if p == &tb {
			wait = 200 * time.Millisecond
		}
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		dst := make([]sluice.Decision, 1)
		err = s.Apply(ctx, time.Now(), []sluice.Op{{Key: k, Policy: p, Hits: 1}}, dst)
		cancel()
		held()
		switch {
		case p == &fw && (err != nil || !dst[0].Allowed):
			t.Fatalf("the fixed window, its turn held: %+v %v, want decided", dst[0], err)
		case p == &tb && err == nil:
			t.Fatal("the token bucket was decided while its turn was held")
		}
	}
}
