package memstore

import (
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
)

// entry is one key's state, held inline in its table's slots. A slot is
// empty when its state's Algorithm is zero: every state a store holds was
// written by an algorithm, which sets it.
type entry struct {
	hash  uint64
	key   sluice.Key
	state algo.State
}

func (e *entry) empty() bool { return e.state.Algorithm == 0 }

// table is an open-addressing hash table with linear probing, keyed by the
// store's 64-bit hash of the key, which it uses as it is, and holding its
// entries inline: a lookup is an index, a hash compare and a key compare,
// touching the slot and the key's bytes and nothing else. Entries leave
// only by a sweep, which rebuilds the table, so there are no tombstones, and
// the table shrinks after a burst of keys, which a Go map never does. Not
// safe for concurrent use: the shard's mutex guards it.
type table struct {
	slots   []entry // len is a power of two, or zero
	n       int
	removed int // by the last sweep
}

// minSlots is the size of a table's first allocation.
const minSlots = 8

// get returns the entry of k, whose hash is h, or nil. The pointer is valid
// until the next add or sweep.
func (t *table) get(h uint64, k *sluice.Key) *entry {
	if t.n == 0 {
		return nil
	}
	mask := uint64(len(t.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		e := &t.slots[i]
		if e.empty() {
			return nil
		}
		if e.hash == h && e.key == *k {
			return e
		}
	}
}

// add inserts key k, with hash h and state st, which must not be held and
// must not be empty, growing the table to keep it at most three quarters
// full.
func (t *table) add(h uint64, k sluice.Key, st algo.State) {
	if (t.n+1)*4 > len(t.slots)*3 {
		t.rebuild(max(minSlots, 2*len(t.slots)), 0)
	}
	t.put(entry{hash: h, key: k, state: st})
	t.n++
}

func (t *table) put(e entry) {
	mask := uint64(len(t.slots) - 1)
	i := e.hash & mask
	for !t.slots[i].empty() {
		i = (i + 1) & mask
	}
	t.slots[i] = e
}

// sweep removes the entries whose state has expired at now, counts them in
// t.removed and, if keys is true, returns their keys.
func (t *table) sweep(now int64, keys bool) []sluice.Key {
	live := 0
	var gone []sluice.Key
	for i := range t.slots {
		if e := &t.slots[i]; !e.empty() {
			if e.state.Expires > now {
				live++
			} else if keys {
				gone = append(gone, e.key)
			}
		}
	}
	t.removed = t.n - live
	if t.removed == 0 {
		return nil
	}
	size := 0
	if live > 0 {
		size = minSlots
		for live*4 > size*3 {
			size *= 2
		}
	}
	t.rebuild(size, now)
	t.n = live
	return gone
}

// rebuild moves the entries that have not expired at now (all of them if
// now is zero) into a new slot array of the given size.
func (t *table) rebuild(size int, now int64) {
	old := t.slots
	t.slots = make([]entry, size)
	for i := range old {
		if e := &old[i]; !e.empty() && (now == 0 || e.state.Expires > now) {
			t.put(*e)
		}
	}
}
