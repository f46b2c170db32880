package insight

// Forget drops tenant's keys (a deleted tenant's) from the sample.
func (s *KeySample) Forget(tenant string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, l := range s.keys {
		if l.tenant == tenant {
			s.n -= len(l.events)
			delete(s.keys, id)
		}
	}
}
