// Package insight keeps what an operator's dashboard shows, in bounded
// memory: the heavy hitters among a policy's keys (TopK, the Space-Saving
// sketch) and per-second counts of decisions over the last hour (Series).
package insight

import (
	"cmp"
	"slices"
)

// TopK finds the heaviest keys of a stream in memory for k of them: the
// Space-Saving algorithm (Metwally, Agrawal and El Abbadi, 2005). Every
// key whose weight is over N/k, N the stream's total weight, is among the
// k kept, and each kept key's count overestimates its weight by at most
// its Err, itself at most N/k. It is not safe for concurrent use.
type TopK struct {
	k     int
	total int64
	floor int64 // the greatest count dropped (evicted or removed): what a newcomer may have had
	idx   map[string]*entry
	h     entries // a min-heap by count: the first is the one evicted
}

type entry struct {
	key   string
	count int64
	err   int64
	since int64 // when the key came in, as the caller counts time
	pos   int
}

// entries is a min-heap by count, ties broken by the greater key first,
// typed rather than through container/heap's interface: a sketch's Add is
// on every decision's path. Its moves are container/heap's, so a sketch
// holds what it held through it.
type entries []*entry

func (h entries) less(i, j int) bool {
	return h[i].count < h[j].count || h[i].count == h[j].count && h[i].key > h[j].key
}

func (h entries) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].pos, h[j].pos = i, j
}

// push adds e, as heap.Push.
func (h *entries) push(e *entry) {
	e.pos = len(*h)
	*h = append(*h, e)
	h.up(e.pos)
}

// fix restores the heap after the count of its i-th entry changed, as
// heap.Fix.
func (h entries) fix(i int) {
	if !h.down(i) {
		h.up(i)
	}
}

func (h entries) up(j int) {
	for {
		i := (j - 1) / 2 // parent
		if i == j || !h.less(j, i) {
			break
		}
		h.swap(i, j)
		j = i
	}
}

func (h entries) down(i0 int) bool {
	i, n := i0, len(h)
	for {
		j1 := 2*i + 1
		if j1 >= n || j1 < 0 { // j1 < 0 after int overflow
			break
		}
		j := j1 // left child
		if j2 := j1 + 1; j2 < n && h.less(j2, j1) {
			j = j2 // right child
		}
		if !h.less(j, i) {
			break
		}
		h.swap(i, j)
		i = j
	}
	return i > i0
}

// NewTopK returns a sketch keeping k keys, k at least 1.
func NewTopK(k int) *TopK {
	k = max(k, 1)
	return &TopK{k: k, idx: make(map[string]*entry, k)}
}

// Add counts w (at least 1) more of key at now (any clock the caller
// keeps: Items report when each key came in, for RemoveFunc).
func (t *TopK) Add(key string, w int64, now int64) { t.add([]byte(key), w, now) }

// add is Add of a key given as bytes, copied only if it comes in.
func (t *TopK) add(k []byte, w int64, now int64) {
	w = max(w, 1)
	t.total += w
	if e, ok := t.idx[string(k)]; ok { // no copy to look it up
		e.count += w
		t.h.fix(e.pos)
		return
	}
	key := string(k)
	if len(t.h) < t.k {
		// A free slot: the newcomer may have had up to the greatest
		// count dropped so far (none before the sketch is full).
		e := &entry{key: key, count: t.floor + w, err: t.floor, since: now}
		t.idx[key] = e
		t.h.push(e)
		return
	}
	// Replace the least counted key: the newcomer inherits its count,
	// which bounds how much it may have had before.
	e := t.h[0]
	delete(t.idx, e.key)
	t.floor = max(t.floor, e.count)
	e.key, e.err, e.count, e.since = key, e.count, e.count+w, now
	t.idx[key] = e
	t.h.fix(0)
}

// RemoveFunc drops the kept keys for which drop is true (a deleted
// tenant's): their slots go to newcomers, which inherit the greatest count
// dropped as their possible past, so every bound still holds.
func (t *TopK) RemoveFunc(drop func(Item) bool) {
	kept := t.h[:0]
	for _, e := range t.h {
		if drop(Item{e.key, e.count, e.err, e.since}) {
			delete(t.idx, e.key)
			t.floor = max(t.floor, e.count)
			continue
		}
		kept = append(kept, e)
	}
	clear(t.h[len(kept):])
	t.h = kept
	for i, e := range t.h {
		e.pos = i
	}
	for i := len(t.h)/2 - 1; i >= 0; i-- { // heapify, as heap.Init
		t.h.down(i)
	}
}

// Item is a kept key: Count overestimates its weight by at most Err;
// Count-Err was counted since the key came in, at Since.
type Item struct {
	Key   string `json:"key"`
	Count int64  `json:"count"`
	Err   int64  `json:"error"`
	Since int64  `json:"-"`
}

// Top returns the n most counted keys kept, most first (ties by key).
func (t *TopK) Top(n int) []Item {
	out := make([]Item, 0, len(t.h))
	for _, e := range t.h {
		out = append(out, Item{e.key, e.count, e.err, e.since})
	}
	slices.SortFunc(out, func(a, b Item) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Key, b.Key))
	})
	return out[:min(max(n, 0), len(out))]
}

// Total returns the weight of the stream so far.
func (t *TopK) Total() int64 { return t.total }

// Bound returns the most any count overestimates its key's weight by, and
// the least weight a key must have to be sure to be kept: Total/k.
func (t *TopK) Bound() int64 { return t.total / int64(t.k) }
