package redisstore

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"
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
