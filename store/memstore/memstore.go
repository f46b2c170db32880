// Package memstore is Sluice's in-process store: counters in sharded hash
// tables, each shard behind its own mutex, for one process that needs no
// durability.
//
// Memory is bounded. The store holds at most Options.MaxKeys keys; when a
// decision would add a key to a full shard, Apply returns sluice.ErrStoreFull
// and changes nothing, while keys already held keep working. A key whose
// state has expired (its window passed, its leases ran out) is removed by one
// periodic sweep over the shards, not by a goroutine or timer per key; until
// then it still counts against the cap. Close stops the sweep.
package memstore

import (
	"context"
	"hash/maphash"
	"log/slog"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
)

// Options configures a Store. The zero Options are the defaults.
type Options struct {
	// MaxKeys caps the keys held. Default 1,000,000. The cap is enforced
	// per shard, MaxKeys/Shards each, so a shard can refuse a new key a
	// little before the whole store is full.
	MaxKeys int
	// Shards is the number of independently locked shards, rounded up to
	// a power of two. Default 256.
	Shards int
	// SweepInterval is the period of the sweep of expired keys. Default
	// 30s.
	SweepInterval time.Duration
	// Now is the sweep's clock. Default time.Now.
	Now func() time.Time
	// Backing, if set, keeps a durable copy of the states of its durable
	// counters (Backing.Durable): the store reads such a key it does not
	// hold from it, and writes every admitted change to it, before
	// answering unless WriteBehind is set. The embedded durable store
	// (pebblestore) is this store over a Pebble backing.
	Backing Backing
	// WriteBehind, with a Backing, writes the durable counters' changes
	// to it in the background, every WriteBehind, instead of before each
	// decision is answered. A decision then never waits on the disk, and
	// a key changed many times in an interval is written once. The price
	// is the bound on a crash: it forgets the changes made since the last
	// write that completed, at most WriteBehind and one write's time.
	// Close writes what is left. 0, the default, writes each change, and
	// waits for the backing to make it durable, before answering.
	WriteBehind time.Duration
	// Logger receives the errors of writes behind. Default: discard.
	Logger *slog.Logger
}

// Backing is a durable copy of a Store's states. The store calls it with
// the key's shard locked, so that its writes for one key are in the order of
// the decisions (with WriteBehind, from one writer, which reads the states
// under the shards' locks). Holding a shard, it must not wait on the network or on a
// sync to disk: Load is a local read (Pebble's: the memtables and, on a
// block cache miss, a read of an sstable block; no fsync, no lock shared
// with compactions), and Save only sequences its writes, returning a wait
// for their sync that the store calls after releasing its locks. What can
// still hold a shard is the disk's read latency, and a Pebble write stall
// (memtables full while flushes catch up), which holds Save until the
// flush makes room.
type Backing interface {
	// Durable reports whether the counters of p are kept: the store loads
	// and saves those alone, and decides the others in memory only.
	Durable(p *sluice.Policy) bool
	// Load returns the saved state of a key the store does not hold.
	Load(k *sluice.Key, p *sluice.Policy) (st algo.State, found bool, err error)
	// Save writes new states, all or none, in the order of the calls. It
	// returns a wait, which the store calls once it has released its
	// locks and which returns once the states are durable, so that many
	// decisions share one disk sync. It must not keep items.
	Save(items []Saved) (wait func() error, err error)
	// Forget deletes the saved states of keys the sweep removed because
	// they expired. It is best effort: a state left behind is expired
	// and reads as new.
	Forget(keys []sluice.Key)
}

// Saved is one state for Backing.Save: of a durable counter.
type Saved struct {
	Key   *sluice.Key
	State *algo.State
}

// Store is an in-memory sluice.Store. It is safe for concurrent use.
type Store struct {
	seed     maphash.Seed
	shards   []shard
	shift    uint // a key's shard is its hash's top bits: hash >> shift
	perShard int
	now      func() time.Time
	backing  Backing
	behind   *writeBehind // nil unless Options.WriteBehind

	// collide, in tests, replaces the hash to force collisions.
	collide func(sluice.Key) uint64

	closed atomic.Bool
	stop   chan struct{}
	done   chan struct{} // closed when the sweep, and the writer behind, have stopped
	// closeErr is the last write behind's error, at Close; set before done
	// is closed.
	closeErr error
}

type shard struct {
	shardState
	// 128 bytes a shard: neighbours share neither a cache line nor the
	// pair of lines that the CPU's prefetcher fetches together.
	_ [128 - unsafe.Sizeof(shardState{})%128]byte
}

