package insight

// Forget drops tenant's keys (a deleted tenant's) from the sample.
func (s *KeySample) Forget(tenant string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var logs []*keyLog
	for _, tb := range s.levels {
		if tb != nil {
			logs = tb.appendKeys(logs)
		}
	}
	logs = s.heavy.appendKeys(logs)
	for _, l := range logs {
		if l.tenant() == tenant && l.live() {
			s.removeLocked(l)
		}
	}
}
