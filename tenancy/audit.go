package tenancy

import (
	"context"
	"encoding/json"
	"slices"
	"strings"

	"github.com/sluicehq/sluice"
)

// MaxAudit is the most entries of a tenant's audit trail one read returns.
const MaxAudit = 500

// Audit returns tenant's n newest audit entries (n is 1 to MaxAudit),
// newest first, for who. A tenant's key reads its own tenant's trail: not
// that of an earlier, deleted tenant of the same id, nor the operators'
// names, which read "admin"; the admin reads all of it.
func (s *Service) Audit(ctx context.Context, who Principal, tenant string, n int) ([]sluice.AuditEntry, error) {
	if !who.Can(tenant) {
		return nil, ErrForbidden
	}
	entries, err := s.opts.Audit.ListAudit(ctx, tenant, min(max(n, 1), MaxAudit))
	if err != nil || who.Admin {
		return entries, err
	}
	t, err := s.Stored(ctx, tenant)
	if err != nil && sluice.KindOf(err) != sluice.KindNotFound {
		return nil, err
	}
	created := t.CreatedAt
	entries = slices.DeleteFunc(entries, func(e sluice.AuditEntry) bool { return e.At.Before(created) })
	for i := range entries {
		e := &entries[i]
		e.Actor = operator(e.Actor)
		e.Before, e.After = hideOperators(e.Before), hideOperators(e.After)
	}
	return entries, nil
}

// hideOperators returns a recorded state with the operators' names in it
// (blocks' "by") as a tenant may read them (operator).
func hideOperators(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return raw
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil // not ours to show if it cannot be read
	}
	var walk func(v any) any
	walk = func(v any) any {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if by, ok := e.(string); ok && k == "by" {
					x[k] = operator(by)
				} else {
					x[k] = walk(e)
				}
			}
		case []any:
			for i := range x {
				x[i] = walk(x[i])
			}
		}
		return v
	}
	b, err := json.Marshal(walk(v))
	if err != nil {
		return nil
	}
	return b
}

// operator returns who made a change as a tenant may read it: "admin"
// for any operator (their names are the operators' own).
func operator(by string) string {
	if strings.HasPrefix(by, "admin") {
		return "admin"
	}
	return by
}

// audit records a change of a, after it is made: the records before and
// after, as the API shows them. A failure to record it is logged: the
// change stands, and the log says what the trail misses.
func (s *Service) audit(ctx context.Context, a Actor, action, tenant string, before, after any) {
	e := sluice.AuditEntry{At: s.opts.Now().UTC(), Actor: a.String(), Action: action, Tenant: tenant,
		Before: auditJSON(before), After: auditJSON(after)}
	// The change is made: record it even if the caller has gone.
	ctx, cancel := s.storeCtx(context.WithoutCancel(ctx))
	defer cancel()
	if err := s.opts.Audit.AppendAudit(ctx, e); err != nil {
		s.opts.Logger.Error("audit trail: recording a change failed", "tenant", tenant, "action", action, "actor", e.Actor, "err", err)
	}
}

func auditJSON(v any) json.RawMessage {
	if v == nil {
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil || string(b) == "null" {
		return nil
	}
	return b
}
