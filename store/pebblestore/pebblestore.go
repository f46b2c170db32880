// Package pebblestore is Sluice's embedded durable store: the memory store's
// sharded tables in front of a Pebble database in a data directory, so that
// counters, tenants and API keys survive a restart or a crash (SIGKILL
// included) with nothing to install.
//
// Decisions are made in memory as in memstore. Each admitted change to a
// durable counter is written to Pebble, in the key's order, and synced to
// disk before the decision is answered; concurrent decisions share one sync
// (group commit), two syncs at least SyncInterval apart so that more share
// each under load, and no lock is held while waiting for one. A counter is
// durable when its period is at least DurableAfter (default one minute): a
// window, a quota, a token bucket's refill window, a lease's TTL. Shorter
// ones live in memory only: after a crash they restart empty, which admits
// at most one short window's worth again.
//
// With WriteBehind, the durable counters' changes are written instead in
// the background, every WriteBehind, each changed key once with its latest
// state, and synced: a decision never waits on the disk, and costs about
// what it costs on the memory store. A crash (SIGKILL, a power cut) then
// forgets the changes made since the last write that completed, at most
// WriteBehind and one write's time: each key may admit again what it
// admitted in that time. Close, on a graceful stop, writes what is left.
//
// Tenants, API keys and sessions are written with a sync. A write that
// checks, then writes (create a tenant if absent, a key if its tenant
// exists, ...) does both under a mutex, applying its batch there (sequenced
// and visible to the next check) without waiting for the sync, and waits
// for the sync after releasing the mutex (writeLocked), so that no writer
// holds the mutex across an fsync and concurrent writers share syncs.
package pebblestore

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/store/memstore"
)

// Options configures a Store. The zero Options are the defaults.
type Options struct {
	// Memory configures the in-memory tables in front of Pebble: the key
	// cap, shards and sweep. Its Backing is set by Open.
	Memory memstore.Options
	// DurableAfter is the shortest period of a counter written to disk.
	// Default one minute.
	DurableAfter time.Duration
	// SyncInterval is the least time between two syncs of the log
	// (Pebble's WALMinSyncInterval): a sync asked for sooner waits for
	// it, and the durable writes that arrive meanwhile share that sync.
	// Under load this saves CPU (about a tenth of a durable decision's at
	// 500µs, docs/benchmarks.md); it adds at most SyncInterval to a
	// durable decision's latency, and nothing at a rate under one sync per
	// interval. 0 is the default, DefaultSyncInterval; negative syncs as
	// soon as asked.
	SyncInterval time.Duration
	// WriteBehind, if positive, writes the durable counters' changes
	// every WriteBehind in the background instead of before each
	// decision's answer; see the package doc for what a crash forgets.
	// Tenants, API keys, sessions and the audit trail are synced before
	// their answer either way.
	WriteBehind time.Duration
	// Logger receives Pebble's logs and the store's own. Default: discard.
	Logger *slog.Logger

	fs vfs.FS // the file system, in tests; default the OS's
}

// DefaultSyncInterval is Options.SyncInterval's default.
const DefaultSyncInterval = 500 * time.Microsecond

// diskSlowThreshold is how long a disk operation runs before the disk
// counts as slow: Pebble's default, which it sets for a nil FS.
const diskSlowThreshold = 5 * time.Second

// Store is the embedded durable store. It implements sluice.Store (through
// the embedded memory store) and sluice.TenantStore. It is safe for
// concurrent use.
type Store struct {
	*memstore.Store
	db  *pebble.DB
	fs  io.Closer // stops the disk-health checks of Open's FS; nil for a test's FS
	log *slog.Logger

	// tenantMu serialises the tenant writes that check, then write
	// (create, update, delete, a key for a tenant), which Pebble alone
	// would let race. It is held for reads and a batch's apply, never
	// across a sync (write).
	tenantMu sync.Mutex
	// sessionMu serialises session writes, each a check, then a write;
	// like tenantMu, never across a sync.
	sessionMu sync.Mutex
	// secretMu makes a secret once (Secret).
	secretMu sync.Mutex
	// auditMu and auditSeq order the audit trail's writes (AppendAudit).
	auditMu  sync.Mutex
	auditSeq atomic.Uint64

	closeOnce sync.Once
	closeErr  error
}

