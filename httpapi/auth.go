package httpapi

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"errors"
	"net/http"
	"strings"

	"github.com/sluicehq/sluice"
)

// principal is who a request comes from.
type principal struct {
	admin  bool
	tenant string // for a tenant's key
	key    string // the tenant key's id
}

// can reports whether p may reach tenant's data.
func (p principal) can(tenant string) bool { return p.admin || p.tenant == tenant }

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

var (
	errUnauthorized    = &sluice.Error{Kind: sluice.KindUnauthorized, Message: "missing or unknown API key: send Authorization: Bearer <key>"}
	errForbidden       = &sluice.Error{Kind: sluice.KindForbidden, Message: "this API key does not reach that tenant"}
	errAdminOnly       = &sluice.Error{Kind: sluice.KindForbidden, Message: "this route needs the admin key"}
	errInvalidJSONBody = sluice.Invalid("body", "is not a JSON value")
)

// apiKey reads a tenant's API key under the store deadline. The store is
// read every time, so that a deleted key stops working at once; only when
// it fails is the key last read from it used, so that a store that is down
// leaves the policies' fail modes to decide rather than refusing every
// tenant. Keys read are held in a bounded map.
func (h *Handler) apiKey(ctx context.Context, tenant, id string) (sluice.APIKey, error) {
	sctx, cancel := h.storeCtx(ctx)
	defer cancel()
	k, err := h.opts.Tenants.GetAPIKey(sctx, tenant, id)
	name := tenant + "\x00" + id
	switch {
	case err == nil:
		if v, held := h.keys.Load(name); held && bytes.Equal(v.(sluice.APIKey).Hash, k.Hash) {
			return k, nil // held as it is: no write on a request's path
		}
		if _, held := h.keys.Swap(name, k); !held && h.keyCount.Add(1) > maxHeldKeys {
			h.keys.Clear() // bounded: start over rather than grow
			h.keyCount.Store(0)
		}
		return k, nil
	case errors.Is(err, sluice.ErrKeyNotFound):
		h.keys.Delete(name)
		return k, err
	}
	if v, ok := h.keys.Load(name); ok {
		h.log.Warn("tenant store failed; authenticating by the key last read", "tenant", tenant, "err", err)
		return v.(sluice.APIKey), nil
	}
	if sluice.KindOf(err) != sluice.KindUnavailable {
		err = &sluice.Error{Op: "httpapi.auth", Kind: sluice.KindUnavailable, Err: err}
	}
	return k, err
}

// maxHeldKeys bounds the API keys held for a failing store (apiKey).
const maxHeldKeys = 100_000

// authenticate returns who sent r. Without an admin key configured (a
// server bound to loopback, for development) everyone is admin.
func (h *Handler) authenticate(ctx context.Context, r *http.Request) (principal, error) {
	if h.opts.AdminKey == "" {
		return principal{admin: true}, nil
	}
	auth := r.Header.Get("Authorization")
	token, ok := strings.CutPrefix(auth, "Bearer ")
	if !ok || token == "" {
		return principal{}, errUnauthorized
	}
	if subtle.ConstantTimeCompare([]byte(token), []byte(h.opts.AdminKey)) == 1 {
		return principal{admin: true}, nil
	}
	rest, ok := strings.CutPrefix(token, tokenPrefix)
	if !ok {
		return principal{}, errUnauthorized
	}
	i := strings.LastIndexByte(rest, '.')
	j := strings.LastIndexByte(rest[:max(i, 0)], '.')
	if i <= 0 || j <= 0 {
		return principal{}, errUnauthorized
	}
	tenant, id, secret := rest[:j], rest[j+1:i], rest[i+1:]
	if !sluice.ValidID(tenant) {
		return principal{}, errUnauthorized
	}
	k, err := h.apiKey(ctx, tenant, id)
	if errors.Is(err, sluice.ErrKeyNotFound) {
		return principal{}, errUnauthorized
	}
	if err != nil {
		return principal{}, err
	}
	sum := sha256.Sum256([]byte(secret))
	if subtle.ConstantTimeCompare(sum[:], k.Hash) != 1 {
		return principal{}, errUnauthorized
	}
	return principal{tenant: k.Tenant, key: k.ID}, nil
}

// ActorHeader names, for the audit trail, the person behind a change made
// with the admin key, which many operators may share.
const ActorHeader = "X-Sluice-Actor"

// actor names who made a change, for the audit trail: "admin", with the
// name its ActorHeader gives (at most 64 printable bytes), or a tenant's
// key by its id.
func actor(r *http.Request, who principal) string {
	if !who.admin {
		return "key " + who.key
	}
	name := r.Header.Get(ActorHeader)
	if name == "" || len(name) > 64 || strings.IndexFunc(name, func(c rune) bool { return c < ' ' || c == 0x7f }) >= 0 {
		return "admin"
	}
	return "admin (" + name + ")"
}
