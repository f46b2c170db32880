package tenancy

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/sluicehq/sluice"
)

// LeaseCheck returns the check a lease of tenant under the configured
// policy name is taken, renewed or released by: the policy as the tenant's
// tier and overrides make it, and, with parts (an acquisition), the
// counter's key made of them and the operator's block of that key; without
// (a renewal or a release, whose key is in the token), no key. A lease
// needs the tenant store: if it fails, its error, as no fail mode hands a
// lease out. The policy must be a concurrency policy.
func (s *Service) LeaseCheck(ctx context.Context, tenant, name string, parts *KeyParts) (sluice.Check, error) {
	t, storeErr := s.View(ctx, tenant)
	rs, err := t.Resolve("", []string{name})
	if err == nil && storeErr != nil {
		err = storeErr
	}
	if err != nil {
		if sluice.FieldOf(err) == "policies[0]" {
			err = sluice.Invalid("policy", "%q is not a configured policy", name)
		}
		return sluice.Check{}, err
	}
	c := sluice.Check{Policy: rs[0].Policy, Epoch: t.Epoch()}
	if parts != nil {
		if c.Key, err = CounterKey(rs[0], s.hide(tenant, *parts)); err != nil {
			return sluice.Check{}, err
		}
		c.BlockedUntil = t.BlockedUntil(name, c.Key, s.opts.Now())
	}
	return c, leasable(c)
}

// InlineLeaseCheck returns the check a lease under the inline policy p is
// taken, renewed or released by, its counter keyed by key: p must be a
// valid concurrency policy, named as no configured policy is (whose
// counters it would spend).
func (s *Service) InlineLeaseCheck(p sluice.Policy, key string) (sluice.Check, error) {
	if err := p.Validate(); err != nil {
		return sluice.Check{}, err.(*sluice.Error).In("policy")
	}
	if len(key) > sluice.MaxKeyLen {
		return sluice.Check{}, sluice.Invalid("keyValue", "is %d bytes, at most %d allowed", len(key), sluice.MaxKeyLen)
	}
	if s.Configured(p.Name) {
		return sluice.Check{}, errConfiguredName("policy.name", p.Name)
	}
	c := sluice.Check{Policy: p, Key: key, Space: sluice.SpaceInline}
	return c, leasable(c)
}

// leasable refuses a check whose policy hands no leases out.
func leasable(c sluice.Check) error {
	if c.Policy.Algorithm != sluice.Concurrency {
		return sluice.Invalid("policy", "%q is %s: leases need a concurrency policy", c.Policy.Name, c.Policy.Algorithm)
	}
	return nil
}

// RefuseConfigured refuses inline policies named as configured ones:
// counters are keyed by policy name, so an inline policy of that name would
// spend, and could reset, the configured policy's counters. field names
// the i-th check's policy name, as fmt.Sprintf(field, i) does.
func (s *Service) RefuseConfigured(checks []sluice.Check, field string) error {
	cfg := s.opts.Config()
	for i := range checks {
		if _, ok := cfg.Policies[checks[i].Policy.Name]; ok {
			return errConfiguredName(fmt.Sprintf(field, i), checks[i].Policy.Name)
		}
	}
	return nil
}

// errConfiguredName refuses an inline policy, at field, named as the
// configured policy name.
func errConfiguredName(field, name string) error {
	return sluice.Invalid(field, "%q is a configured policy: name it in policies or endpoint, or give the inline policy another name", name)
}

// Lease tokens name a lease to its holder: its counter's key and its id,
// with a MAC (HMAC-SHA256, 128 bits) over them, the tenant, and the
// policy's name and algorithm, under the tenant's lease secret, which the
// store keeps (sluice.SecretStore) so that a token is good on every node
// and after a restart. A token cannot be forged nor guessed, nor used for
// another tenant, key or policy: a lease id alone, an acquisition time,
// names nothing.
//
//	token = base64url(version | uvarint len(key) | key | uvarint id | mac)
const (
	leaseTokenVersion = 1
	leaseMACLen       = 16
	leaseSecretName   = "lease-token"
)

