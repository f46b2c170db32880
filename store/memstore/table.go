package memstore

import (
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
)

// prefix is the part of a key that every key of one scope shares: its
// tenant and epoch, space, algorithm, policy and region. Entries added through a
// Scope point to the scope's prefix, and entries added by Apply share the
// prefix of the last key their shard added when it is the same, so that
// comparing a prefix is usually comparing a pointer, or reading a struct
// that is already in the cache.
type prefix struct {
	tenant, policy, region string
	epoch                  int64
	space                  sluice.Space
	alg                    sluice.Algorithm
}

func newPrefix(k *sluice.Key) *prefix {
	// One allocation for the strings, so that the store does not keep
	// alive a larger buffer the caller's strings may point into.
	a, b := len(k.Tenant), len(k.Tenant)+len(k.Policy)
	all := k.Tenant + k.Policy + k.Region
	return &prefix{tenant: all[:a], policy: all[a:b], region: all[b:], epoch: k.Epoch, space: k.Space, alg: k.Algorithm}
}

func (p *prefix) of(k *sluice.Key) bool {
	return p.tenant == k.Tenant && p.epoch == k.Epoch && p.policy == k.Policy && p.region == k.Region && p.space == k.Space && p.alg == k.Algorithm
}

// inline is how many bytes of a key's value an entry holds in itself; a
// longer value is copied out of line.
const inline = 13

// entry is one key and its state, held inline in its table's slots: 64
// bytes, one cache line, so that a lookup that hits reads one line of the
// table, its tag and, for a Scope, nothing else. The key is its prefix,
// shared, and its value, here if short; the state is packed in the line
// (State.Start, State.Count, and State.Prev or State.TAT), unless it has
// entries or both Prev and TAT, and then it lives in ext with a value too
// long for the line. Keeping each entry to a line keeps the tables small,
// and at many keys the processor's cache and TLB misses, which size drives,
// are most of a decision.
type entry struct {
	prefix *prefix
	ext    *overflow // the value if long, the state if flagExt
	exp    int64     // the state's Expires
	v      [3]int64  // the state's Start, Count, and Prev or TAT (flagTAT)
	alg    sluice.Algorithm
	flags  uint8
	n      uint8        // the value's length, if inline
	short  [inline]byte // the value, if inline
}

// Bits of entry.flags.
const (
	flagTAT     = 1 << iota // v[2] is the TAT, not Prev
	flagExt                 // the state is ext.state
	flagDirty               // changed since the backing's last write (Options.WriteBehind)
	flagDurable             // of a durable counter (Backing.Durable), which the sweep makes the backing forget
)

// overflow is the part of an entry that does not fit its line.
type overflow struct {
	value string // if longer than inline
	state algo.State
}

// is reports whether the entry's key has value v.
func (e *entry) is(v string) bool {
	if len(v) > inline {
		return int(e.n) > inline && e.ext.value == v
	}
	return int(e.n) == len(v) && string(e.short[:len(v)]) == v
}

func (e *entry) setValue(v string) {
	if len(v) > inline {
		e.n = inline + 1
		e.overflow().value = string(append([]byte(nil), v...)) // not the caller's buffer
		return
	}
	e.n = uint8(copy(e.short[:], v))
}

func (e *entry) value() string {
	if int(e.n) > inline {
		return e.ext.value
	}
	return string(e.short[:e.n])
}

func (e *entry) overflow() *overflow {
	if e.ext == nil {
		e.ext = new(overflow)
	}
	return e.ext
}

// state returns the entry's state.
func (e *entry) state() algo.State {
	if e.flags&flagExt != 0 {
		return e.ext.state
	}
	var st algo.State
	e.unpack(&st)
	return st
}

// unpack writes the state packed in the line to *st, which must be zero.
// Field by field: a composite literal would be built in a temporary and
// copied, a copy that stalls on the temporary's narrow stores.
func (e *entry) unpack(st *algo.State) {
	st.Algorithm, st.Expires, st.Start, st.Count = e.alg, e.exp, e.v[0], e.v[1]
	if e.flags&flagTAT != 0 {
		st.TAT = e.v[2]
	} else {
		st.Prev = e.v[2]
	}
}