type shardState struct {
	mu sync.Mutex
	t  table
	// dirty, with WriteBehind, holds the hashes of the entries changed
	// since they were last written (flagDirty), each once.
	dirty *[]uint64
}

// New returns a Store and starts its sweep. Call Close to stop it.
func New(opts Options) *Store {
	if opts.MaxKeys <= 0 {
		opts.MaxKeys = 1_000_000
	}
	if opts.Shards <= 0 {
		opts.Shards = 256
	}
	if opts.SweepInterval <= 0 {
		opts.SweepInterval = 30 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	n := 1
	for n < opts.Shards {
		n <<= 1
	}
	s := &Store{
		seed:     maphash.MakeSeed(),
		shards:   make([]shard, n),
		shift:    uint(64 - bits.Len(uint(n-1))),
		perShard: max(1, (opts.MaxKeys+n-1)/n),
		now:      opts.Now,
		backing:  opts.Backing,
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	if opts.Backing != nil && opts.WriteBehind > 0 {
		if opts.Logger == nil {
			opts.Logger = slog.New(slog.DiscardHandler)
		}
		s.behind = &writeBehind{every: opts.WriteBehind, log: opts.Logger}
		for i := range s.shards {
			s.shards[i].dirty = new([]uint64)
		}
	}
	go s.loop(opts.SweepInterval)
	return s
}

// hash returns k's hash. Its top bits pick the shard, its bottom bits the
// slot in the shard's table.
func (s *Store) hash(k *sluice.Key) uint64 {
	if s.collide != nil {
		return s.collide(*k)
	}
	return s.valueHash(s.prefixHash(k), k.Value)
}

// prefixHash is the part of a key's hash that its prefix (tenant, epoch, space,
// algorithm, policy, region) makes, computed once by a Scope. String hashes
// cost less than maphash.Comparable, which also moves the key to the heap.
func (s *Store) prefixHash(k *sluice.Key) uint64 {
	h := (maphash.String(s.seed, k.Policy) ^ uint64(k.Space)<<56 ^ uint64(k.Algorithm)<<48) * 0x9e3779b97f4a7c15
	if k.Region != "" {
		h = (h ^ maphash.String(s.seed, k.Region)) * 0x9e3779b97f4a7c15
	}
	if k.Epoch != 0 {
		h = (h ^ uint64(k.Epoch)) * 0x9e3779b97f4a7c15
	}
	return h ^ maphash.String(s.seed, k.Tenant)
}

// valueHash completes a key's hash from its prefix's and its value.
func (s *Store) valueHash(prefix uint64, v string) uint64 {
	return (maphash.String(s.seed, v) ^ prefix) * 0xbf58476d1ce4e5b9
}

// Apply implements sluice.Store.
func (s *Store) Apply(ctx context.Context, now time.Time, ops []sluice.Op, dst []sluice.Decision) error {
	if len(ops) == 1 {
		d, err := s.ApplyOne(ctx, now, ops[0])
		dst[0] = d
		return err
	}
	if s.closed.Load() {
		return sluice.ErrStoreClosed
	}
	return s.applyMany(now.UnixNano(), ops, dst)
}

// ApplyOne is Apply for a single op, without the slices: one lock, one
// lookup, and no allocation for a key already held.
func (s *Store) ApplyOne(ctx context.Context, now time.Time, op sluice.Op) (sluice.Decision, error) {
	if s.closed.Load() {
		return sluice.Decision{}, sluice.ErrStoreClosed
	}
	if s.backing != nil && s.backing.Durable(op.Policy) {
		return s.applyOneDurable(now.UnixNano(), op)
	}
	// Not durable: never loaded nor saved, decided in memory alone.
	var d sluice.Decision
	err := s.applyOne(s.hash(&op.Key), nil, &op, now.UnixNano(), &d)
	return d, err
}

// applyOne decides op, whose key's hash is h, into *d, with its shard
// locked. If sp is not nil, it is the key's prefix, a Scope's, which a new
// entry shares; otherwise the key is op.Key.
func (s *Store) applyOne(h uint64, sp *prefix, op *sluice.Op, now int64, d *sluice.Decision) error {
	sh := &s.shards[h>>s.shift]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	var e *entry
	if sp != nil {
		e = sh.t.getScoped(h, sp, op.Key.Value)
	} else {
		e = sh.t.get(h, &op.Key)
	}
	if e != nil {
		e.update(op, now, d)
		return nil
	}
	var st algo.State
	algo.UpdateOp(op, &st, now, d)
	if !d.Allowed || op.Hits == 0 {
		return nil
	}
	if sh.t.n >= s.perShard {
		*d = sluice.Decision{}
		return sluice.ErrStoreFull
	}
	if sp != nil {
		sh.t.addScoped(h, sp, op.Key.Value, st)
	} else {
		sh.t.add(h, &op.Key, st)
	}
	return nil
}

// applyOneDurable is ApplyOne for an op of a durable counter.
func (s *Store) applyOneDurable(now int64, op sluice.Op) (sluice.Decision, error) {
	var d sluice.Decision
	wait, err := s.applyDurable(&op, now, &d)
	if err == nil && wait != nil {
		if err := wait(); err != nil {
			return d, &sluice.Error{Op: "memstore.apply", Kind: sluice.KindUnavailable, Message: "saving state", Err: err}
		}
	}
	return d, err
}

// applyDurable is applyManyLocked for one op, of a durable counter: one
// shard locked, no scratch on the heap unless its state is saved now.
func (s *Store) applyDurable(op *sluice.Op, now int64, d *sluice.Decision) (wait func() error, err error) {
	h := s.hash(&op.Key)
	sh := &s.shards[h>>s.shift].shardState
	sh.mu.Lock()
	defer sh.mu.Unlock()
	var stored, next [1]algo.State
	e := sh.t.get(h, &op.Key)
	if e != nil {
		stored[0] = e.state()
	} else {
		k := op.Key // the backing's copy, on the heap on a miss alone
		st, found, err := s.backing.Load(&k, op.Policy)
		if err != nil {
			return nil, &sluice.Error{Op: "memstore.apply", Kind: sluice.KindUnavailable, Message: "loading state", Err: err}
		}
		if found && st.Algorithm != 0 {
			stored[0] = st
			if sh.t.n < s.perShard {
				// Held from now on, admitted or not: it is the key's
				// state.
				e = sh.t.add(h, &op.Key, st)
				e.flags |= flagDurable
			}
		}
	}
	if !algo.DecideAll(unsafe.Slice(op, 1), stored[:], next[:], now, unsafe.Slice(d, 1)) || op.Hits == 0 {
		return nil, nil
	}
	if e == nil && sh.t.n >= s.perShard {
		*d = sluice.Decision{}
		return nil, sluice.ErrStoreFull
	}
	if s.behind == nil {
		k, st := op.Key, next[0] // the backing's copies: op and next stay on the stack
		if wait, err = s.backing.Save([]Saved{{Key: &k, State: &st}}); err != nil {
			return nil, &sluice.Error{Op: "memstore.apply", Kind: sluice.KindUnavailable, Message: "saving state", Err: err}
		}
	}
	if e != nil {
		e.setState(&next[0])
	} else {
		e = sh.t.add(h, &op.Key, next[0])
	}
	e.flags |= flagDurable
	if s.behind != nil {
		s.behind.mark(sh, h, e)
	}
	return wait, nil
}

// applyMany locks every shard the ops touch, in ascending order so that
// concurrent requests cannot deadlock, and decides them all at once. With a
// backing, it saves the new states before committing them to memory, and
// waits for them to be durable after releasing the locks.
func (s *Store) applyMany(now int64, ops []sluice.Op, dst []sluice.Decision) error {
	wait, err := s.applyManyLocked(now, ops, dst)
	if err != nil || wait == nil {
		return err
	}
	if err := wait(); err != nil {
		return &sluice.Error{Op: "memstore.apply", Kind: sluice.KindUnavailable, Message: "saving state", Err: err}
	}
	return nil
}

func (s *Store) applyManyLocked(now int64, ops []sluice.Op, dst []sluice.Decision) (wait func() error, err error) {
	// Scratch on the stack for the usual request: its checks and their
	// penalty boxes; larger ones allocate.
	const onStack = 2 * sluice.MaxChecks
	n := len(ops)
	var hashBuf [onStack]uint64
	var heldBuf [onStack]bool
	var storedBuf, nextBuf [onStack]algo.State
	var hashes []uint64
	var held []bool
	var stored, next []algo.State
	if n <= onStack {
		hashes, held, stored, next = hashBuf[:n:n], heldBuf[:n:n], storedBuf[:n:n], nextBuf[:n:n]
	} else {
		hashes, held = make([]uint64, n), make([]bool, n)
		stored, next = make([]algo.State, n), make([]algo.State, n)
	}
	var locksBuf [onStack]uint64
	locks := locksBuf[:0]
	if n > onStack {
		locks = make([]uint64, 0, n)
	}
	locks = locks[:n]
	for i := range ops {
		hashes[i] = s.hash(&ops[i].Key)
		locks[i] = hashes[i] >> s.shift
	}
	slices.Sort(locks)
	locks = slices.Compact(locks)
	for _, i := range locks {
		s.shards[i].mu.Lock()
	}
	defer func() {
		for _, i := range locks {
			s.shards[i].mu.Unlock()
		}
	}()

	for i := range ops {
		t := &s.shards[hashes[i]>>s.shift].t
		if e := t.get(hashes[i], &ops[i].Key); e != nil {
			stored[i], held[i] = e.state(), true
			continue
		}
		if s.backing == nil || !s.backing.Durable(ops[i].Policy) {
			continue
		}
		st, found, err := s.backing.Load(&ops[i].Key, ops[i].Policy)
		if err != nil {
			return nil, &sluice.Error{Op: "memstore.apply", Kind: sluice.KindUnavailable, Message: "loading state", Err: err}
		}
		if !found || st.Algorithm == 0 {
			continue
		}
		stored[i] = st
		if t.n < s.perShard {
			// Hold it from now on, admitted or not: it is the key's
			// state.
			t.add(hashes[i], &ops[i].Key, st).flags |= flagDurable
			held[i] = true
		}
	}
	if !algo.DecideAll(ops, stored, next, now, dst) {
		return nil, nil
	}
	if !s.roomLocked(ops, hashes, held) {
		return nil, sluice.ErrStoreFull
	}
	if s.backing != nil && s.behind == nil {
		var saved []Saved
		var states []algo.State
		for i := range ops {
			if ops[i].Hits != 0 && s.backing.Durable(ops[i].Policy) {
				if states == nil {
					// The backing's copy of the new states: handing
					// it next itself would move next, on the stack
					// otherwise, to the heap.
					states = slices.Clone(next)
					saved = make([]Saved, 0, n-i)
				}
				saved = append(saved, Saved{Key: &ops[i].Key, State: &states[i]})
			}
		}
		if len(saved) > 0 {
			if wait, err = s.backing.Save(saved); err != nil {
				return nil, &sluice.Error{Op: "memstore.apply", Kind: sluice.KindUnavailable, Message: "saving state", Err: err}
			}
		}
	}
	for i := range ops {
		if ops[i].Hits == 0 {
			continue
		}
		sh := &s.shards[hashes[i]>>s.shift].shardState
		// An earlier op of this request may have added the key.
		e := sh.t.get(hashes[i], &ops[i].Key)
		if e != nil {
			e.setState(&next[i])
		} else {
			e = sh.t.add(hashes[i], &ops[i].Key, next[i])
		}
		if s.backing != nil && s.backing.Durable(ops[i].Policy) {
			e.flags |= flagDurable
			if s.behind != nil {
				s.behind.mark(sh, hashes[i], e)
			}
		}
	}
	return wait, nil
}

// roomLocked reports whether every shard has room for the keys that ops
// would add. The caller holds the shards' locks.
func (s *Store) roomLocked(ops []sluice.Op, hashes []uint64, held []bool) bool {
	adds := make(map[uint64]int) // shard index -> new keys; rare path
	for i := range ops {
		if ops[i].Hits == 0 || held[i] || slices.IndexFunc(ops[:i], func(o sluice.Op) bool { return o.Key == ops[i].Key }) >= 0 {
			continue
		}
		idx := hashes[i] >> s.shift
		adds[idx]++
		if s.shards[idx].t.n+adds[idx] > s.perShard {
			return false
		}
	}
	return true
}

// Release implements sluice.Store.
func (s *Store) Release(ctx context.Context, now time.Time, key sluice.Key, p *sluice.Policy, lease uint64) (sluice.Decision, error) {
	return s.updateLease(now, key, p, lease, algo.Release)
}

// Renew implements sluice.Store.
func (s *Store) Renew(ctx context.Context, now time.Time, key sluice.Key, p *sluice.Policy, lease uint64) (sluice.Decision, error) {
	return s.updateLease(now, key, p, lease, algo.Renew)
}

func (s *Store) updateLease(now time.Time, key sluice.Key, p *sluice.Policy, lease uint64,
	update func(*sluice.Policy, algo.State, int64, uint64) (algo.State, sluice.Decision, bool)) (sluice.Decision, error) {
	if s.closed.Load() {
		return sluice.Decision{}, sluice.ErrStoreClosed
	}
	d, wait, err := s.updateLeaseLocked(now, &key, p, lease, update)
	if err == nil && wait != nil {
		if err := wait(); err != nil {
			return sluice.Decision{}, &sluice.Error{Op: "memstore.lease", Kind: sluice.KindUnavailable, Message: "saving state", Err: err}
		}
	}
	return d, err
}

func (s *Store) updateLeaseLocked(now time.Time, key *sluice.Key, p *sluice.Policy, lease uint64,
	update func(*sluice.Policy, algo.State, int64, uint64) (algo.State, sluice.Decision, bool)) (sluice.Decision, func() error, error) {
	h := s.hash(key)
	sh := &s.shards[h>>s.shift]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	var st algo.State
	durable := s.backing != nil && s.backing.Durable(p)
	e := sh.t.get(h, key)
	switch {
	case e != nil:
		st = e.state()
	case durable:
		var err error
		if st, _, err = s.backing.Load(key, p); err != nil {
			return sluice.Decision{}, nil, &sluice.Error{Op: "memstore.lease", Kind: sluice.KindUnavailable, Message: "loading state", Err: err}
		}
	}
	next, d, ok := update(p, st, now.UnixNano(), lease)
	if !ok {
		return sluice.Decision{}, nil, sluice.ErrLeaseNotFound
	}
	var wait func() error
	if durable && s.behind == nil {
		var err error
		if wait, err = s.backing.Save([]Saved{{Key: key, State: &next}}); err != nil {
			return sluice.Decision{}, nil, &sluice.Error{Op: "memstore.lease", Kind: sluice.KindUnavailable, Message: "saving state", Err: err}
		}
	}
	if e != nil {
		e.setState(&next)
	} else if sh.t.n < s.perShard {
		e = sh.t.add(h, key, next)
	} else if durable && s.behind != nil {
		// Not held, so not written behind: written now.
		var err error
		if wait, err = s.backing.Save([]Saved{{Key: key, State: &next}}); err != nil {
			return sluice.Decision{}, nil, &sluice.Error{Op: "memstore.lease", Kind: sluice.KindUnavailable, Message: "saving state", Err: err}
		}
	}
	if e != nil && durable {
		e.flags |= flagDurable
		if s.behind != nil {
			s.behind.mark(&sh.shardState, h, e)
		}
	}
	return d, wait, nil
}

// Len returns the number of keys held, expired ones not yet swept included.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.t.n
		sh.mu.Unlock()
	}
	return n
}

