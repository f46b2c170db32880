package dynamostore

import (
	"maps"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
)

// tenantCache remembers tenant reads, found or not, for a short time, so
// that a named decision or a WebSocket connect does not pay a table read
// for its tenant's settings each time. This node's writes forget the
// tenant at once; other nodes' writes are seen within the TTL.
type tenantCache struct {
	ttl time.Duration
	max int
	now func() time.Time

	mu      sync.Mutex
	entries map[string]tenantEntry
	gen     uint64 // +1 per forget: a read that began before one is not kept
}

type tenantEntry struct {
	t     sluice.Tenant
	found bool
	until time.Time
}

func newTenantCache(ttl time.Duration, max int, now func() time.Time) *tenantCache {
	return &tenantCache{ttl: ttl, max: max, now: now, entries: map[string]tenantEntry{}}
}

// get returns the remembered read of id, if it has not expired, and else
// the generation to pass to put with the table's answer.
func (c *tenantCache) get(id string) (t sluice.Tenant, found, ok bool, gen uint64) {
	if c.ttl <= 0 {
		return sluice.Tenant{}, false, false, 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[id]
	if !ok || !c.now().Before(e.until) {
		return sluice.Tenant{}, false, false, c.gen
	}
	e.t.Overrides = maps.Clone(e.t.Overrides) // the caller's to change
	return e.t, e.found, true, 0
}

// put remembers a read of id that began at generation gen, unless this
// node wrote a tenant since. When full, it drops the expired entries and,
// if none had, remembers nothing: lookups of many unknown tenants cannot
// grow it past max.
func (c *tenantCache) put(id string, t sluice.Tenant, found bool, gen uint64) {
	if c.ttl <= 0 {
		return
	}
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return
	}
	if _, ok := c.entries[id]; !ok && len(c.entries) >= c.max {
		for k, e := range c.entries {
			if !now.Before(e.until) {
				delete(c.entries, k)
			}
		}
		if len(c.entries) >= c.max {
			return
		}
	}
	t.Overrides = maps.Clone(t.Overrides) // the caller keeps its own
	c.entries[id] = tenantEntry{t: t, found: found, until: now.Add(c.ttl)}
}

// forget drops id, after this node wrote it.
func (c *tenantCache) forget(id string) {
	c.mu.Lock()
	delete(c.entries, id)
	c.gen++
	c.mu.Unlock()
}
