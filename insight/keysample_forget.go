package insight

// Forget drops tenant's keys (a deleted tenant's) from the sample.
func (s *KeySample) Forget(tenant string) {
	s.forgetFunc(func(l *keyLog) bool { return l.tenant() == tenant })
}