// LeaseToken returns the token of lease id, held under check c for tenant.
func (s *Service) LeaseToken(ctx context.Context, tenant string, c sluice.Check, id uint64) (string, error) {
	secret, err := s.leaseSecret(ctx, tenant)
	if err != nil {
		return "", err
	}
	return leaseToken(secret, tenant, c, id), nil
}

// ParseLeaseToken returns the counter's key and the lease id that token
// names, if it was made for this tenant (as it is now: not an earlier
// tenant of the same id) and c's policy; a token that was not is the same
// invalid token as one that was never made.
func (s *Service) ParseLeaseToken(ctx context.Context, tenant string, c sluice.Check, token string) (key string, id uint64, err error) {
	secret, err := s.leaseSecret(ctx, tenant)
	if err != nil {
		return "", 0, err
	}
	return parseLeaseToken(secret, tenant, c, token)
}

// leaseSecret returns the lease secret of tenant as it is now, from memory
// after the first read: secrets never change. It is named by when the
// tenant was created (since), so that a tenant deleted and made anew under
// the same id does not honour the earlier one's tokens.
func (s *Service) leaseSecret(ctx context.Context, tenant string) ([]byte, error) {
	t, err := s.View(ctx, tenant)
	if err != nil {
		return nil, err
	}
	name := leaseSecretName + "/" + strconv.FormatInt(t.Since().UnixNano(), 10)
	if b, ok := s.secrets.get(tenant, name); ok {
		return b, nil
	}
	sctx, cancel := s.storeCtx(ctx)
	defer cancel()
	b, err := s.opts.Secrets.Secret(sctx, tenant, name)
	if err != nil {
		return nil, err
	}
	s.secrets.put(tenant, name, b)
	return b, nil
}

// maxCachedSecrets bounds the tenants' lease secrets held in memory.
const maxCachedSecrets = 10_000

func leaseMAC(secret []byte, tenant string, c sluice.Check, payload []byte) []byte {
	m := hmac.New(sha256.New, secret)
	var b []byte
	b = binary.AppendUvarint(b, uint64(len(tenant)))
	b = append(b, tenant...)
	b = binary.AppendUvarint(b, uint64(len(c.Policy.Name)))
	b = append(b, c.Policy.Name...)
	b = append(b, byte(c.Space), byte(c.Policy.Algorithm))
	m.Write(b)
	m.Write(payload)
	return m.Sum(nil)[:leaseMACLen]
}

func leaseToken(secret []byte, tenant string, c sluice.Check, id uint64) string {
	b := []byte{leaseTokenVersion}
	b = binary.AppendUvarint(b, uint64(len(c.Key)))
	b = append(b, c.Key...)
	b = binary.AppendUvarint(b, id)
	b = append(b, leaseMAC(secret, tenant, c, b)...)
	return base64.RawURLEncoding.EncodeToString(b)
}

func parseLeaseToken(secret []byte, tenant string, c sluice.Check, tok string) (key string, id uint64, err error) {
	bad := sluice.Invalid("token", "is not a lease token of this tenant and policy")
	b, derr := base64.RawURLEncoding.DecodeString(tok)
	if derr != nil || len(b) < 1+leaseMACLen || b[0] != leaseTokenVersion {
		return "", 0, bad
	}
	payload, mac := b[:len(b)-leaseMACLen], b[len(b)-leaseMACLen:]
	if !hmac.Equal(mac, leaseMAC(secret, tenant, c, payload)) {
		return "", 0, bad
	}
	rest := payload[1:]
	n, k := binary.Uvarint(rest)
	if k <= 0 || n > uint64(len(rest)-k) {
		return "", 0, bad
	}
	key = string(rest[k : k+int(n)])
	rest = rest[k+int(n):]
	id, k = binary.Uvarint(rest)
	if k <= 0 || k != len(rest) || id == 0 {
		return "", 0, bad
	}
	return key, id, nil
}
