// Package pseudo makes the pseudonyms that stand for keys' values when a
// server runs with --pseudonymise-keys: a keyed hash (HMAC-SHA256 under the
// server's secret) of the tenant, the key part's name and its value,
// truncated to 128 bits and written in unpadded base64url after a "~".
//
// The pseudonym is a function of (secret, tenant, name, value) alone, so
// every node with the same secret makes the same one and a counter keyed
// by it counts exactly as the raw key would. The tenant and the name are in
// the MAC's input, length-prefixed: one tenant's pseudonyms are no other
// tenant's, and no choice of a value makes another part's or another
// tenant's pseudonym. Without the secret, a pseudonym cannot be turned back
// into its value, nor a value into its pseudonym.
package pseudo

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"hash"
	"sync"
)

// Prefix starts every pseudonym.
const Prefix = "~"

// Len is the length of a pseudonym: Prefix and 22 characters of base64url.
const Len = len(Prefix) + 22

// MinSecret is the shortest secret New accepts, in bytes.
const MinSecret = 16

// Keyer makes pseudonyms under one secret. A nil *Keyer makes none: its
// Value returns the value as given. It is safe for concurrent use.
type Keyer struct {
	macs sync.Pool // of *mac
}

// mac is an HMAC-SHA256 under the secret, with its scratch space: pooled,
// so that a pseudonym costs one allocation, its string.
type mac struct {
	h   hash.Hash
	in  []byte
	sum [sha256.Size]byte
	out [Len]byte
}

// New returns a Keyer for secret, which must be at least MinSecret bytes.
func New(secret []byte) (*Keyer, error) {
	if len(secret) < MinSecret {
		return nil, errors.New("pseudo: the key secret must be at least 16 bytes")
	}
	s := append([]byte(nil), secret...)
	k := &Keyer{}
	k.macs.New = func() any { return &mac{h: hmac.New(sha256.New, s)} }
	return k, nil
}

// On reports whether k makes pseudonyms.
func (k *Keyer) On() bool { return k != nil }

// Value returns the pseudonym of value, the part named name of a key of
// tenant's; name is "" for a key given whole (an inline check's, an
// upstream caller's). With k nil it returns value.
func (k *Keyer) Value(tenant, name, value string) string {
	if k == nil {
		return value
	}
	m := k.macs.Get().(*mac)
	defer k.macs.Put(m)
	in := binary.AppendUvarint(m.in[:0], uint64(len(tenant)))
	in = append(in, tenant...)
	in = binary.AppendUvarint(in, uint64(len(name)))
	in = append(in, name...)
	in = append(in, value...)
	if cap(in) <= 4<<10 {
		m.in = in // a key of at most a few KiB: kept for the next
	}
	m.h.Reset()
	m.h.Write(in)
	m.h.Sum(m.sum[:0])
	copy(m.out[:], Prefix)
	base64.RawURLEncoding.Encode(m.out[len(Prefix):], m.sum[:16])
	return string(m.out[:])
}

// Is reports whether s has a pseudonym's form: Prefix and 22 characters
// of base64url, as Value writes them. A raw value of that form is
// possible, but no person's id or address has it.
func Is(s string) bool {
	if len(s) != Len || s[:len(Prefix)] != Prefix {
		return false
	}
	var sum [16]byte
	n, err := base64.RawURLEncoding.Strict().Decode(sum[:], []byte(s[len(Prefix):]))
	return err == nil && n == len(sum)
}
