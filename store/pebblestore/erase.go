package pebblestore

import (
	"bytes"
	"encoding/binary"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memstore"
)

// The store erases a key (sluice.KeyEraser) through its memory tables'
// EraseKey, which asks the backing for the states on disk: those of the
// tenant's counters, read by the tenant's prefix, whose value it is.

var _ memstore.ErasingBacking = (*backing)(nil)

// Find implements memstore.ErasingBacking.
func (b *backing) Find(tenant, value string) ([]sluice.Key, error) {
	lower := appendPart([]byte{prefixCounter}, tenant)
	upper := append(bytes.Clone(lower), 0xff) // no counter key of the tenant has 0xff after it: a space is < 0x80|0x7f
	iter, err := b.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, err
	}
	defer iter.Close()
	var out []sluice.Key
	for iter.First(); iter.Valid(); iter.Next() {
		k, ok := decodeCounterKey(tenant, iter.Key()[len(lower):])
		if ok && k.Value == value && k.Space.Erasable() {
			out = append(out, k)
		}
	}
	return out, iter.Error()
}

// decodeCounterKey decodes the rest of a counter key of tenant after its
// tenant part (counterKey).
func decodeCounterKey(tenant string, rest []byte) (sluice.Key, bool) {
	k := sluice.Key{Tenant: tenant}
	if len(rest) > 0 && rest[0] == epochMark {
		e, n := binary.Uvarint(rest[1:])
		if n <= 0 {
			return k, false
		}
		k.Epoch, rest = int64(e), rest[1+n:]
	}
	if len(rest) < 2 {
		return k, false
	}
	k.Space, k.Algorithm, rest = sluice.Space(rest[0]), sluice.Algorithm(rest[1]), rest[2:]
	l, n := binary.Uvarint(rest)
	if n <= 0 || uint64(len(rest)-n) < l {
		return k, false
	}
	k.Policy, k.Value = string(rest[n:n+int(l)]), string(rest[n+int(l):])
	return k, true
}

// Erase implements memstore.ErasingBacking: the deletes are sequenced
// now, and synced by the wait, as Save's writes.
func (b *backing) Erase(keys []sluice.Key) (func() error, error) {
	batch := b.db.NewBatch()
	for i := range keys {
		if err := batch.Delete(counterKey(&keys[i]), nil); err != nil {
			batch.Close()
			return nil, err
		}
	}
	return b.apply(batch)
}
