package memstore

import (
	"context"

	"github.com/sluicehq/sluice"
)

var _ sluice.KeyEraser = (*Store)(nil)

// EraseKey implements sluice.KeyEraser: it deletes every state of
// tenant's held whose value is value, one shard at a time, known or not,
// and, with a Backing, those the backing holds (ErasingBacking) and has
// not loaded. The backing's deletes are made under the shard's lock, as
// the sweep's are, so that no decision saves a state between the two.
func (s *Store) EraseKey(ctx context.Context, tenant, value string, known []sluice.Key) (int, error) {
	if s.closed.Load() {
		return 0, sluice.ErrStoreClosed
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if s.behind != nil {
		// No write behind runs meanwhile: a state it read before the
		// erase would be written after it.
		s.behind.mu.Lock()
		defer s.behind.mu.Unlock()
	}
	// The backing's keys, by shard.
	saved := map[int][]sluice.Key{}
	var found []sluice.Key
	eb, _ := s.backing.(ErasingBacking)
	if eb != nil {
		var err error
		if found, err = eb.Find(tenant, value); err != nil {
			return 0, err
		}
		for _, k := range append(found, known...) {
			i := int(s.hash(&k) >> s.shift)
			saved[i] = append(saved[i], k)
		}
	}
	erased := map[sluice.Key]struct{}{}
	var waits []func() error
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		gone := sh.t.erase(tenant, value)
		if s.behind != nil {
			s.behind.pending.Add(-int64(sh.t.dropped))
		}
		for _, k := range gone {
			erased[k] = struct{}{}
		}
		if eb != nil && len(gone)+len(saved[i]) > 0 {
			wait, err := eb.Erase(append(gone, saved[i]...))
			if err != nil {
				sh.mu.Unlock()
				return len(erased), err
			}
			waits = append(waits, wait)
		}
		sh.mu.Unlock()
	}
	for _, w := range waits {
		if err := w(); err != nil {
			return len(erased), err
		}
	}
	// The backing's states not held in memory count too: Find's; known
	// keys it does not hold are no states.
	if eb != nil {
		for _, k := range found {
			erased[k] = struct{}{}
		}
	}
	return len(erased), nil
}

// ErasingBacking is a Backing that erases keys for EraseKey.
type ErasingBacking interface {
	Backing
	// Find returns the keys of the states it holds of tenant whose value
	// is value (sluice.KeyEraser's).
	Find(tenant, value string) ([]sluice.Key, error)
	// Erase deletes keys' states, those it holds, as Save writes: it
	// returns a wait for their sync.
	Erase(keys []sluice.Key) (wait func() error, err error)
}

// erase removes the entries of tenant whose value is v, in a space that
// may be erased, and returns their keys.
func (t *table) erase(tenant, v string) []sluice.Key {
	var gone []sluice.Key
	t.dropped = 0
	for i := range t.slots {
		if e := &t.slots[i]; t.tags[i] != 0 && e.prefix.tenant == tenant && e.prefix.space.Erasable() && e.is(v) {
			gone = append(gone, e.key())
			if e.flags&flagDirty != 0 {
				t.dropped++
			}
			t.tags[i] = 0 // dropped by the rebuild below
		}
	}
	if len(gone) > 0 {
		t.n -= len(gone)
		t.rebuild(len(t.slots), 0)
	}
	return gone
}