var (
	_ sluice.Store       = (*Store)(nil)
	_ sluice.TenantStore = (*Store)(nil)
)

// Open opens, or creates, the store in dir.
func Open(dir string, opts Options) (*Store, error) {
	if opts.DurableAfter <= 0 {
		opts.DurableAfter = time.Minute
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	syncInterval := max(0, opts.SyncInterval)
	if opts.SyncInterval == 0 {
		syncInterval = DefaultSyncInterval
	}
	// Pebble's default FS, which it would make for a nil one, checks for
	// a stalled disk on a goroutine of its own. Pebble stops it at
	// DB.Close but not when Open fails (a data dir in use), so the store
	// makes that FS itself and stops it in both cases.
	fs, fsCloser := opts.fs, io.Closer(nil)
	if fs == nil {
		fs, fsCloser = vfs.WithDiskHealthChecks(vfs.Default, diskSlowThreshold, nil, func(vfs.DiskSlowInfo) {})
	}
	db, err := pebble.Open(dir, &pebble.Options{
		Logger:             pebbleLogger{opts.Logger},
		FS:                 fs,
		WALMinSyncInterval: func() time.Duration { return syncInterval },
	})
	if err != nil && fsCloser != nil {
		fsCloser.Close()
	}
	switch {
	case errors.Is(err, syscall.EWOULDBLOCK) || errors.Is(err, syscall.EAGAIN):
		// Pebble's flock on dir/LOCK, held by another process.
		return nil, fmt.Errorf("pebblestore: data dir %s is in use by another sluice process (lock file %s): %w", dir, filepath.Join(dir, "LOCK"), err)
	case err != nil && strings.Contains(err.Error(), "lock held by current process"):
		return nil, fmt.Errorf("pebblestore: data dir %s is in use by another store of this process (lock file %s): %w", dir, filepath.Join(dir, "LOCK"), err)
	}
	if err != nil {
		return nil, fmt.Errorf("pebblestore: open %s: %w", dir, err)
	}
	s := &Store{db: db, fs: fsCloser, log: opts.Logger}
	now := time.Now
	if opts.Memory.Now != nil {
		now = opts.Memory.Now
	}
	if n, err := s.SweepDisk(now()); err != nil {
		s.closeDB()
		return nil, fmt.Errorf("pebblestore: sweeping expired counters: %w", err)
	} else if n > 0 {
		opts.Logger.Info("pebblestore: removed expired counters", "count", n)
	}
	if n, err := s.SweepSessions(now()); err != nil {
		s.closeDB()
		return nil, fmt.Errorf("pebblestore: sweeping expired sessions: %w", err)
	} else if n > 0 {
		opts.Logger.Info("pebblestore: removed expired sessions", "count", n)
	}
	opts.Memory.Backing = &backing{db: db, durableAfter: opts.DurableAfter, log: opts.Logger}
	opts.Memory.WriteBehind, opts.Memory.Logger = opts.WriteBehind, opts.Logger
	s.Store = memstore.New(opts.Memory)
	return s, nil
}

// Close stops the sweep and closes the database. It is idempotent.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		// With WriteBehind, the memory store's Close writes what is
		// left; its error says what is lost.
		s.closeErr = errors.Join(s.Store.Close(), s.closeDB())
	})
	return s.closeErr
}

// closeDB closes the database, then its FS's disk-health checks.
func (s *Store) closeDB() error {
	err := s.db.Close()
	if s.fs != nil {
		s.fs.Close()
	}
	return err
}

// Ping reports whether the database answers, for readiness checks; with
// WriteBehind, an error too while the writes behind fail: the node's
// counters are not durable then.
func (s *Store) Ping(ctx context.Context) error {
	if st, ok := s.WriteBehindStats(); ok && st.Failing {
		return fmt.Errorf("pebblestore: writing counters behind fails: %d changed counters not durable", st.Pending)
	}
	_, closer, err := s.db.Get([]byte{prefixMeta})
	if err == nil {
		closer.Close()
	}
	if errors.Is(err, pebble.ErrNotFound) {
		return nil
	}
	return err
}

