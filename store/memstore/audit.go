package memstore

import (
	"context"
	"slices"
	"sync"

	"github.com/sluicehq/sluice"
)

// MaxAuditInMemory is how many entries an in-memory trail keeps per tenant.
const MaxAuditInMemory = 1000

// Audit is an in-memory sluice.AuditLog, for tests and development: it
// keeps each tenant's last MaxAuditInMemory entries.
type Audit struct {
	mu sync.Mutex
	m  map[string][]sluice.AuditEntry // oldest first
}

var _ sluice.AuditLog = (*Audit)(nil)

// AppendAudit implements sluice.AuditLog.
func (a *Audit) AppendAudit(ctx context.Context, e sluice.AuditEntry) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m == nil {
		a.m = map[string][]sluice.AuditEntry{}
	}
	l := append(a.m[e.Tenant], e)
	if len(l) > MaxAuditInMemory {
		l = slices.Delete(l, 0, len(l)-MaxAuditInMemory)
	}
	a.m[e.Tenant] = l
	return nil
}

// ListAudit implements sluice.AuditLog.
func (a *Audit) ListAudit(ctx context.Context, tenant string, n int) ([]sluice.AuditEntry, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	l := a.m[tenant]
	out := make([]sluice.AuditEntry, 0, min(n, len(l)))
	for i := len(l) - 1; i >= 0 && len(out) < n; i-- {
		out = append(out, l[i])
	}
	return out, nil
}
