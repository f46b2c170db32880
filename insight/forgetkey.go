package insight

import "slices"

// ForgetKeys drops keys of tenant (erased: docs/privacy.md) from the
// heaviest keys and the samples of every policy.
func (r *Recorder) ForgetKeys(tenant string, keys []string) {
	ids := make([]string, len(keys))
	for i, k := range keys {
		ids[i] = keyID(tenant, k)
	}
	erased := func(it Item) bool { return slices.Contains(ids, it.Key) }
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ps := range r.sketch {
		ps.mu.Lock()
		ps.hits.RemoveFunc(erased)
		ps.denials.RemoveFunc(erased)
		ps.mu.Unlock()
		if ps.sample != nil {
			ps.sample.forgetFunc(func(l *keyLog) bool { return slices.Contains(ids, l.id) })
		}
	}
}

// forgetFunc drops the keys of the sample for which drop is true.
func (s *KeySample) forgetFunc(drop func(*keyLog) bool) {
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
		if l.live() && drop(l) {
			s.removeLocked(l)
		}
	}
}
