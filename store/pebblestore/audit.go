package pebblestore

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sluicehq/sluice"
)

// prefixAudit keys the audit trail: A | tenant | at (ns, big-endian) |
// sequence -> AuditEntry (JSON). The sequence orders entries of one
// nanosecond; it restarts with the process, after entries of earlier times.
const prefixAudit = 'A'

var _ sluice.AuditLog = (*Store)(nil)

// AppendAudit implements sluice.AuditLog, durably.
func (s *Store) AppendAudit(ctx context.Context, e sluice.AuditEntry) error {
	k := appendPart([]byte{prefixAudit}, e.Tenant)
	k = binary.BigEndian.AppendUint64(k, uint64(e.At.UnixNano()))
	k = binary.BigEndian.AppendUint64(k, s.auditSeq.Add(1))
	return s.writeLocked(&s.auditMu, func(b *pebble.Batch) error { return setJSON(b, k, e) })
}

// ListAudit implements sluice.AuditLog.
func (s *Store) ListAudit(ctx context.Context, tenant string, n int) ([]sluice.AuditEntry, error) {
	lower := appendPart([]byte{prefixAudit}, tenant)
	upper := append(bytes.Clone(lower), 0xff)
	iter, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, unavailable(err)
	}
	defer iter.Close()
	out := []sluice.AuditEntry{}
	for iter.Last(); iter.Valid() && len(out) < n; iter.Prev() {
		var e sluice.AuditEntry
		if err := json.Unmarshal(iter.Value(), &e); err != nil {
			return nil, fmt.Errorf("pebblestore: audit entry %q: %w", iter.Key(), err)
		}
		out = append(out, e)
	}
	return out, unavailable(iter.Error())
}