// Key prefixes. Every key of a tenant's data leads with the tenant's id,
// length-prefixed, so that no two tenants' keys can collide.
const (
	prefixCounter   = 'c' // c | tenant | [epochMark epoch] | space | algorithm | policy | value -> algo.State
	prefixTenant    = 't' // t | id -> Tenant (JSON)
	prefixTenantKey = 'K' // K | tenant | key id -> APIKey (JSON)
	prefixMeta      = 'm'
)

// epochMark precedes a counter key's epoch, where a key without one has
// its space: no space is 0x7f (sluice.Space).
const epochMark = 0x7f

func appendPart(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// counterKey encodes k. A key of epoch zero is encoded as before epochs
// were; a key's epoch follows its tenant, after epochMark, which no space
// is (the byte there before epochs): the counters of one tenant under two
// epochs never meet, nor those of two tenants.
func counterKey(k *sluice.Key) []byte {
	return appendCounterKey(make([]byte, 0, 1+len(k.Tenant)+len(k.Policy)+len(k.Value)+6+11), k)
}

// appendCounterKey appends k's counterKey to b.
func appendCounterKey(b []byte, k *sluice.Key) []byte {
	b = append(b, prefixCounter)
	b = appendPart(b, k.Tenant)
	if k.Epoch != 0 {
		b = binary.AppendUvarint(append(b, epochMark), uint64(k.Epoch))
	}
	b = append(b, byte(k.Space), byte(k.Algorithm))
	b = appendPart(b, k.Policy)
	return append(b, k.Value...)
}

// backing is the Pebble side of the memory store.
type backing struct {
	db           *pebble.DB
	durableAfter time.Duration
	log          *slog.Logger
}

// Durable implements memstore.Backing: p's counters are written to disk
// if their period is at least durableAfter.
func (b *backing) Durable(p *sluice.Policy) bool {
	switch {
	case p.Algorithm == sluice.Quota && p.Calendar == sluice.Month:
		return true
	case p.Algorithm == sluice.Concurrency:
		return p.EffectiveLeaseTTL() >= b.durableAfter
	}
	return p.Window >= b.durableAfter
}

func (b *backing) Load(k *sluice.Key, p *sluice.Policy) (algo.State, bool, error) {
	v, closer, err := b.db.Get(counterKey(k))
	if errors.Is(err, pebble.ErrNotFound) {
		return algo.State{}, false, nil
	}
	if err != nil {
		return algo.State{}, false, err
	}
	defer closer.Close()
	var st algo.State
	if err := st.UnmarshalBinary(v); err != nil {
		// A state that cannot be read is dropped, loudly, rather than
		// blocking its key forever.
		b.log.Error("pebblestore: unreadable counter state dropped", "tenant", k.Tenant, "policy", k.Policy, "err", err)
		return algo.State{}, false, nil
	}
	return st, true, nil
}

func (b *backing) Save(items []memstore.Saved) (func() error, error) {
	batch := b.db.NewBatch()
	var kb, buf []byte // the batch copies both
	for _, it := range items {
		var err error
		if buf, err = it.State.AppendBinary(buf[:0]); err != nil {
			batch.Close()
			return nil, err
		}
		kb = appendCounterKey(kb[:0], it.Key)
		if err := batch.Set(kb, buf, nil); err != nil {
			batch.Close()
			return nil, err
		}
	}
	if batch.Empty() {
		batch.Close()
		return nil, nil
	}
	return b.apply(batch)
}

// apply sequences batch now, under the caller's locks, and returns a wait
// for its sync, after. It closes the batch.
func (b *backing) apply(batch *pebble.Batch) (func() error, error) {
	if err := b.db.ApplyNoSyncWait(batch, pebble.Sync); err != nil {
		batch.Close()
		return nil, err
	}
	return func() error {
		err := batch.SyncWait()
		batch.Close()
		return err
	}, nil
}

func (b *backing) Forget(keys []sluice.Key) {
	batch := b.db.NewBatch()
	defer batch.Close()
	for i := range keys {
		batch.Delete(counterKey(&keys[i]), nil)
	}
	// No sync: a delete lost in a crash leaves an expired state, which
	// reads as new.
	if err := batch.Commit(pebble.NoSync); err != nil {
		b.log.Error("pebblestore: forgetting expired counters", "err", err)
	}
}

// SweepDisk deletes every counter on disk whose state has expired at now,
// including those of keys not loaded since the process started, and
// returns how many it deleted. The memory sweep forgets what it removes; this
// catches the rest, and runs at Open.
func (s *Store) SweepDisk(now time.Time) (int, error) {
	iter, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixCounter}, UpperBound: []byte{prefixCounter + 1}})
	if err != nil {
		return 0, err
	}
	defer iter.Close()
	batch := s.db.NewBatch()
	defer batch.Close()
	n := 0
	t := now.UnixNano()
	for iter.First(); iter.Valid(); iter.Next() {
		var st algo.State
		if err := st.UnmarshalBinary(iter.Value()); err != nil || st.Expires <= t {
			batch.Delete(bytes.Clone(iter.Key()), nil)
			n++
		}
	}
	if err := iter.Error(); err != nil {
		return 0, err
	}
	return n, batch.Commit(pebble.NoSync)
}

