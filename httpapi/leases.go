package httpapi

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/wire"
)

// acquire: POST /v1/leases.
func (h *Handler) acquire(w http.ResponseWriter, r *http.Request, who principal) {
	in, tenant, check, err := h.leaseCheck(w, r, who, true)
	if err != nil {
		writeError(w, err)
		return
	}
	units := int64(1)
	if in.Units != nil {
		units = *in.Units
	}
	if units < 1 || units > check.Policy.Limit {
		writeError(w, sluice.Invalid("units", "must be between 1 and the policy's limit %d, got %d", check.Policy.Limit, units))
		return
	}
	req := sluice.Request{Tenant: tenant, Hits: units, Checks: []sluice.Check{check}}
	res, err := h.opts.Limiter.Check(r.Context(), req)
	if err != nil {
		writeError(w, err)
		return
	}
	if !res.Allowed && res.Decision.FailedClosed {
		writeError(w, wire.FailedClosed(check.Policy.Name))
		return
	}
	out := wire.FromResult(res)
	if d := res.Decision; res.Allowed && d.Lease.ID != 0 {
		secret, err := h.leaseSecret(r.Context(), tenant)
		if err != nil {
			// The lease cannot be named: give its units back.
			h.opts.Limiter.Release(r.Context(), tenant, check, d.Lease.ID)
			writeError(w, err)
			return
		}
		out.Lease.Token = leaseToken(secret, tenant, check, d.Lease.ID)
		out.Decisions[0].Lease = out.Lease
	}
	wire.WriteRateLimitHeaders(w.Header(), res, []sluice.Policy{check.Policy}, h.opts.Now())
	writeJSON(w, statusOfResult(res), out)
}

// renew: POST /v1/leases/{token}/renew.
func (h *Handler) renew(w http.ResponseWriter, r *http.Request, who principal) {
	h.updateLease(w, r, who, h.opts.Limiter.Renew)
}

// release: DELETE /v1/leases/{token}.
func (h *Handler) release(w http.ResponseWriter, r *http.Request, who principal) {
	h.updateLease(w, r, who, h.opts.Limiter.Release)
}

func (h *Handler) updateLease(w http.ResponseWriter, r *http.Request, who principal,
	update func(ctx context.Context, tenant string, c sluice.Check, lease uint64) (sluice.Decision, error)) {
	_, tenant, check, err := h.leaseCheck(w, r, who, false)
	if err != nil {
		writeError(w, err)
		return
	}
	secret, err := h.leaseSecret(r.Context(), tenant)
	if err != nil {
		writeError(w, err)
		return
	}
	key, id, err := parseLeaseToken(secret, tenant, check, r.PathValue("token"))
	if err != nil {
		writeError(w, err)
		return
	}
	check.Key = key
	d, err := update(r.Context(), tenant, check, id)
	if err != nil {
		writeError(w, err)
		return
	}
	out := wire.FromDecision(d)
	if out.Lease != nil {
		out.Lease.Token = r.PathValue("token")
	}
	writeJSON(w, http.StatusOK, out)
}

// leaseCheck decodes a lease body into its tenant and check. withKey is
// false for renew and release, whose key is in the token.
func (h *Handler) leaseCheck(w http.ResponseWriter, r *http.Request, who principal, withKey bool) (wire.LeaseRequest, string, sluice.Check, error) {
	var in wire.LeaseRequest
	body, err := readBody(w, r)
	if err != nil {
		return in, "", sluice.Check{}, err
	}
	if err := wire.DecodeStrict(body, &in, ""); err != nil {
		return in, "", sluice.Check{}, err
	}
	tenant, err := h.tenantOf(in.Tenant, who)
	if err != nil {
		return in, "", sluice.Check{}, err
	}
	var check sluice.Check
	switch {
	case len(in.Policy) == 0 || string(in.Policy) == "null":
		return in, "", sluice.Check{}, sluice.Invalid("policy", "is missing: a concurrency policy's name, or an inline policy")
	case in.Policy[0] == '"':
		var name string
		if err := json.Unmarshal(in.Policy, &name); err != nil {
			return in, "", sluice.Check{}, sluice.Invalid("policy", "is not a valid string")
		}
		rs, t, storeErr, err := h.resolve(r, tenant, "", []string{name})
		if err == nil && storeErr != nil {
			err = storeErr // a lease needs the store: no fail mode hands one out
		}
		if err != nil {
			if sluice.FieldOf(err) == "policies[0]" {
				err = sluice.Invalid("policy", "%q is not a configured policy", name)
			}
			return in, "", sluice.Check{}, err
		}
		check.Policy = rs[0].Policy
		if withKey {
			if check.Key, err = h.counterKey(r, rs[0], in.Key); err != nil {
				return in, "", sluice.Check{}, err
			}
			check.BlockedUntil = t.BlockedUntil(name, check.Key, h.opts.Now())
		}
	default:
		p, err := wire.DecodePolicy(in.Policy, "policy")
		if err != nil {
			return in, "", sluice.Check{}, err
		}
		if err := p.Validate(); err != nil {
			return in, "", sluice.Check{}, err.(*sluice.Error).In("policy")
		}
		if len(in.KeyValue) > sluice.MaxKeyLen {
			return in, "", sluice.Check{}, sluice.Invalid("keyValue", "is %d bytes, at most %d allowed", len(in.KeyValue), sluice.MaxKeyLen)
		}
		check = sluice.Check{Policy: p, Key: in.KeyValue, Space: sluice.SpaceInline}
		if err := h.refuseConfiguredNames([]sluice.Check{check}, "policy.name"); err != nil {
			return in, "", sluice.Check{}, err
		}
	}
	if check.Policy.Algorithm != sluice.Concurrency {
		return in, "", sluice.Check{}, sluice.Invalid("policy", "%q is %s: leases need a concurrency policy", check.Policy.Name, check.Policy.Algorithm)
	}
	return in, tenant, check, nil
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

// leaseSecret returns the lease secret of tenant as it is now, from memory
// after the first read: secrets never change. It is named by when the
// tenant was created (since), so that a tenant deleted and made anew under
// the same id does not honour the earlier one's tokens.
func (h *Handler) leaseSecret(ctx context.Context, tenant string) ([]byte, error) {
	t, err := h.tenants.View(ctx, tenant)
	if err != nil {
		return nil, err
	}
	name := leaseSecretName + "/" + strconv.FormatInt(t.Since().UnixNano(), 10)
	if v, ok := h.secrets.Load(tenant + "\x00" + name); ok {
		return v.([]byte), nil
	}
	sctx, cancel := h.storeCtx(ctx)
	defer cancel()
	b, err := h.opts.Secrets.Secret(sctx, tenant, name)
	if err != nil {
		return nil, err
	}
	if h.secretCount.Add(1) > maxCachedSecrets {
		h.secrets.Clear() // bounded: start over rather than grow
		h.secretCount.Store(1)
	}
	h.secrets.Store(tenant+"\x00"+name, b)
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

// parseLeaseToken returns the key and the id a token names, if it was made
// for this tenant and policy; a token that was not is the same invalid
// token as one that was never made.
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
