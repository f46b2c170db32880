package tenancy

import "sync"

// hooks are the functions told of deletions (OnTenantDeleted,
// OnSessionDeleted).
type hooks struct {
	mu       sync.Mutex
	tenants  []func(tenant string)
	sessions []func(tenant, id string)
	keys     []func(tenant string, keys []string)
}

// OnTenantDeleted subscribes fn to the deletions of tenants: it is called
// with the tenant's id once the tenant is deleted, so that what holds the
// tenant's live things (the gateway's connections, the recorder's
// counts) lets them go at once. fn must not block.
func (s *Service) OnTenantDeleted(fn func(tenant string)) {
	s.hooks.mu.Lock()
	defer s.hooks.mu.Unlock()
	s.hooks.tenants = append(s.hooks.tenants, fn)
}

// OnSessionDeleted subscribes fn to the deletions of sessions, as
// OnTenantDeleted does to tenants'.
func (s *Service) OnSessionDeleted(fn func(tenant, id string)) {
	s.hooks.mu.Lock()
	defer s.hooks.mu.Unlock()
	s.hooks.sessions = append(s.hooks.sessions, fn)
}

// tenantDeleted forgets what the service holds of tenant and tells the
// subscribers.
func (s *Service) tenantDeleted(tenant string) {
	s.keys.forgetTenant(tenant)
	s.secrets.forgetTenant(tenant)
	s.hooks.mu.Lock()
	fns := s.hooks.tenants
	s.hooks.mu.Unlock()
	for _, fn := range fns {
		fn(tenant)
	}
}

func (s *Service) sessionDeleted(tenant, id string) {
	s.hooks.mu.Lock()
	fns := s.hooks.sessions
	s.hooks.mu.Unlock()
	for _, fn := range fns {
		fn(tenant, id)
	}
}

// OnKeyErased subscribes fn to the erasures of keys (Erase): it is called
// with the tenant and the counter keys erased, so that what holds them
// (the recorder's samples and top lists) forgets them. fn must not block.
func (s *Service) OnKeyErased(fn func(tenant string, keys []string)) {
	s.hooks.mu.Lock()
	defer s.hooks.mu.Unlock()
	s.hooks.keys = append(s.hooks.keys, fn)
}

func (s *Service) keyErased(tenant string, keys []string) {
	s.hooks.mu.Lock()
	fns := s.hooks.keys
	s.hooks.mu.Unlock()
	for _, fn := range fns {
		fn(tenant, keys)
	}
}
