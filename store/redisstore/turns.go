package redisstore

import (
	"context"
	"hash/maphash"
	"slices"
)

// A node sends one decision on a key at a time: decisions on a key wait
// their turn in the node, so that the script's comparison, made against
// the node's own last write, holds at the first round trip, and only
// decisions of different nodes race in Redis. Without turns, 64 goroutines
// of one node on one hot key each lose most races and retry, one round
// trip each, until their deadline. Keys map to a fixed set of stripes, each
// a one-slot semaphore; a decision takes its keys' stripes in ascending
// order, so that two decisions cannot wait for each other.

const stripes = 1024

type turns struct {
	seed maphash.Seed
	sem  [stripes]chan struct{}
}

func newTurns() *turns {
	t := &turns{seed: maphash.MakeSeed()}
	for i := range t.sem {
		t.sem[i] = make(chan struct{}, 1)
	}
	return t
}

// take waits for the turns of keys, within ctx, and returns what gives
// them back.
func (t *turns) take(ctx context.Context, keys []string) (func(), error) {
	idx := make([]int, len(keys))
	for i, k := range keys {
		idx[i] = int(maphash.String(t.seed, k) % stripes)
	}
	slices.Sort(idx)
	idx = slices.Compact(idx)
	for n, i := range idx {
		select {
		case t.sem[i] <- struct{}{}:
		case <-ctx.Done():
			for _, j := range idx[:n] {
				<-t.sem[j]
			}
			return nil, ctx.Err()
		}
	}
	return func() {
		for _, i := range idx {
			<-t.sem[i]
		}
	}, nil
}
