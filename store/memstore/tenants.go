package memstore

import (
	"cmp"
	"context"
	"slices"
	"sync"

	"github.com/sluicehq/sluice"
)

// Tenants is an in-memory sluice.TenantStore. It is safe for concurrent use.
// The zero Tenants is empty and ready.
type Tenants struct {
	mu      sync.RWMutex
	tenants map[string]sluice.Tenant
	keys    map[string]sluice.APIKey // by id
	secrets map[string][]byte        // by tenant and name
}

var _ sluice.TenantStore = (*Tenants)(nil)

// CreateTenant implements sluice.TenantStore.
func (s *Tenants) CreateTenant(ctx context.Context, t sluice.Tenant) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.tenants[t.ID]; ok {
		return sluice.ErrTenantExists
	}
	if s.tenants == nil {
		s.tenants = map[string]sluice.Tenant{}
	}
	t.Version = 1
	s.tenants[t.ID] = cloneTenant(t)
	return nil
}

// UpdateTenant implements sluice.TenantStore.
func (s *Tenants) UpdateTenant(ctx context.Context, t sluice.Tenant) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.tenants[t.ID]
	switch {
	case !ok:
		return sluice.ErrTenantNotFound
	case old.Version != t.Version:
		return sluice.ErrTenantChanged
	}
	t.Version++
	s.tenants[t.ID] = cloneTenant(t)
	return nil
}

// GetTenant implements sluice.TenantStore.
func (s *Tenants) GetTenant(ctx context.Context, id string) (sluice.Tenant, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	t, ok := s.tenants[id]
	if !ok {
		return sluice.Tenant{}, sluice.ErrTenantNotFound
	}
	return cloneTenant(t), nil
}

// ListTenants implements sluice.TenantStore.
func (s *Tenants) ListTenants(ctx context.Context) ([]sluice.Tenant, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]sluice.Tenant, 0, len(s.tenants))
	for _, t := range s.tenants {
		out = append(out, cloneTenant(t))
	}
	slices.SortFunc(out, func(a, b sluice.Tenant) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// DeleteTenant implements sluice.TenantStore.
func (s *Tenants) DeleteTenant(ctx context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.tenants[id]; !ok {
		return sluice.ErrTenantNotFound
	}
	delete(s.tenants, id)
	for kid, k := range s.keys {
		if k.Tenant == id {
			delete(s.keys, kid)
		}
	}
	return nil
}

// PutAPIKey implements sluice.TenantStore.
func (s *Tenants) PutAPIKey(ctx context.Context, k sluice.APIKey) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.tenants[k.Tenant]; !ok {
		return sluice.ErrTenantNotFound
	}
	if s.keys == nil {
		s.keys = map[string]sluice.APIKey{}
	}
	k.Hash = slices.Clone(k.Hash)
	s.keys[k.ID] = k
	return nil
}

// GetAPIKey implements sluice.TenantStore.
func (s *Tenants) GetAPIKey(ctx context.Context, tenant, id string) (sluice.APIKey, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	k, ok := s.keys[id]
	if !ok || k.Tenant != tenant {
		return sluice.APIKey{}, sluice.ErrKeyNotFound
	}
	k.Hash = slices.Clone(k.Hash)
	return k, nil
}

// ListAPIKeys implements sluice.TenantStore.
func (s *Tenants) ListAPIKeys(ctx context.Context, tenant string) ([]sluice.APIKey, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := []sluice.APIKey{}
	for _, k := range s.keys {
		if k.Tenant == tenant {
			k.Hash = slices.Clone(k.Hash)
			out = append(out, k)
		}
	}
	slices.SortFunc(out, func(a, b sluice.APIKey) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// DeleteAPIKey implements sluice.TenantStore.
func (s *Tenants) DeleteAPIKey(ctx context.Context, tenant, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if k, ok := s.keys[id]; !ok || k.Tenant != tenant {
		return sluice.ErrKeyNotFound
	}
	delete(s.keys, id)
	return nil
}

// cloneTenant copies t's map so that callers never share it with the store.
func cloneTenant(t sluice.Tenant) sluice.Tenant {
	if t.Overrides != nil {
		m := make(map[string]sluice.PolicyOverride, len(t.Overrides))
		for k, v := range t.Overrides {
			m[k] = v
		}
		t.Overrides = m
	}
	t.Blocks = slices.Clone(t.Blocks)
	return t
}
