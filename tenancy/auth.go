package tenancy

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"errors"
	"log/slog"
	"strings"

	"github.com/sluicehq/sluice"
)

// Principal is who a request comes from: the admin, or a tenant's API key.
type Principal struct {
	Admin  bool
	Tenant string // for a tenant's key
	Key    string // the tenant key's id
}

// Can reports whether p may reach tenant's data.
func (p Principal) Can(tenant string) bool { return p.Admin || p.Tenant == tenant }

// TenantOf returns the tenant a request of p is for, given the tenant the
// request names (tenant, maybe empty): the named one, which a tenant's key
// must match (ErrForbidden otherwise), or the key's own.
func (p Principal) TenantOf(tenant string) (string, error) {
	switch {
	case tenant == "" && p.Tenant != "":
		return p.Tenant, nil
	case !p.Can(tenant):
		return "", ErrForbidden
	}
	return tenant, nil
}

// AdminOnly returns ErrAdminOnly unless p is the admin.
func (p Principal) AdminOnly() error {
	if !p.Admin {
		return ErrAdminOnly
	}
	return nil
}

// Actor is who makes a change, as the audit trail names them: a
// principal, and for the admin key, which many operators may share, the
// name of the operator behind it, as the request gives it (unchecked).
type Actor struct {
	Principal
	Name string
}

// String names the actor for the audit trail: "admin", with its name (at
// most 64 printable bytes, else none) in parentheses, or a tenant's key
// by its id.
func (a Actor) String() string {
	if !a.Admin {
		return "key " + a.Key
	}
	name := a.Name
	if name == "" || len(name) > 64 || strings.IndexFunc(name, func(c rune) bool { return c < ' ' || c == 0x7f }) >= 0 {
		return "admin"
	}
	return "admin (" + name + ")"
}

// Errors of authentication and of the walls between tenants.
var (
	ErrUnauthorized = &sluice.Error{Kind: sluice.KindUnauthorized, Message: "missing or unknown API key: send Authorization: Bearer <key>"}
	ErrForbidden    = &sluice.Error{Kind: sluice.KindForbidden, Message: "this API key does not reach that tenant"}
	ErrAdminOnly    = &sluice.Error{Kind: sluice.KindForbidden, Message: "this route needs the admin key"}
)

// Token format: "sk_" + tenant + "." + key id + "." + secret. The tenant and
// the id find the key (ids and secrets are base32, without dots; tenants may
// hold dots, so the token is split from the right); the secret's SHA-256
// must match the stored hash.
const tokenPrefix = "sk_"

var b32 = base32.StdEncoding.WithPadding(base32.NoPadding)

// newToken returns a new API key's id, its token (shown once) and the hash
// of its secret (stored).
func newToken(tenant string) (id, token string, hash []byte) {
	var idb [10]byte
	var secret [32]byte
	rand.Read(idb[:])
	rand.Read(secret[:])
	id = strings.ToLower(b32.EncodeToString(idb[:]))
	s := strings.ToLower(b32.EncodeToString(secret[:]))
	h := sha256.Sum256([]byte(s))
	return id, tokenPrefix + tenant + "." + id + "." + s, h[:]
}

// RequiresKey reports whether requests must authenticate: an admin key
// is set (Options.AdminKey).
func (s *Service) RequiresKey() bool { return s.opts.AdminKey != "" }

// Authenticate returns who presents token, a bearer token (empty if the
// request has none): the admin, by the admin key, or a tenant, by one of
// its API keys. ErrUnauthorized for a token that is neither; the store's
// error if it failed and the key was never read before. Without an admin
// key configured (a server bound to loopback, for development) everyone is
// the admin.
func (s *Service) Authenticate(ctx context.Context, token string) (Principal, error) {
	if s.opts.AdminKey == "" {
		return Principal{Admin: true}, nil
	}
	if token == "" {
		return Principal{}, ErrUnauthorized
	}
	if subtle.ConstantTimeCompare([]byte(token), []byte(s.opts.AdminKey)) == 1 {
		return Principal{Admin: true}, nil
	}
	rest, ok := strings.CutPrefix(token, tokenPrefix)
	if !ok {
		return Principal{}, ErrUnauthorized
	}
	i := strings.LastIndexByte(rest, '.')
	j := strings.LastIndexByte(rest[:max(i, 0)], '.')
	if i <= 0 || j <= 0 {
		return Principal{}, ErrUnauthorized
	}
	tenant, id, secret := rest[:j], rest[j+1:i], rest[i+1:]
	if !sluice.ValidID(tenant) {
		return Principal{}, ErrUnauthorized
	}
	k, err := s.apiKey(ctx, tenant, id)
	if errors.Is(err, sluice.ErrKeyNotFound) {
		return Principal{}, ErrUnauthorized
	}
	if err != nil {
		return Principal{}, err
	}
	sum := sha256.Sum256([]byte(secret))
	if subtle.ConstantTimeCompare(sum[:], k.Hash) != 1 {
		return Principal{}, ErrUnauthorized
	}
	return Principal{Tenant: k.Tenant, Key: k.ID}, nil
}

// apiKey reads a tenant's API key under the store deadline. The store is
// read every time, so that a deleted key stops working at once; only when
// it fails is the key last read from it used, so that a store that is down
// leaves the policies' fail modes to decide rather than refusing every
// tenant. Keys read are held in a bounded cache, which forgets a deleted
// key and a deleted tenant's keys.
func (s *Service) apiKey(ctx context.Context, tenant, id string) (sluice.APIKey, error) {
	sctx, cancel := s.storeCtx(ctx)
	defer cancel()
	k, err := s.opts.Store.GetAPIKey(sctx, tenant, id)
	switch {
	case err == nil:
		// A key held as it is needs no write on a request's path.
		if held, ok := s.keys.get(tenant, id); !ok || !bytes.Equal(held.Hash, k.Hash) {
			s.keys.put(tenant, id, k)
		}
		return k, nil
	case errors.Is(err, sluice.ErrKeyNotFound):
		s.keys.forget(tenant, id)
		return k, err
	}
	if held, ok := s.keys.get(tenant, id); ok {
		s.authLog.Log(s.opts.Logger, s.opts.Now(), slog.LevelWarn, "tenant store failed; authenticating by the key last read", "tenant", tenant, "err", err)
		return held, nil
	}
	if sluice.KindOf(err) != sluice.KindUnavailable {
		err = &sluice.Error{Op: "tenancy.auth", Kind: sluice.KindUnavailable, Err: err}
	}
	return k, err
}

// maxHeldKeys bounds the API keys held for a failing store (apiKey).
const maxHeldKeys = 100_000

// storeCtx bounds one read of the store by StoreTimeout.
func (s *Service) storeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if s.opts.StoreTimeout > 0 {
		return context.WithTimeout(ctx, s.opts.StoreTimeout)
	}
	return context.WithCancel(ctx)
}