// Tenants.

func tenantKey(id string) []byte { return append([]byte{prefixTenant}, id...) }
func tenantKeyIndex(tenant, id string) []byte {
	return append(appendPart([]byte{prefixTenantKey}, tenant), id...)
}

func (s *Store) get(key []byte, v any) (bool, error) {
	b, closer, err := s.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, unavailable(err)
	}
	defer closer.Close()
	if err := json.Unmarshal(b, v); err != nil {
		return false, fmt.Errorf("pebblestore: %q: %w", key, err)
	}
	return true, nil
}

// unavailable marks a database error as the store failing (503), not a bug.
func unavailable(err error) error {
	if err == nil {
		return nil
	}
	return &sluice.Error{Op: "pebblestore", Kind: sluice.KindUnavailable, Err: err}
}

// writeLocked runs fill under mu, which checks what it must and adds its
// writes to a batch, and applies the batch before releasing mu: the next
// writer's check sees it. The batch's sync is requested then and waited for
// after mu is released; a synced commit makes durable everything the WAL
// holds before it, so writers that queue behind one sync share it. An error
// of fill is returned as it is; one of Pebble's is unavailable.
func (s *Store) writeLocked(mu *sync.Mutex, fill func(b *pebble.Batch) error) error {
	b := s.db.NewBatch()
	defer b.Close()
	mu.Lock()
	if err := fill(b); err != nil {
		mu.Unlock()
		return err
	}
	if b.Empty() {
		mu.Unlock()
		return nil
	}
	err := s.db.ApplyNoSyncWait(b, pebble.Sync)
	mu.Unlock()
	if err != nil {
		return unavailable(err)
	}
	return unavailable(b.SyncWait())
}

// setJSON adds key = v (JSON) to b.
func setJSON(b *pebble.Batch, key []byte, v any) error {
	j, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return b.Set(key, j, nil)
}

// CreateTenant implements sluice.TenantStore.
func (s *Store) CreateTenant(ctx context.Context, t sluice.Tenant) error {
	return s.writeLocked(&s.tenantMu, func(b *pebble.Batch) error {
		if ok, err := s.get(tenantKey(t.ID), new(sluice.Tenant)); err != nil {
			return err
		} else if ok {
			return sluice.ErrTenantExists
		}
		t.Version = 1
		return setJSON(b, tenantKey(t.ID), t)
	})
}

// UpdateTenant implements sluice.TenantStore.
func (s *Store) UpdateTenant(ctx context.Context, t sluice.Tenant) error {
	return s.writeLocked(&s.tenantMu, func(b *pebble.Batch) error {
		var old sluice.Tenant
		switch ok, err := s.get(tenantKey(t.ID), &old); {
		case err != nil:
			return err
		case !ok:
			return sluice.ErrTenantNotFound
		case old.Version != t.Version:
			return sluice.ErrTenantChanged
		}
		t.Version++
		return setJSON(b, tenantKey(t.ID), t)
	})
}

// GetTenant implements sluice.TenantStore.
func (s *Store) GetTenant(ctx context.Context, id string) (sluice.Tenant, error) {
	var t sluice.Tenant
	ok, err := s.get(tenantKey(id), &t)
	if err != nil {
		return sluice.Tenant{}, err
	}
	if !ok {
		return sluice.Tenant{}, sluice.ErrTenantNotFound
	}
	return t, nil
}

