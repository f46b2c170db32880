package memstore

import (
	"context"
	"crypto/rand"

	"github.com/sluicehq/sluice"
)

var _ sluice.SecretStore = (*Tenants)(nil)

// Secret implements sluice.SecretStore. Secrets live as long as the
// process.
func (s *Tenants) Secret(ctx context.Context, tenant, name string) ([]byte, error) {
	k := tenant + "\x00" + name
	s.mu.Lock()
	defer s.mu.Unlock()
	if b, ok := s.secrets[k]; ok {
		return b, nil
	}
	b := make([]byte, sluice.SecretLen)
	rand.Read(b)
	if s.secrets == nil {
		s.secrets = map[string][]byte{}
	}
	s.secrets[k] = b
	return b, nil
}
