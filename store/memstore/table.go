package memstore

import (
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
)

// prefix is the part of a key that every key of one scope shares: its
// tenant, space, algorithm, policy and region. Entries added through a
// Scope point to the scope's prefix, and entries added by Apply share the
// prefix of the last key their shard added when it is the same, so that
// comparing a prefix is usually comparing a pointer, or reading a struct
// that is already in the cache.
type prefix struct {
	tenant, policy, region string
	space                  sluice.Space
	alg                    sluice.Algorithm
}

func newPrefix(k *sluice.Key) *prefix {
	// One allocation for the strings, so that the store does not keep
	// alive a larger buffer the caller's strings may point into.
	a, b := len(k.Tenant), len(k.Tenant)+len(k.Policy)
	all := k.Tenant + k.Policy + k.Region
	return &prefix{tenant: all[:a], policy: all[a:b], region: all[b:], space: k.Space, alg: k.Algorithm}
}

func (p *prefix) of(k *sluice.Key) bool {
	return p.tenant == k.Tenant && p.policy == k.Policy && p.region == k.Region && p.space == k.Space && p.alg == k.Algorithm
}

// inline is how many bytes of a key's value an entry holds in itself; a
// longer value is copied out of line.
const inline = 23

// entry is one key's state, held inline in its table's slots: 128 bytes,
// two cache lines that the CPU fetches as a pair, holding the hash, the
// key (its value too, if short) and the state, so that a lookup that hits
// touches its slot and nothing else but the shared prefix and the table's
// tags.
type entry struct {
	hash   uint64
	prefix *prefix
	long   string       // the value, if longer than inline
	n      uint8        // the value's length, if inline
	short  [inline]byte // the value, if inline
	state  algo.State
}

// is reports whether the entry's key has value v.
func (e *entry) is(v string) bool {
	if len(v) > inline {
		return e.long == v
	}
	return e.long == "" && int(e.n) == len(v) && string(e.short[:len(v)]) == v
}

func (e *entry) setValue(v string) {
	if len(v) > inline {
		e.long = string(append([]byte(nil), v...)) // not the caller's buffer
		return
	}
	e.n = uint8(copy(e.short[:], v))
}

func (e *entry) value() string {
	if e.long != "" {
		return e.long
	}
	return string(e.short[:e.n])
}

func (e *entry) key() sluice.Key {
	p := e.prefix
	return sluice.Key{Tenant: p.tenant, Space: p.space, Algorithm: p.alg, Policy: p.policy, Region: p.region, Value: e.value()}
}

// table is an open-addressing hash table with linear probing, keyed by the
// store's 64-bit hash of the key, which it uses as it is, and holding its
// entries inline. A byte per slot, its tag, says whether the slot is empty
// and holds seven more bits of its hash, so that a probe reads the small
// array of tags, which stays in the cache, and reads only the entry whose
// tag matches: a lookup that hits reads one entry, even with the table
// seven eighths full, which keeps the tables' memory, and so the misses of
// the processor's caches and TLB at many keys, small.
// Entries leave only by a sweep, which rebuilds the table, so there are no
// tombstones, and the table shrinks after a burst of keys, which a Go map
// never does. Not safe for concurrent use: the shard's mutex guards it.
type table struct {
	slots   []entry // len is a power of two, or zero
	tags    []uint8 // one per slot: 0 if empty, else tag(hash)
	n       int
	removed int     // by the last sweep
	last    *prefix // of the last key added, shared by the next if equal
}

// minSlots is the size of a table's first allocation.
const minSlots = 8

// full reports whether a table of the given size holding n entries is as
// full as it may be: seven eighths, as Go's maps.
func full(n, size int) bool { return n*8 > size*7 }

// tag is a slot's tag for hash h: its high bit set, and seven bits of the
// hash that neither the shard (the top bits) nor the slot (the bottom ones)
// uses.
func tag(h uint64) uint8 { return uint8(h>>40) | 0x80 }

// get returns the entry of k, whose hash is h, or nil. The pointer is valid
// until the next add or sweep.
func (t *table) get(h uint64, k *sluice.Key) *entry {
	if t.n == 0 {
		return nil
	}
	mask, tg := uint64(len(t.slots)-1), tag(h)
	for i := h & mask; ; i = (i + 1) & mask {
		switch t.tags[i] {
		case 0:
			return nil
		case tg:
			if e := &t.slots[i]; e.hash == h && e.is(k.Value) && e.prefix.of(k) {
				return e
			}
		}
	}
}

// getScoped is get for a key of prefix p and value v.
func (t *table) getScoped(h uint64, p *prefix, v string) *entry {
	if t.n == 0 {
		return nil
	}
	mask, tg := uint64(len(t.slots)-1), tag(h)
	for i := h & mask; ; i = (i + 1) & mask {
		switch t.tags[i] {
		case 0:
			return nil
		case tg:
			if e := &t.slots[i]; e.hash == h && e.is(v) && (e.prefix == p || *e.prefix == *p) {
				return e
			}
		}
	}
}

// add inserts key k, with hash h and state st, which must not be held and
// must not be empty.
func (t *table) add(h uint64, k *sluice.Key, st algo.State) {
	p := t.last
	if p == nil || !p.of(k) {
		p = newPrefix(k)
		t.last = p
	}
	t.addScoped(h, p, k.Value, st)
}

// addScoped inserts the key of prefix p and value v, growing the table to
// keep it at most seven eighths full.
func (t *table) addScoped(h uint64, p *prefix, v string, st algo.State) {
	if full(t.n+1, len(t.slots)) {
		t.rebuild(max(minSlots, 2*len(t.slots)), 0)
	}
	e := entry{hash: h, prefix: p, state: st}
	e.setValue(v)
	t.put(&e)
	t.n++
}

func (t *table) put(e *entry) {
	mask := uint64(len(t.slots) - 1)
	i := e.hash & mask
	for t.tags[i] != 0 {
		i = (i + 1) & mask
	}
	t.slots[i], t.tags[i] = *e, tag(e.hash)
}

// sweep removes the entries whose state has expired at now, counts them in
// t.removed and, if keys is true, returns their keys.
func (t *table) sweep(now int64, keys bool) []sluice.Key {
	live := 0
	var gone []sluice.Key
	for i := range t.slots {
		if e := &t.slots[i]; t.tags[i] != 0 {
			if e.state.Expires > now {
				live++
			} else if keys {
				gone = append(gone, e.key())
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
		for full(live, size) {
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
	old, tags := t.slots, t.tags
	t.slots, t.tags = make([]entry, size), make([]uint8, size)
	for i := range old {
		if e := &old[i]; tags[i] != 0 && (now == 0 || e.state.Expires > now) {
			t.put(e)
		}
	}
}
