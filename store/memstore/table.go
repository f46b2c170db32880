package memstore

import (
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
)

// entry is one key's state.
type entry struct {
	hash  uint64
	key   sluice.Key
	state algo.State
}

// table is an open-addressing hash table of entries with linear probing,
// keyed by the store's 64-bit hash of the key, which it uses as it is: a
// lookup is an index, a hash compare and a key compare, without the
// rehashing and group matching of a map. Entries leave only by a sweep,
// which rebuilds the table, so there are no tombstones, and the table shrinks
// after a burst of keys, which a Go map never does. Not safe for concurrent
// use: the shard's mutex guards it.
type table struct {
	slots []slot // len is a power of two, or zero
	n     int
}

// slot holds an entry and its hash, so that probing compares hashes without
// touching the entries.
type slot struct {
	hash uint64
	e    *entry
}

// minSlots is the size of a table's first allocation.
const minSlots = 8

// get returns the entry of k, whose hash is h, or nil.
func (t *table) get(h uint64, k *sluice.Key) *entry {
	if t.n == 0 {
		return nil
	}
	mask := uint64(len(t.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		sl := &t.slots[i]
		if sl.e == nil {
			return nil
		}
		if sl.hash == h && sl.e.key == *k {
			return sl.e
		}
	}
}

// add inserts e, whose key must not be held, growing the table to keep it at
// most three quarters full.
func (t *table) add(e *entry) {
	if (t.n+1)*4 > len(t.slots)*3 {
		t.rebuild(max(minSlots, 2*len(t.slots)), func(*entry) bool { return true })
	}
	t.put(e)
	t.n++
}

func (t *table) put(e *entry) {
	mask := uint64(len(t.slots) - 1)
	i := e.hash & mask
	for t.slots[i].e != nil {
		i = (i + 1) & mask
	}
	t.slots[i] = slot{hash: e.hash, e: e}
}

// sweep removes the entries whose state has expired at now, and returns how
// many it removed.
func (t *table) sweep(now int64) int {
	live := 0
	for _, sl := range t.slots {
		if sl.e != nil && sl.e.state.Expires > now {
			live++
		}
	}
	removed := t.n - live
	if removed == 0 {
		return 0
	}
	size := minSlots
	for live*4 > size*3 {
		size *= 2
	}
	if live == 0 {
		size = 0
	}
	t.rebuild(size, func(e *entry) bool { return e.state.Expires > now })
	t.n = live
	return removed
}

// rebuild moves the entries that keep reports true for into a new slot
// array of the given size.
func (t *table) rebuild(size int, keep func(*entry) bool) {
	old := t.slots
	t.slots = make([]slot, size)
	for _, sl := range old {
		if sl.e != nil && keep(sl.e) {
			t.put(sl.e)
		}
	}
}
