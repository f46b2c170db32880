package pebblestore

import (
	"bytes"
	"context"
	"crypto/rand"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sluicehq/sluice"
)

var _ sluice.SecretStore = (*Store)(nil)

// secretKey is m | "secret" | tenant | name.
func secretKey(tenant, name string) []byte {
	return append(appendPart(append([]byte{prefixMeta}, "secret"...), tenant), name...)
}

// Secret implements sluice.SecretStore: made once, synced to disk before
// it is used, and read back from then on.
func (s *Store) Secret(ctx context.Context, tenant, name string) ([]byte, error) {
	k := secretKey(tenant, name)
	s.secretMu.Lock()
	defer s.secretMu.Unlock()
	v, closer, err := s.db.Get(k)
	if err == nil {
		defer closer.Close()
		return bytes.Clone(v), nil
	}
	if err != pebble.ErrNotFound {
		return nil, &sluice.Error{Op: "pebblestore.secret", Kind: sluice.KindUnavailable, Err: err}
	}
	b := make([]byte, sluice.SecretLen)
	rand.Read(b)
	if err := s.db.Set(k, b, pebble.Sync); err != nil {
		return nil, &sluice.Error{Op: "pebblestore.secret", Kind: sluice.KindUnavailable, Err: err}
	}
	return b, nil
}
