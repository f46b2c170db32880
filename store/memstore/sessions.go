package memstore

import (
	"context"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
)

// Sessions is an in-memory sluice.SessionStore. It is safe for concurrent
// use; the zero Sessions is ready. Expired sessions are dropped when met,
// and by Sweep.
type Sessions struct {
	mu sync.Mutex
	m  map[sessionKey]sluice.Session
}

type sessionKey struct{ tenant, id string }

var _ sluice.SessionStore = (*Sessions)(nil)

// CreateSession implements sluice.SessionStore.
func (s *Sessions) CreateSession(ctx context.Context, x sluice.Session) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[sessionKey]sluice.Session{}
	}
	k := sessionKey{x.Tenant, x.ID}
	if _, ok := s.m[k]; ok {
		return sluice.ErrSessionExists
	}
	s.m[k] = x
	return nil
}

// liveLocked returns the session if live at now, dropping it if expired.
func (s *Sessions) liveLocked(now time.Time, k sessionKey) (sluice.Session, bool) {
	x, ok := s.m[k]
	if ok && !now.Before(x.ExpiresAt) {
		delete(s.m, k)
		ok = false
	}
	return x, ok
}

// GetSession implements sluice.SessionStore.
func (s *Sessions) GetSession(ctx context.Context, now time.Time, tenant, id string) (sluice.Session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	x, ok := s.liveLocked(now, sessionKey{tenant, id})
	if !ok {
		return sluice.Session{}, sluice.ErrSessionNotFound
	}
	return x, nil
}

// TouchSession implements sluice.SessionStore.
func (s *Sessions) TouchSession(ctx context.Context, now time.Time, tenant, id string, expiresAt time.Time) (sluice.Session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := sessionKey{tenant, id}
	x, ok := s.liveLocked(now, k)
	if !ok {
		return sluice.Session{}, sluice.ErrSessionNotFound
	}
	if expiresAt.After(x.ExpiresAt) {
		x.ExpiresAt = expiresAt
		s.m[k] = x
	}
	return x, nil
}

// DeleteSession implements sluice.SessionStore.
func (s *Sessions) DeleteSession(ctx context.Context, now time.Time, tenant, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := sessionKey{tenant, id}
	if _, ok := s.liveLocked(now, k); !ok {
		return sluice.ErrSessionNotFound
	}
	delete(s.m, k)
	return nil
}

// Sweep drops the sessions expired at now and returns how many.
func (s *Sessions) Sweep(now time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for k, x := range s.m {
		if !now.Before(x.ExpiresAt) {
			delete(s.m, k)
			n++
		}
	}
	return n
}

// Registry is an in-memory sluice.Registry; the zero Registry is ready.
type Registry struct {
	mu sync.Mutex
	m  map[sessionKey]map[string]sluice.Registration // by node
}

var _ sluice.Registry = (*Registry)(nil)

// Register implements sluice.Registry.
func (r *Registry) Register(ctx context.Context, x sluice.Registration) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := sessionKey{x.Tenant, x.Session}
	if r.m == nil {
		r.m = map[sessionKey]map[string]sluice.Registration{}
	}
	if r.m[k] == nil {
		r.m[k] = map[string]sluice.Registration{}
	}
	r.m[k][x.Node] = x
	return nil
}

// Deregister implements sluice.Registry.
func (r *Registry) Deregister(ctx context.Context, tenant, session, node string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := sessionKey{tenant, session}
	delete(r.m[k], node)
	if len(r.m[k]) == 0 {
		delete(r.m, k)
	}
	return nil
}

// Registrations implements sluice.Registry.
func (r *Registry) Registrations(ctx context.Context, now time.Time, tenant, session string) ([]sluice.Registration, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []sluice.Registration
	for _, x := range r.m[sessionKey{tenant, session}] {
		if now.Before(x.ExpiresAt) {
			out = append(out, x)
		}
	}
	return out, nil
}
