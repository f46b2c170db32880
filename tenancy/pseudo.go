package tenancy

import (
	"github.com/sluicehq/sluice"
)

// Pseudonymised keys (Options.Pseudonyms, --pseudonymise-keys): every
// key a request, an operator or Envoy gives is made its pseudonym here,
// at the entry, before it names a counter, a block, a sample or a log
// line: a configured policy's key part by part, so that a key reads
// "user=~Ab3…" and an operator's raw parts find it; an inline check's or
// an upstream caller's key whole. See docs/privacy.md.

// Pseudonymised reports whether keys are stored and shown pseudonymised.
func (s *Service) Pseudonymised() bool { return s.opts.Pseudonyms.On() }

// hide returns parts whose values CounterKey makes tenant's pseudonyms.
func (s *Service) hide(tenant string, parts KeyParts) KeyParts {
	if k := s.opts.Pseudonyms; k.On() {
		// The policies of one request are mostly keyed by the same
		// parts: the last pseudonym serves again.
		var lastName, lastV, last string
		parts.Hide = func(name, v string) string {
			switch {
			case len(v) > sluice.MaxKeyLen:
				return v // too long for a key: refused as it is
			case last == "" || name != lastName || v != lastV:
				lastName, lastV, last = name, v, k.Value(tenant, name, v)
			}
			return last
		}
	}
	return parts
}

// HideKey returns the pseudonym of a key of tenant's given whole (an
// inline check's, an upstream caller's), or key if keys are not
// pseudonymised. The empty key, one counter for the whole tenant, names
// nobody and stays empty.
func (s *Service) HideKey(tenant, key string) string {
	if key == "" || len(key) > sluice.MaxKeyLen {
		return key // too long: refused as it is
	}
	return s.opts.Pseudonyms.Value(tenant, "", key)
}

// HideKeys makes the keys of inline checks of tenant their pseudonyms
// (HideKey).
func (s *Service) HideKeys(tenant string, checks []sluice.Check) {
	if !s.Pseudonymised() {
		return
	}
	for i := range checks {
		checks[i].Key = s.HideKey(tenant, checks[i].Key)
	}
}

// HideEntry returns the pseudonym of the value of an Envoy descriptor's
// entry named name, of tenant (EnvoyTenant), or value if keys are not
// pseudonymised.
func (s *Service) HideEntry(tenant, name, value string) string {
	return s.opts.Pseudonyms.Value(tenant, name, value)
}
