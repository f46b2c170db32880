package metrics

import (
	"sync"
	"sync/atomic"
)

// tenantLabels gives tenants their own label value, the first max of them
// seen, and the rest "other", so that tenants cannot grow a label set; a
// deleted tenant's label is forgotten (forget), so that its series go and
// a tenant created again under its id starts as a new one. max 0 (the
// default) labels none: every tenant's label is "". It is safe for
// concurrent use; a tenant labelled already costs a read lock.
type tenantLabels struct {
	max  atomic.Int64
	mu   sync.RWMutex
	seen map[string]bool
}

// setMax labels the first n tenants seen from now on.
func (l *tenantLabels) setMax(n int) { l.max.Store(int64(n)) }

// label is t's label: "" unless labels are on; its own once it was seen
// with add set while fewer than the cap had one; "other" otherwise.
func (l *tenantLabels) label(t string, add bool) string {
	max := l.max.Load()
	if max == 0 {
		return ""
	}
	l.mu.RLock()
	seen := l.seen[t]
	l.mu.RUnlock()
	if seen {
		return t
	}
	if !add {
		return "other"
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.seen[t]:
		return t
	case int64(len(l.seen)) < max:
		if l.seen == nil {
			l.seen = map[string]bool{}
		}
		l.seen[t] = true
		return t
	}
	return "other"
}

// forget drops t's label, if it has one, freeing its place: it reports
// whether it had one, whose series the caller deletes.
func (l *tenantLabels) forget(t string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	had := l.seen[t]
	delete(l.seen, t)
	return had
}
