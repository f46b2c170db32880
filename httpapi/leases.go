package httpapi

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"net/http"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
)

// leaseRequest is the body of the lease routes. Policy is a configured
// policy's name (a JSON string) or an inline policy (an object); Key holds
// the key parts of a named policy, KeyValue the key of an inline one.
type leaseRequest struct {
	Tenant   string            `json:"tenant"`
	Policy   json.RawMessage   `json:"policy"`
	Key      map[string]string `json:"key"`
	KeyValue string            `json:"keyValue"`
	Units    *int64            `json:"units"` // absent means 1
}

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
	httplimit.WriteHeaders(w.Header(), res, []sluice.Policy{check.Policy}, h.opts.Now())
	out := resultJSON(res)
	if d := res.Decision; res.Allowed && d.Lease.ID != 0 {
		out.Lease = toJSON(d).Lease
		out.Lease.Token = leaseToken(check.Policy.Name, check.Key, d.Lease.ID)
		out.Decisions[0].Lease = out.Lease
	}
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
	name, key, id, err := parseLeaseToken(r.PathValue("token"))
	if err != nil {
		writeError(w, err)
		return
	}
	_, tenant, check, err := h.leaseCheck(w, r, who, false)
	if err != nil {
		writeError(w, err)
		return
	}
	if check.Policy.Name != name {
		writeError(w, sluice.Invalid("policy", "is %q but the lease is of %q", check.Policy.Name, name))
		return
	}
	check.Key = key
	d, err := update(r.Context(), tenant, check, id)
	if err != nil {
		writeError(w, err)
		return
	}
	out := toJSON(d)
	if out.Lease != nil {
		out.Lease.Token = r.PathValue("token")
	}
	writeJSON(w, http.StatusOK, out)
}

// leaseCheck decodes a lease body into its tenant and check. withKey is
// false for renew and release, whose key is in the token.
func (h *Handler) leaseCheck(w http.ResponseWriter, r *http.Request, who principal, withKey bool) (leaseRequest, string, sluice.Check, error) {
	var in leaseRequest
	body, err := readBody(w, r)
	if err != nil {
		return in, "", sluice.Check{}, err
	}
	if err := decodeStrict(body, &in, ""); err != nil {
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
		rs, err := h.resolve(r, tenant, "", []string{name})
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
		}
	default:
		p, err := decodePolicy(in.Policy, "policy")
		if err != nil {
			return in, "", sluice.Check{}, err
		}
		if err := p.Validate(); err != nil {
			return in, "", sluice.Check{}, err.(*sluice.Error).In("policy")
		}
		if len(in.KeyValue) > sluice.MaxKeyLen {
			return in, "", sluice.Check{}, sluice.Invalid("keyValue", "is %d bytes, at most %d allowed", len(in.KeyValue), sluice.MaxKeyLen)
		}
		check = sluice.Check{Policy: p, Key: in.KeyValue}
		if err := h.refuseConfiguredNames([]sluice.Check{check}, "policy.name"); err != nil {
			return in, "", sluice.Check{}, err
		}
	}
	if check.Policy.Algorithm != sluice.Concurrency {
		return in, "", sluice.Check{}, sluice.Invalid("policy", "%q is %s: leases need a concurrency policy", check.Policy.Name, check.Policy.Algorithm)
	}
	return in, tenant, check, nil
}

// leaseToken names a lease: its policy, its counter's key and its id, so
// that renew and release find it. It is opaque to clients.
func leaseToken(policy, key string, id uint64) string {
	b := binary.AppendUvarint(nil, uint64(len(policy)))
	b = append(b, policy...)
	b = binary.AppendUvarint(b, uint64(len(key)))
	b = append(b, key...)
	b = binary.AppendUvarint(b, id)
	return base64.RawURLEncoding.EncodeToString(b)
}

func parseLeaseToken(tok string) (policy, key string, id uint64, err error) {
	bad := sluice.Invalid("token", "is not a lease token")
	b, derr := base64.RawURLEncoding.DecodeString(tok)
	if derr != nil {
		return "", "", 0, bad
	}
	part := func() (string, bool) {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return "", false
		}
		s := string(b[k : k+int(n)])
		b = b[k+int(n):]
		return s, true
	}
	var ok1, ok2 bool
	policy, ok1 = part()
	key, ok2 = part()
	if !ok1 || !ok2 {
		return "", "", 0, bad
	}
	id, k := binary.Uvarint(b)
	if k <= 0 || k != len(b) || id == 0 {
		return "", "", 0, bad
	}
	return policy, key, id, nil
}
