package memstore

import (
	"context"
	"strings"

	"github.com/sluicehq/sluice"
)

// Scope returns the decision function of the keys of one tenant, key space
// and policy, for a caller that decides many keys under one policy (the
// engine's prepared limiter). apply decides hits at now, in Unix
// nanoseconds, on the key of that scope whose value is value, exactly as
// ApplyOne does on that key: the same counter, the same decision, the same
// errors. It is faster: the scope's part of the key's hash is computed
// once, and a key is compared by its value and a pointer to its scope.
//
// The policy must be valid and is kept: it must not change while apply is
// in use. With a Backing, Scope returns nil: the backing's loads and saves
// take ApplyOne's path. apply is safe for concurrent use.
func (s *Store) Scope(tenant string, space sluice.Space, p *sluice.Policy) (apply func(ctx context.Context, now int64, value string, hits int64) (sluice.Decision, error)) {
	if s.backing != nil {
		return nil
	}
	k := sluice.Key{Tenant: tenant, Space: space, Algorithm: p.Algorithm, Policy: p.Name}
	sc := &scope{s: s, policy: p, prefix: newPrefix(&k), key: k, hash: s.prefixHash(&k)}
	return func(ctx context.Context, now int64, value string, hits int64) (d sluice.Decision, err error) {
		err = sc.apply(now, value, hits, &d)
		return d, err
	}
}

type scope struct {
	s      *Store
	policy *sluice.Policy
	prefix *prefix
	key    sluice.Key // the prefix as a key, for the test hook collide
	hash   uint64     // of the prefix
}

func (sc *scope) apply(now int64, value string, hits int64, d *sluice.Decision) error {
	s := sc.s
	if s.closed.Load() {
		return sluice.ErrStoreClosed
	}
	op := sluice.Op{Key: sluice.Key{Value: value}, Policy: sc.policy, Hits: hits}
	var h uint64
	if s.collide != nil {
		k := sc.key
		k.Value = strings.Clone(value) // the hook must not keep value
		h = s.collide(k)
	} else {
		h = s.valueHash(sc.hash, value)
	}
	return s.applyOne(h, sc.prefix, &op, now, d)
}