// setState sets the entry's state to st, packed in its line if it fits. A
// state once out of line stays there, where algo updates it in place.
func (e *entry) setState(st *algo.State) {
	e.alg, e.exp = st.Algorithm, st.Expires
	if e.flags&flagExt != 0 || st.Entries != nil || (st.Prev != 0 && st.TAT != 0) {
		e.overflow().state = *st
		e.flags |= flagExt
		return
	}
	e.v[0], e.v[1], e.v[2] = st.Start, st.Count, st.Prev
	e.flags &^= flagTAT
	if st.TAT != 0 {
		e.v[2] = st.TAT
		e.flags |= flagTAT
	}
}

// update decides op at now on the entry's state into *d, keeping the new
// state if the op is admitted.
func (e *entry) update(op *sluice.Op, now int64, d *sluice.Decision) {
	if e.flags&flagExt != 0 {
		algo.UpdateOp(op, &e.ext.state, now, d)
		e.exp = e.ext.state.Expires
		return
	}
	var st algo.State
	e.unpack(&st)
	algo.UpdateOp(op, &st, now, d)
	e.setState(&st)
}

func (e *entry) key() sluice.Key {
	p := e.prefix
	return sluice.Key{Tenant: p.tenant, Epoch: p.epoch, Space: p.space, Algorithm: p.alg, Policy: p.policy, Region: p.region, Value: e.value()}
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
	slots   []entry  // len is a power of two, or zero
	tags    []uint8  // one per slot: 0 if empty, else tag(hash)
	hashes  []uint64 // one per slot, read only to rebuild
	n       int
	removed int     // by the last sweep
	dropped int     // entries flagDirty among those the last sweep or erase removed
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
	p := prefix{tenant: k.Tenant, policy: k.Policy, region: k.Region, epoch: k.Epoch, space: k.Space, alg: k.Algorithm}
	return t.getScoped(h, &p, k.Value)
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
			if e := &t.slots[i]; e.is(v) && (e.prefix == p || *e.prefix == *p) {
				return e
			}
		}
	}
}

// add inserts key k, with hash h and state st, which must not be held and
// must not be empty, and returns its entry, valid until the next add or
// sweep.
func (t *table) add(h uint64, k *sluice.Key, st algo.State) *entry {
	p := t.last
	if p == nil || !p.of(k) {
		p = newPrefix(k)
		t.last = p
	}
	return t.addScoped(h, p, k.Value, st)
}

// addScoped inserts the key of prefix p and value v, growing the table to
// keep it at most seven eighths full.
func (t *table) addScoped(h uint64, p *prefix, v string, st algo.State) *entry {
	if full(t.n+1, len(t.slots)) {
		t.rebuild(max(minSlots, 2*len(t.slots)), 0)
	}
	e := entry{prefix: p}
	e.setValue(v)
	e.setState(&st)
	t.n++
	return t.put(h, &e)
}

func (t *table) put(h uint64, e *entry) *entry {
	mask := uint64(len(t.slots) - 1)
	i := h & mask
	for t.tags[i] != 0 {
		i = (i + 1) & mask
	}
	t.slots[i], t.tags[i], t.hashes[i] = *e, tag(h), h
	return &t.slots[i]
}

// withHash calls f with each entry whose hash is h: one, unless keys
// collide.
func (t *table) withHash(h uint64, f func(*entry)) {
	if t.n == 0 {
		return
	}
	mask, tg := uint64(len(t.slots)-1), tag(h)
	for i := h & mask; t.tags[i] != 0; i = (i + 1) & mask {
		if t.tags[i] == tg && t.hashes[i] == h {
			f(&t.slots[i])
		}
	}
}

// sweep removes the entries whose state has expired at now, counts them in
// t.removed and, if keys is true, returns the keys of those of durable
// counters (flagDurable).
func (t *table) sweep(now int64, keys bool) []sluice.Key {
	live := 0
	var gone []sluice.Key
	t.dropped = 0
	for i := range t.slots {
		if e := &t.slots[i]; t.tags[i] != 0 {
			if e.exp > now {
				live++
				continue
			}
			if keys && e.flags&flagDurable != 0 {
				gone = append(gone, e.key())
			}
			if e.flags&flagDirty != 0 {
				t.dropped++
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
	old, tags, hashes := t.slots, t.tags, t.hashes
	t.slots, t.tags, t.hashes = make([]entry, size), make([]uint8, size), make([]uint64, size)
	for i := range old {
		if e := &old[i]; tags[i] != 0 && (now == 0 || e.exp > now) {
			t.put(hashes[i], e)
		}
	}
}
