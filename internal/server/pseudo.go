package server

import (
	"bytes"
	"errors"
	"fmt"
	"os"

	"github.com/sluicehq/sluice/internal/pseudo"
)

// keyer returns the maker of keys' pseudonyms under --pseudonymise-keys,
// its secret from --key-secret-file or $SLUICE_KEY_SECRET (never a flag's
// value: a command line is visible to every user of the machine); nil
// without. Every node of a store must have the same secret, and a new
// secret starts every counter anew (docs/privacy.md).
func (c Config) keyer() (*pseudo.Keyer, error) {
	if !c.Pseudonyms {
		return nil, nil
	}
	secret := []byte(os.Getenv("SLUICE_KEY_SECRET"))
	if c.KeySecretFile != "" {
		b, err := os.ReadFile(c.KeySecretFile)
		if err != nil {
			return nil, fmt.Errorf("serve: --key-secret-file: %w", err)
		}
		secret = bytes.TrimSpace(b)
	}
	if len(secret) == 0 {
		return nil, errors.New("serve: --pseudonymise-keys needs a secret: --key-secret-file or $SLUICE_KEY_SECRET")
	}
	k, err := pseudo.New(secret)
	if err != nil {
		return nil, fmt.Errorf("serve: --key-secret-file or $SLUICE_KEY_SECRET: %w", err)
	}
	return k, nil
}

// hideEntry is the pseudonym maker of Envoy's descriptors, or nil if keys
// are not pseudonymised.
func (s *Server) hideEntry() func(tenant, name, value string) string {
	if !s.tenants.Pseudonymised() {
		return nil
	}
	return s.tenants.HideEntry
}
