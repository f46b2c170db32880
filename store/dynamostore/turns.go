package dynamostore

import (
	"context"
	"slices"
	"sync"

	"github.com/sluicehq/sluice"
)

// keys are this node's counter keys at work, each with its turn: one
// write of the key at a time is at work on this node, so that the node's
// decisions do not race each other through conditional writes (each lost
// race costs a write unit and a round trip); races with other nodes remain,
// and are settled by the conditions. A turn is held across DynamoDB
// requests, so it is a channel of one token, taken in a select with the
// caller's context: a wait for it ends at the deadline.
//
// A key's entry is made by its first user and removed with its last, so
// the map holds only the keys that decisions are at work on or waiting
// for, and a decision waits only on decisions on its own keys, never on
// another key's (as a fixed set of stripes shared by hashing would make
// it).
type keys struct {
	mu sync.Mutex
	m  map[string]*keyTurn
}

// keyTurn is one key at work.
type keyTurn struct {
	turn  chan struct{} // one token: held by the key's write at work
	users int           // under keys.mu: holders, waiters and batches; removed at 0

	mu      sync.Mutex // guards pending
	pending []*call    // single-key decisions waiting to be combined (combine.go)
}

// use returns pk's entry, made if need be, for one user more.
func (ks *keys) use(pk string) *keyTurn {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if ks.m == nil {
		ks.m = map[string]*keyTurn{}
	}
	k := ks.m[pk]
	if k == nil {
		k = &keyTurn{turn: make(chan struct{}, 1)}
		k.turn <- struct{}{}
		ks.m[pk] = k
	}
	k.users++
	return k
}

// done gives up a user of pk's entry, removing it with its last.
func (ks *keys) done(pk string, k *keyTurn) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if k.users--; k.users == 0 && ks.m[pk] == k {
		delete(ks.m, pk)
	}
}

// size returns the number of keys at work, for tests.
func (ks *keys) size() int {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	return len(ks.m)
}

// tryLock takes pk's turn if it is free, without waiting, and returns its
// release.
func (s *Store) tryLock(pk string) (unlock func(), ok bool) {
	k := s.keys.use(pk)
	select {
	case <-k.turn:
		return func() {
			k.turn <- struct{}{}
			s.keys.done(pk, k)
		}, true
	default:
		s.keys.done(pk, k)
		return nil, false
	}
}

// lock takes the turns of keys pks, in order (so that two requests on the
// same keys cannot deadlock), each in a select with ctx: a wait for a
// turn, held by a decision that is itself waiting on DynamoDB, ends with
// the deadline, and the turns already taken are given back. It returns the
// unlock.
func (s *Store) lock(ctx context.Context, pks ...string) (func(), error) {
	pks = slices.Compact(slices.Sorted(slices.Values(pks)))
	held := make([]*keyTurn, 0, len(pks))
	unlock := func() {
		for i, k := range held {
			k.turn <- struct{}{}
			s.keys.done(pks[i], k)
		}
	}
	for _, pk := range pks {
		if err := ctx.Err(); err != nil {
			unlock()
			return nil, &sluice.Error{Op: "dynamostore.lock", Kind: sluice.KindUnavailable, Err: err}
		}
		k := s.keys.use(pk)
		select {
		case <-k.turn:
			held = append(held, k)
		case <-ctx.Done():
			s.keys.done(pk, k)
			unlock()
			s.stats.lockTimeouts.Add(1)
			return nil, &sluice.Error{Op: "dynamostore.lock", Kind: sluice.KindUnavailable, Message: "waiting for this node's other decisions on the key", Err: ctx.Err()}
		}
	}
	return unlock, nil
}