// ListTenants implements sluice.TenantStore.
func (s *Store) ListTenants(ctx context.Context) ([]sluice.Tenant, error) {
	iter, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixTenant}, UpperBound: []byte{prefixTenant + 1}})
	if err != nil {
		return nil, err
	}
	defer iter.Close()
	out := []sluice.Tenant{}
	for iter.First(); iter.Valid(); iter.Next() {
		var t sluice.Tenant
		if err := json.Unmarshal(iter.Value(), &t); err != nil {
			return nil, fmt.Errorf("pebblestore: tenant %q: %w", iter.Key()[1:], err)
		}
		out = append(out, t)
	}
	return out, iter.Error()
}

// DeleteTenant implements sluice.TenantStore.
func (s *Store) DeleteTenant(ctx context.Context, id string) error {
	return s.writeLocked(&s.tenantMu, func(b *pebble.Batch) error {
		if ok, err := s.get(tenantKey(id), new(sluice.Tenant)); err != nil {
			return err
		} else if !ok {
			return sluice.ErrTenantNotFound
		}
		keys, err := s.ListAPIKeys(ctx, id)
		if err != nil {
			return err
		}
		b.Delete(tenantKey(id), nil)
		for _, k := range keys {
			b.Delete(tenantKeyIndex(id, k.ID), nil)
		}
		return nil
	})
}

// apiKeyJSON is an APIKey as stored: with its hash, which APIKey's JSON
// leaves out.
type apiKeyJSON struct {
	sluice.APIKey
	Hash []byte `json:"hash"`
}

// PutAPIKey implements sluice.TenantStore.
func (s *Store) PutAPIKey(ctx context.Context, k sluice.APIKey) error {
	return s.writeLocked(&s.tenantMu, func(b *pebble.Batch) error {
		if ok, err := s.get(tenantKey(k.Tenant), new(sluice.Tenant)); err != nil {
			return err
		} else if !ok {
			return sluice.ErrTenantNotFound
		}
		return setJSON(b, tenantKeyIndex(k.Tenant, k.ID), apiKeyJSON{APIKey: k, Hash: k.Hash})
	})
}

// GetAPIKey implements sluice.TenantStore.
func (s *Store) GetAPIKey(ctx context.Context, tenant, id string) (sluice.APIKey, error) {
	var k apiKeyJSON
	ok, err := s.get(tenantKeyIndex(tenant, id), &k)
	if err != nil {
		return sluice.APIKey{}, err
	}
	if !ok {
		return sluice.APIKey{}, sluice.ErrKeyNotFound
	}
	k.APIKey.Hash = k.Hash
	return k.APIKey, nil
}

// ListAPIKeys implements sluice.TenantStore.
func (s *Store) ListAPIKeys(ctx context.Context, tenant string) ([]sluice.APIKey, error) {
	lower := appendPart([]byte{prefixTenantKey}, tenant)
	upper := append(bytes.Clone(lower), 0xff)
	iter, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, err
	}
	defer iter.Close()
	out := []sluice.APIKey{}
	for iter.First(); iter.Valid(); iter.Next() {
		var k apiKeyJSON
		if err := json.Unmarshal(iter.Value(), &k); err != nil {
			return nil, fmt.Errorf("pebblestore: key %q: %w", iter.Key()[len(lower):], err)
		}
		k.APIKey.Hash = k.Hash
		out = append(out, k.APIKey)
	}
	return out, iter.Error()
}

// DeleteAPIKey implements sluice.TenantStore.
func (s *Store) DeleteAPIKey(ctx context.Context, tenant, id string) error {
	return s.writeLocked(&s.tenantMu, func(b *pebble.Batch) error {
		if _, err := s.GetAPIKey(ctx, tenant, id); err != nil {
			return err
		}
		return b.Delete(tenantKeyIndex(tenant, id), nil)
	})
}

// pebbleLogger sends Pebble's logs to slog.
type pebbleLogger struct{ log *slog.Logger }

func (l pebbleLogger) Infof(format string, args ...any) {
	l.log.Debug("pebble: " + fmt.Sprintf(format, args...))
}
func (l pebbleLogger) Errorf(format string, args ...any) {
	l.log.Error("pebble: " + fmt.Sprintf(format, args...))
}
func (l pebbleLogger) Fatalf(format string, args ...any) {
	l.log.Error("pebble: fatal: " + fmt.Sprintf(format, args...))
	panic(fmt.Sprintf(format, args...))
}
