package memstore

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
)

// writeBehind is the state of Options.WriteBehind: the durable counters'
// changes are marked (flagDirty, and their hash in the shard's dirty list)
// by the decisions, under the shard's lock, and written by WriteBehind.
type writeBehind struct {
	every time.Duration
	log   *slog.Logger

	// mu makes one writer at a time, so that the backing receives a key's
	// states in the order they were made; EraseKey holds it too, so that
	// no state read before an erase is written after it.
	mu sync.Mutex
	// pending is the entries marked and not yet durable: marked, or read
	// by a write that has not completed.
	pending atomic.Int64
	// written and failed count the states written, and the writes that
	// failed (their states are marked again, for the next).
	written, failed atomic.Uint64
	// lastDone is when the last write completed without an error (Unix
	// nanoseconds).
	lastDone atomic.Int64
	// failing is whether the last write failed; under mu. failingNow is
	// its copy for readers without mu.
	failing    bool
	failingNow atomic.Bool
}

// writeChunk and writeChunkBytes bound one Backing.Save of a write behind:
// so many states at most, and about so many bytes (a sliding log's state
// holds up to its limit's entries), so that a write of a million changed
// keys is many batches of a bounded size.
const (
	writeChunk      = 4096
	writeChunkBytes = 4 << 20
)

// writesInFlight is how many chunks a write behind sequences before it
// waits for their sync.
const writesInFlight = 4

// mark marks e, of hash h in sh, changed. The caller holds sh's lock.
func (w *writeBehind) mark(sh *shardState, h uint64, e *entry) {
	if e.flags&flagDirty != 0 {
		return
	}
	e.flags |= flagDirty
	*sh.dirty = append(*sh.dirty, h)
	w.pending.Add(1)
}

// WriteBehindStats describes the writes behind of a store with
// Options.WriteBehind.
type WriteBehindStats struct {
	// Pending is the durable counters changed and not yet durable: what
	// a crash now would forget.
	Pending int64
	// Written is the states written since the store opened.
	Written uint64
	// Failed is the writes that failed; their states are written again
	// by the next.
	Failed uint64
	// LastDone is when the last write completed without an error; zero
	// if none has.
	LastDone time.Time
	// Failing is whether the last write failed: the changes since are
	// not durable, and Pending grows until a write succeeds.
	Failing bool
}

// WriteBehindStats returns the store's writes behind, and false if it
// writes each change before answering (no Options.WriteBehind).
func (s *Store) WriteBehindStats() (WriteBehindStats, bool) {
	w := s.behind
	if w == nil {
		return WriteBehindStats{}, false
	}
	st := WriteBehindStats{Pending: max(0, w.pending.Load()), Written: w.written.Load(), Failed: w.failed.Load(), Failing: w.failingNow.Load()}
	if t := w.lastDone.Load(); t != 0 {
		st.LastDone = time.Unix(0, t)
	}
	return st, true
}

// WriteBehind writes the durable counters changed since the last write to
// the backing, and waits until they are durable. The store calls it every
// Options.WriteBehind and at Close; a caller may call it sooner (before a
// backup, say). Each shard is locked only while its changed states are
// read and their batches sequenced, never across a sync. A write that
// fails leaves its states marked, for the next. It does nothing without
// Options.WriteBehind, and returns sluice.ErrStoreClosed after Close.
func (s *Store) WriteBehind() error {
	if s.behind == nil {
		return nil
	}
	if s.closed.Load() {
		return sluice.ErrStoreClosed
	}
	return s.writeBehind(false)
}

// writeBehind is WriteBehind; closing, the last, whose failure loses the
// states it could not write.
func (s *Store) writeBehind(closing bool) error {
	w := s.behind
	w.mu.Lock()
	defer w.mu.Unlock()
	var (
		keys   []sluice.Key
		states []algo.State
		saved  []Saved
		waits  []func() error
		chunks [][]sluice.Key // each wait's keys, to mark again if it fails
		first  error
	)
	fail := func(keys []sluice.Key, err error) {
		w.failed.Add(1)
		if first == nil {
			first = err
		}
		s.markAgain(keys)
	}
	var chunkBytes int
	save := func() {
		chunkBytes = 0
		if len(keys) == 0 {
			return
		}
		saved = saved[:0]
		for i := range keys {
			saved = append(saved, Saved{Key: &keys[i], State: &states[i]})
		}
		wait, err := s.backing.Save(saved)
		if err != nil {
			fail(keys, err)
		} else {
			waits, chunks = append(waits, wait), append(chunks, keys)
		}
		keys, states = nil, states[:0] // Save keeps neither states nor saved
	}
	// drain waits for the writes sequenced so far; a write waits for its
	// sync before more than writesInFlight are read, so that the states
	// read and not yet durable stay bounded, whatever the keys changed.
	drain := func() {
		for i, wait := range waits {
			if wait != nil {
				if err := wait(); err != nil {
					fail(chunks[i], err)
					continue
				}
			}
			w.pending.Add(-int64(len(chunks[i])))
			w.written.Add(uint64(len(chunks[i])))
		}
		waits, chunks = waits[:0], chunks[:0]
	}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for _, h := range *sh.dirty {
			sh.t.withHash(h, func(e *entry) {
				if e.flags&flagDirty == 0 {
					return
				}
				e.flags &^= flagDirty
				st := e.state()
				keys, states = append(keys, e.key()), append(states, st)
				chunkBytes += 96 + len(keys[len(keys)-1].Value) + 16*len(st.Entries)
				if len(keys) >= writeChunk || chunkBytes >= writeChunkBytes {
					save() // sequenced under the shard's lock, as a decision's save is; waited for after
				}
			})
		}
		if cap(*sh.dirty) > 4*len(*sh.dirty) && cap(*sh.dirty) > 64 {
			*sh.dirty = nil // let a burst's list go
		} else {
			*sh.dirty = (*sh.dirty)[:0]
		}
		sh.mu.Unlock()
		if len(waits) >= writesInFlight {
			drain()
		}
	}
	save()
	drain()
	// Logged when the writes start failing and when they recover, not at
	// every interval: a failing disk would flood the log. The failures
	// are counted (WriteBehindStats.Failed).
	switch {
	case first != nil && closing:
		w.log.Error("memstore: writing counters behind at close failed: their latest changes are lost", "counters", max(0, w.pending.Load()), "err", first)
	case first != nil && !w.failing:
		w.failing = true
		w.log.Error("memstore: writing counters behind failed; they are written again at each interval until a write succeeds", "err", first)
	case first == nil && w.failing:
		w.failing = false
		w.log.Info("memstore: writing counters behind succeeds again")
	}
	if first == nil {
		w.lastDone.Store(time.Now().UnixNano())
	}
	w.failingNow.Store(first != nil)
	return first
}

// markAgain marks the held entries of keys changed, after a failed write:
// their pending count stays, as they are still not durable.
func (s *Store) markAgain(keys []sluice.Key) {
	for i := range keys {
		h := s.hash(&keys[i])
		sh := &s.shards[h>>s.shift]
		sh.mu.Lock()
		if e := sh.t.get(h, &keys[i]); e != nil && e.flags&flagDirty == 0 {
			e.flags |= flagDirty
			*sh.dirty = append(*sh.dirty, h)
		} else {
			s.behind.pending.Add(-1) // gone, or marked again by a decision, which counted it
		}
		sh.mu.Unlock()
	}
}