// Sweep removes every key whose state has expired at now, one shard at a
// time, and returns how many it removed. The store sweeps by itself every
// SweepInterval; Sweep is for callers that want it sooner.
func (s *Store) Sweep(now time.Time) int {
	if s.behind != nil {
		// No write behind runs meanwhile: a state it read before the
		// sweep forgot the key would be written after.
		s.behind.mu.Lock()
		defer s.behind.mu.Unlock()
	}
	t := now.UnixNano()
	removed := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		gone := sh.t.sweep(t, s.backing != nil)
		if len(gone) > 0 {
			// Under the lock, so that no new state of these keys can be
			// saved and then forgotten.
			s.backing.Forget(gone)
		}
		if s.behind != nil {
			s.behind.pending.Add(-int64(sh.t.dropped))
		}
		removed += sh.t.removed
		sh.mu.Unlock()
	}
	return removed
}

// loop sweeps every sweep, and with WriteBehind writes the changes behind
// every s.behind.every, until Close, when it writes what is left.
func (s *Store) loop(sweep time.Duration) {
	defer close(s.done)
	tick := time.NewTicker(sweep)
	defer tick.Stop()
	var write <-chan time.Time
	if s.behind != nil {
		t := time.NewTicker(s.behind.every)
		defer t.Stop()
		write = t.C
	}
	for {
		select {
		case <-s.stop:
			if s.behind != nil {
				s.closeErr = s.writeBehind(true)
			}
			return
		case <-tick.C:
			s.Sweep(s.now())
		case <-write:
			s.writeBehind(false)
		}
	}
}

// Close stops the sweep and waits for it; with WriteBehind, it writes the
// changes not yet written, waits for them, and returns that write's error:
// the changes it could not write are lost. Later calls return
// sluice.ErrStoreClosed. Close is idempotent; call it once the store's
// decisions have returned, as a change made while it runs may be left
// unwritten.
func (s *Store) Close() error {
	if s.closed.CompareAndSwap(false, true) {
		close(s.stop)
	}
	<-s.done
	return s.closeErr
}
