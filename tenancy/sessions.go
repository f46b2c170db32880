package tenancy

import (
	"context"
	"crypto/rand"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
)

// newSessionID returns 128 random bits, base32: the server chooses session
// ids, never the client.
func newSessionID() string {
	var b [16]byte
	rand.Read(b[:])
	return strings.ToLower(b32.EncodeToString(b[:]))
}

// CreateSession creates a session of tenant for who, with an id of the
// server's choosing: it lives the tenant's sessionTTL past its last
// activity. ErrTenantNotFound for a tenant neither the store nor the file
// knows.
func (s *Service) CreateSession(ctx context.Context, who Principal, tenant string) (sluice.Session, error) {
	if !who.Can(tenant) {
		return sluice.Session{}, ErrForbidden
	}
	t, err := s.Lookup(ctx, tenant)
	if err != nil {
		return sluice.Session{}, err
	}
	ttl := time.Duration(t.Settings().SessionTTL) * time.Second
	now := s.opts.Now().UTC()
	x := sluice.Session{Tenant: tenant, ID: newSessionID(), CreatedAt: now, ExpiresAt: now.Add(ttl)}
	if err := s.opts.Sessions.CreateSession(ctx, x); err != nil {
		return sluice.Session{}, err
	}
	return x, nil
}

// Session returns a live session of tenant, as the tenant is now, for who:
// a deleted tenant's sessions are gone with it, and an earlier tenant's of
// the same id are not this one's (sluice.ErrSessionNotFound).
func (s *Service) Session(ctx context.Context, who Principal, tenant, id string) (sluice.Session, error) {
	if !who.Can(tenant) {
		return sluice.Session{}, ErrForbidden
	}
	t, err := s.Lookup(ctx, tenant)
	if err != nil {
		return sluice.Session{}, err
	}
	x, err := s.opts.Sessions.GetSession(ctx, s.opts.Now(), tenant, id)
	if err == nil && x.CreatedAt.Before(t.Since()) {
		return sluice.Session{}, sluice.ErrSessionNotFound
	}
	return x, err
}

// DeleteSession deletes a live session of tenant (as Session finds it)
// for who, and tells the subscribers (OnSessionDeleted).
func (s *Service) DeleteSession(ctx context.Context, who Principal, tenant, id string) error {
	if _, err := s.Session(ctx, who, tenant, id); err != nil {
		return err
	}
	if err := s.opts.Sessions.DeleteSession(ctx, s.opts.Now(), tenant, id); err != nil {
		return err
	}
	s.sessionDeleted(tenant, id)
	return nil
}
