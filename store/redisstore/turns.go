package redisstore

import (
	"context"
	"slices"
	"sync"
)

// A node sends one decision on a key at a time: decisions on a key wait
// their turn in the node, so that the script's comparison, made against
// the node's own last write, holds at the first round trip, and only
// decisions of different nodes race in Redis. Without turns, 64 goroutines
// of one node on one hot key each lose most races and retry, one round
// trip each, until their deadline. Each key in use has a one-slot
// semaphore of its own, so that a hot key, one tenant's, delays no other
// key's decisions (with a fixed set of stripes shared by keys, every key
// of the hot key's stripe waited behind its queue); an entry lives while a
// decision holds or waits for it, so the map holds at most the decisions in
// flight. A decision takes its keys in ascending order, so that two
// decisions cannot wait for each other.
type turns struct {
	mu   sync.Mutex
	keys map[string]*turn
}

// turn is one key's semaphore and the decisions holding or waiting for it.
type turn struct {
	sem  chan struct{}
	refs int
}

func newTurns() *turns { return &turns{keys: make(map[string]*turn)} }

// ref returns key's turn, counting the caller among its users.
func (t *turns) ref(key string) *turn {
	t.mu.Lock()
	defer t.mu.Unlock()
	tu := t.keys[key]
	if tu == nil {
		tu = &turn{sem: make(chan struct{}, 1)}
		t.keys[key] = tu
	}
	tu.refs++
	return tu
}

// unref drops the caller from key's users, and the turn with the last.
func (t *turns) unref(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if tu := t.keys[key]; tu != nil {
		if tu.refs--; tu.refs == 0 {
			delete(t.keys, key)
		}
	}
}

// take waits for the turns of keys, within ctx, and returns what gives
// them back.
func (t *turns) take(ctx context.Context, keys []string) (func(), error) {
	sorted := slices.Compact(slices.Sorted(slices.Values(keys)))
	held := make([]*turn, 0, len(sorted))
	release := func() {
		for i, tu := range held {
			<-tu.sem
			t.unref(sorted[i])
		}
	}
	for _, k := range sorted {
		tu := t.ref(k)
		select {
		case tu.sem <- struct{}{}:
			held = append(held, tu)
		case <-ctx.Done():
			t.unref(k)
			release()
			return nil, ctx.Err()
		}
	}
	return release, nil
}
