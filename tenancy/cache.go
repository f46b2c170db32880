package tenancy

import (
	"strings"
	"sync"
	"sync/atomic"
)

// cache holds what was read from the store, by tenant and name, bounded
// per server: past max values it starts over rather than grow, and it
// forgets a deleted tenant's at once (forgetTenant). Safe for concurrent
// use; reads take no lock.
type cache[V any] struct {
	max int64
	m   sync.Map // tenant + "\x00" + name -> V
	n   atomic.Int64
}

func cacheKey(tenant, name string) string { return tenant + "\x00" + name }

func (c *cache[V]) get(tenant, name string) (V, bool) {
	v, ok := c.m.Load(cacheKey(tenant, name))
	if !ok {
		var zero V
		return zero, false
	}
	return v.(V), true
}

func (c *cache[V]) put(tenant, name string, v V) {
	k := cacheKey(tenant, name)
	if _, held := c.m.Load(k); !held && c.n.Add(1) > c.max {
		c.m.Clear() // bounded: start over rather than grow
		c.n.Store(1)
	}
	c.m.Store(k, v)
}

func (c *cache[V]) forget(tenant, name string) {
	if _, held := c.m.LoadAndDelete(cacheKey(tenant, name)); held {
		c.n.Add(-1)
	}
}

// forgetTenant forgets every value of tenant: a walk of the cache, for a
// deletion, which is rare.
func (c *cache[V]) forgetTenant(tenant string) {
	prefix := cacheKey(tenant, "")
	c.m.Range(func(k, _ any) bool {
		if strings.HasPrefix(k.(string), prefix) {
			c.forget(tenant, strings.TrimPrefix(k.(string), prefix))
		}
		return true
	})
}
