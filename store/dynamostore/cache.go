package dynamostore

import (
	"sync"
	"sync/atomic"
)

// cache remembers the last state seen of each key, so that a decision can
// be written without reading first. What it holds may be stale: writes are
// conditioned on its version, so a stale entry costs a retry, never a wrong
// answer. Bounded: at the cap, an arbitrary entry makes room.
type cache struct {
	mu  sync.Mutex
	max int
	m   map[string]versioned
}

func newCache(max int) *cache { return &cache{max: max, m: make(map[string]versioned)} }

func (c *cache) get(k string) (versioned, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[k]
	return v, ok
}

func (c *cache) put(k string, v versioned) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[k]; !ok && len(c.m) >= c.max {
		for old := range c.m {
			delete(c.m, old)
			break
		}
	}
	c.m[k] = v
}

// Stats counts a store's DynamoDB requests, for measuring round trips and
// write units per decision.
type Stats struct {
	reads, writes, transactions, conflicts, localDenials atomic.Int64
}

// StatsSnapshot is a copy of a store's counts.
type StatsSnapshot struct {
	// Reads are consistent GetItems; Writes conditional PutItems;
	// Transactions TransactWriteItems; Conflicts lost conditions;
	// LocalDenials denials answered from remembered state, without a
	// request (the deny cache).
	Reads, Writes, Transactions, Conflicts, LocalDenials int64
}

// Stats returns the store's counts so far.
func (s *Store) Stats() StatsSnapshot {
	return StatsSnapshot{s.stats.reads.Load(), s.stats.writes.Load(), s.stats.transactions.Load(), s.stats.conflicts.Load(), s.stats.localDenials.Load()}
}
