// Package memstore is Sluice's in-process store: counters in sharded maps,
// each shard behind its own mutex, for one process that needs no durability.
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
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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
}

// Store is an in-memory sluice.Store. It is safe for concurrent use.
type Store struct {
	seed     maphash.Seed
	shards   []shard
	mask     uint64
	perShard int
	now      func() time.Time

	closed atomic.Bool
	stop   chan struct{}
	done   chan struct{}
}

type shard struct {
	mu sync.Mutex
	m  map[sluice.Key]*algo.State
	_  [48]byte // keep shards on their own cache lines
}

var _ sluice.Store = (*Store)(nil)

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
		mask:     uint64(n - 1),
		perShard: max(1, (opts.MaxKeys+n-1)/n),
		now:      opts.Now,
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	for i := range s.shards {
		s.shards[i].m = make(map[sluice.Key]*algo.State)
	}
	go s.sweepLoop(opts.SweepInterval)
	return s
}

func (s *Store) shardOf(k *sluice.Key) uint32 {
	h := maphash.String(s.seed, k.Value)
	h = h*31 ^ maphash.String(s.seed, k.Policy)
	h = h*31 ^ maphash.String(s.seed, k.Tenant)
	return uint32(h & s.mask)
}

// Apply implements sluice.Store.
func (s *Store) Apply(ctx context.Context, now time.Time, ops []sluice.Op, dst []sluice.Decision) error {
	if s.closed.Load() {
		return sluice.ErrStoreClosed
	}
	if len(ops) == 1 {
		return s.applyOne(now.UnixNano(), &ops[0], &dst[0])
	}
	return s.applyMany(now.UnixNano(), ops, dst)
}

// applyOne is Apply's path for a single op: one lock, one lookup.
func (s *Store) applyOne(now int64, op *sluice.Op, dst *sluice.Decision) error {
	sh := &s.shards[s.shardOf(&op.Key)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	st := sh.m[op.Key]
	var cur algo.State
	if st != nil {
		cur = *st
	}
	next, d := algo.Decide(op.Policy, cur, now, op.Hits)
	if !d.Allowed || op.Hits == 0 {
		*dst = d
		return nil
	}
	if st == nil {
		if len(sh.m) >= s.perShard {
			return sluice.ErrStoreFull
		}
		st = new(algo.State) // not &next: that would put next on the heap on every call
		*st = next
		sh.m[cloneKey(op.Key)] = st
	} else {
		*st = next
	}
	*dst = d
	return nil
}

// applyMany locks every shard the ops touch, in ascending order so that
// concurrent requests cannot deadlock, and decides them all at once.
func (s *Store) applyMany(now int64, ops []sluice.Op, dst []sluice.Decision) error {
	var idxBuf [sluice.MaxChecks]uint32
	var storedBuf, nextBuf [sluice.MaxChecks]algo.State
	idx, stored, next := idxBuf[:0], storedBuf[:0], nextBuf[:0]
	if len(ops) > sluice.MaxChecks {
		idx = make([]uint32, 0, len(ops))
		stored = make([]algo.State, 0, len(ops))
		next = make([]algo.State, 0, len(ops))
	}
	for i := range ops {
		idx = append(idx, s.shardOf(&ops[i].Key))
	}
	locks := slices.Clone(idx) // small; only multi-op requests get here
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
		var st algo.State
		if p := s.shards[idx[i]].m[ops[i].Key]; p != nil {
			st = *p
		}
		stored = append(stored, st)
	}
	next = next[:len(ops)]
	if !algo.DecideAll(ops, stored, next, now, dst) {
		return nil
	}
	if !s.roomFor(ops, idx) {
		return sluice.ErrStoreFull
	}
	for i := range ops {
		if ops[i].Hits == 0 {
			continue
		}
		m := s.shards[idx[i]].m
		if p := m[ops[i].Key]; p != nil {
			*p = next[i]
		} else {
			st := next[i]
			m[cloneKey(ops[i].Key)] = &st
		}
	}
	return nil
}

// roomFor reports whether every shard has room for the new keys that ops
// would add. The caller holds the shards' locks.
func (s *Store) roomFor(ops []sluice.Op, idx []uint32) bool {
	for i := range ops {
		if ops[i].Hits == 0 || s.shards[idx[i]].m[ops[i].Key] != nil {
			continue
		}
		adds := 0
		for j := range ops {
			if idx[j] == idx[i] && ops[j].Hits > 0 && s.shards[idx[j]].m[ops[j].Key] == nil && !seenBefore(ops, j) {
				adds++
			}
		}
		if len(s.shards[idx[i]].m)+adds > s.perShard {
			return false
		}
	}
	return true
}

// seenBefore reports whether an op before ops[j] has the same key.
func seenBefore(ops []sluice.Op, j int) bool {
	for i := range j {
		if ops[i].Key == ops[j].Key {
			return true
		}
	}
	return false
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
	sh := &s.shards[s.shardOf(&key)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	st := sh.m[key]
	if st == nil {
		return sluice.Decision{}, sluice.ErrLeaseNotFound
	}
	next, d, ok := update(p, *st, now.UnixNano(), lease)
	if !ok {
		return sluice.Decision{}, sluice.ErrLeaseNotFound
	}
	*st = next
	return d, nil
}

// Len returns the number of keys held, expired ones not yet swept included.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// Sweep removes every key whose state has expired at now, one shard at a
// time, and returns how many it removed. The store sweeps by itself every
// SweepInterval; Sweep is for callers that want it sooner.
func (s *Store) Sweep(now time.Time) int {
	t := now.UnixNano()
	removed := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, st := range sh.m {
			if st.Expires <= t {
				delete(sh.m, k)
				removed++
			}
		}
		sh.mu.Unlock()
	}
	return removed
}

func (s *Store) sweepLoop(every time.Duration) {
	defer close(s.done)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
			s.Sweep(s.now())
		}
	}
}

// Close stops the sweep and waits for it. Later calls return
// sluice.ErrStoreClosed. Close is idempotent.
func (s *Store) Close() error {
	if s.closed.CompareAndSwap(false, true) {
		close(s.stop)
	}
	<-s.done
	return nil
}

// cloneKey copies a key's strings so that the map does not keep alive a
// larger buffer the caller's strings may point into.
func cloneKey(k sluice.Key) sluice.Key {
	return sluice.Key{Tenant: strings.Clone(k.Tenant), Policy: strings.Clone(k.Policy), Value: strings.Clone(k.Value)}
}
