package dynamostore

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
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
	// LocalDenials denials answered from the deny cache.
	Reads, Writes, Transactions, Conflicts, LocalDenials int64
}

// Stats returns the store's counts so far.
func (s *Store) Stats() StatsSnapshot {
	return StatsSnapshot{s.stats.reads.Load(), s.stats.writes.Load(), s.stats.transactions.Load(), s.stats.conflicts.Load(), s.stats.localDenials.Load()}
}

// denials remembers keys denied until a known time, so that a key over its
// limit is answered locally until then, costing DynamoDB nothing (a failed
// conditional write would still cost a write unit). Only a request of at
// least the denied hits is answered so. Not for concurrency policies, whose
// capacity comes back early when another node releases a lease.
type denials struct {
	mu  sync.Mutex
	max int
	m   map[string]denial
}

type denial struct {
	until, hits int64
	d           sluice.Decision
}

func newDenials(max int) *denials { return &denials{max: max, m: make(map[string]denial)} }

// get returns the denial of hits on k at now, if one is remembered.
func (c *denials) get(k string, now, hits int64) (sluice.Decision, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	x, ok := c.m[k]
	if !ok || now >= x.until || hits < x.hits {
		return sluice.Decision{}, false
	}
	d := x.d
	d.RetryAfter = time.Duration(x.until - now)
	return d, true
}

func (c *denials) put(k string, now, hits int64, d sluice.Decision) {
	if d.RetryAfter <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[k]; !ok && len(c.m) >= c.max {
		for old, x := range c.m {
			if now >= x.until {
				delete(c.m, old)
			}
		}
		if len(c.m) >= c.max {
			for old := range c.m {
				delete(c.m, old)
				break
			}
		}
	}
	c.m[k] = denial{until: now + int64(d.RetryAfter), hits: hits, d: d}
}

func (c *denials) forget(k string) {
	c.mu.Lock()
	delete(c.m, k)
	c.mu.Unlock()
}
