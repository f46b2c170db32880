package pebblestore

import (
	"bytes"
	"context"
	"encoding/json"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sluicehq/sluice"
)

var _ sluice.SessionStore = (*Store)(nil)

// prefixSession keys a session: S | tenant | id -> Session (JSON).
const prefixSession = 'S'

func sessionKey(tenant, id string) []byte {
	return append(appendPart([]byte{prefixSession}, tenant), id...)
}

// CreateSession implements sluice.SessionStore.
func (s *Store) CreateSession(ctx context.Context, x sluice.Session) error {
	return s.writeLocked(&s.sessionMu, func(b *pebble.Batch) error {
		if ok, err := s.get(sessionKey(x.Tenant, x.ID), new(sluice.Session)); err != nil {
			return err
		} else if ok {
			return sluice.ErrSessionExists
		}
		return setJSON(b, sessionKey(x.Tenant, x.ID), x)
	})
}

// liveLocked returns the session if it is live at now.
func (s *Store) liveSessionLocked(now time.Time, tenant, id string) (sluice.Session, error) {
	var x sluice.Session
	ok, err := s.get(sessionKey(tenant, id), &x)
	if err != nil {
		return x, err
	}
	if !ok {
		return x, sluice.ErrSessionNotFound
	}
	if !now.Before(x.ExpiresAt) {
		// Expired: its state goes now (no sync needed: it reads as
		// expired anyway).
		if err := s.db.Delete(sessionKey(tenant, id), pebble.NoSync); err != nil {
			s.log.Warn("pebblestore: removing an expired session", "err", err)
		}
		return x, sluice.ErrSessionNotFound
	}
	return x, nil
}

// SweepSessions removes every session expired at now, and returns how
// many. Sessions met expired are removed as they are met; this catches the
// rest.
func (s *Store) SweepSessions(now time.Time) (int, error) {
	s.sessionMu.Lock()
	defer s.sessionMu.Unlock()
	iter, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixSession}, UpperBound: []byte{prefixSession + 1}})
	if err != nil {
		return 0, unavailable(err)
	}
	defer iter.Close()
	batch := s.db.NewBatch()
	defer batch.Close()
	n := 0
	for iter.First(); iter.Valid(); iter.Next() {
		var x sluice.Session
		if json.Unmarshal(iter.Value(), &x) != nil || !now.Before(x.ExpiresAt) {
			batch.Delete(bytes.Clone(iter.Key()), nil)
			n++
		}
	}
	if err := iter.Error(); err != nil {
		return 0, unavailable(err)
	}
	return n, unavailable(batch.Commit(pebble.NoSync))
}

// GetSession implements sluice.SessionStore.
func (s *Store) GetSession(ctx context.Context, now time.Time, tenant, id string) (sluice.Session, error) {
	s.sessionMu.Lock()
	defer s.sessionMu.Unlock()
	return s.liveSessionLocked(now, tenant, id)
}

// TouchSession implements sluice.SessionStore. Without a sync: a touch
// lost to a crash only makes the session expire sooner.
func (s *Store) TouchSession(ctx context.Context, now time.Time, tenant, id string, expiresAt time.Time) (sluice.Session, error) {
	s.sessionMu.Lock()
	defer s.sessionMu.Unlock()
	x, err := s.liveSessionLocked(now, tenant, id)
	if err != nil || !expiresAt.After(x.ExpiresAt) {
		return x, err
	}
	x.ExpiresAt = expiresAt
	b, err := json.Marshal(x)
	if err != nil {
		return x, err
	}
	return x, unavailable(s.db.Set(sessionKey(tenant, id), b, pebble.NoSync))
}

// DeleteSession implements sluice.SessionStore.
func (s *Store) DeleteSession(ctx context.Context, now time.Time, tenant, id string) error {
	return s.writeLocked(&s.sessionMu, func(b *pebble.Batch) error {
		if _, err := s.liveSessionLocked(now, tenant, id); err != nil {
			return err
		}
		return b.Delete(sessionKey(tenant, id), nil)
	})
}

var _ sluice.Registry = (*Store)(nil)

// prefixRegistration keys a node's registration of a session: R | tenant
// | session | node.
const prefixRegistration = 'R'

func registrationPrefix(tenant, session string) []byte {
	return appendPart(appendPart([]byte{prefixRegistration}, tenant), session)
}

// Register implements sluice.Registry. Without a sync: a registration lost
// to a crash belongs to connections that crash took.
func (s *Store) Register(ctx context.Context, r sluice.Registration) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return unavailable(s.db.Set(append(registrationPrefix(r.Tenant, r.Session), r.Node...), b, pebble.NoSync))
}

// Deregister implements sluice.Registry.
func (s *Store) Deregister(ctx context.Context, tenant, session, node string) error {
	return unavailable(s.db.Delete(append(registrationPrefix(tenant, session), node...), pebble.NoSync))
}

// Registrations implements sluice.Registry.
func (s *Store) Registrations(ctx context.Context, now time.Time, tenant, session string) ([]sluice.Registration, error) {
	lower := registrationPrefix(tenant, session)
	upper := append(bytes.Clone(lower), 0xff)
	iter, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, unavailable(err)
	}
	defer iter.Close()
	var out []sluice.Registration
	for iter.First(); iter.Valid(); iter.Next() {
		var r sluice.Registration
		if err := json.Unmarshal(iter.Value(), &r); err != nil {
			return nil, err
		}
		if now.Before(r.ExpiresAt) {
			out = append(out, r)
		}
	}
	return out, unavailable(iter.Error())
}
