package httpapi

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/http"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/wire"
)

func (h *Handler) check(w http.ResponseWriter, r *http.Request, who principal) {
	buf, body, err := readPooledBody(w, r)
	if err != nil {
		releaseBody(buf, body)
		writeError(w, err)
		return
	}
	in, err := decodeCheckBody(body)
	releaseBody(buf, body) // nothing decoded refers to it
	if err != nil {
		writeError(w, err)
		return
	}
	req := sluice.Request{Hits: in.Hits}
	if req.Tenant, err = h.tenantOf(in.Tenant, who); err != nil {
		writeError(w, err)
		return
	}
	named := in.Endpoint != "" || len(in.Policies) > 0
	switch {
	case named && len(in.Checks) > 0:
		err = sluice.Invalid("checks", "give either checks (inline policies) or endpoint/policies (named ones), not both")
	case named:
		var storeErr error
		req.Checks, storeErr, err = h.namedChecks(r, req.Tenant, in.Endpoint, in.Policies, in.Key)
		if err == nil && storeErr != nil {
			// The tenant could not be read: its policies' fail modes
			// decide, as when the counters' store fails.
			h.log.Warn("tenant store failed; fail modes decide", "tenant", req.Tenant, "err", storeErr)
			h.answer(w, req, sluice.FailedResult(req, h.opts.Now()))
			return
		}
	case in.Key != nil:
		err = sluice.Invalid("key", "applies to named policies: give endpoint or policies")
	default:
		req.Checks = in.Checks
		err = h.refuseConfiguredNames(req.Checks, "checks[%d].policy.name")
	}
	if err != nil {
		writeError(w, err)
		return
	}
	h.decide(w, r, req)
}

// refuseConfiguredNames refuses inline policies named as configured ones:
// counters are keyed by policy name, so an inline policy of that name would
// spend, and could reset, the configured policy's counters.
func (h *Handler) refuseConfiguredNames(checks []sluice.Check, field string) error {
	cfg := h.opts.Config()
	for i := range checks {
		if _, ok := cfg.Policies[checks[i].Policy.Name]; ok {
			return sluice.Invalid(fmt.Sprintf(field, i), "%q is a configured policy: name it in policies or endpoint, or give the inline policy another name", checks[i].Policy.Name)
		}
	}
	return nil
}

// tenantOf returns the tenant a request is for: the body's, which a tenant
// key must match, or the key's own.
func (h *Handler) tenantOf(tenant string, who principal) (string, error) {
	switch {
	case tenant == "" && who.tenant != "":
		return who.tenant, nil
	case !who.can(tenant):
		return "", errForbidden
	}
	return tenant, nil
}

// namedChecks resolves configured policies for tenant and builds their
// counters' keys from the request's key parts. A policy keyed by "ip" takes
// the client's address if the body gives none. If the tenant store failed,
// the checks are the file's alone and storeErr says why: they are for the
// fail modes, not for counting.
func (h *Handler) namedChecks(r *http.Request, tenant, endpoint string, names []string, parts map[string]string) (checks []sluice.Check, storeErr, err error) {
	rs, t, storeErr, err := h.resolve(r, tenant, endpoint, names)
	if err != nil {
		return nil, nil, err
	}
	checks = make([]sluice.Check, len(rs))
	for i, rp := range rs {
		key, err := h.counterKey(r, rp, parts)
		if err != nil {
			return nil, nil, err
		}
		checks[i] = sluice.Check{Policy: rp.Policy, Key: key, BlockedUntil: blockedUntil(t, rp.Policy.Name, key, h.opts.Now())}
	}
	return checks, storeErr, nil
}

// blockedUntil is the end of the operator's live block of key under
// policy in t, or zero.
func blockedUntil(t *sluice.Tenant, policy, key string, now time.Time) time.Time {
	if t == nil || len(t.Blocks) == 0 {
		return time.Time{}
	}
	until, _ := t.Blocked(policy, key, now)
	return until
}

// resolve returns the configured policies for tenant, with its tier and
// overrides from the file and the tenant store, and the stored tenant (nil
// if none). If the store fails, it resolves from the file alone and
// returns the store's error as storeErr.
func (h *Handler) resolve(r *http.Request, tenant, endpoint string, names []string) (rs []config.Resolved, t *sluice.Tenant, storeErr, err error) {
	t, storeErr = h.storedTenant(r.Context(), tenant)
	rs, err = h.opts.Config().Resolve(t, tenant, endpoint, names)
	return rs, t, storeErr, err
}

// storedTenant reads tenant from the tenant store: nil if it is not there
// (a tenant of the file, or none), and the store's error if it failed.
func (h *Handler) storedTenant(ctx context.Context, tenant string) (*sluice.Tenant, error) {
	switch t, err := h.readTenant(ctx, tenant); {
	case err == nil:
		return &t, nil
	case sluice.KindOf(err) != sluice.KindNotFound:
		return nil, err
	}
	return nil, nil
}

// counterKey joins the key parts a policy is keyed by, each length-prefixed
// so that no two sets of parts give the same key.
func (h *Handler) counterKey(r *http.Request, rp config.Resolved, parts map[string]string) (string, error) {
	var b []byte
	for _, name := range rp.Key {
		v, ok := parts[name]
		if !ok && name == "ip" {
			if a := httplimit.ClientIP(r, h.opts.TrustedProxies); a.IsValid() {
				v, ok = a.String(), true
			}
		}
		if !ok {
			return "", sluice.Invalid("key."+name, "is needed by policy %q", rp.Policy.Name)
		}
		b = binary.AppendUvarint(b, uint64(len(name)))
		b = append(b, name...)
		b = binary.AppendUvarint(b, uint64(len(v)))
		b = append(b, v...)
	}
	return string(b), nil
}

// decide runs req and writes the decision, its headers and its body.
func (h *Handler) decide(w http.ResponseWriter, r *http.Request, req sluice.Request) {
	res, err := h.opts.Limiter.Check(r.Context(), req)
	if err != nil {
		if sluice.KindOf(err) != sluice.KindInvalid {
			h.log.Error("check failed", "tenant", req.Tenant, "err", err)
		}
		writeError(w, err)
		return
	}
	h.answer(w, req, res)
}

// answer writes a decision: its headers and its body, or, for a store's
// failure under a fail-closed policy, 503.
func (h *Handler) answer(w http.ResponseWriter, req sluice.Request, res sluice.Result) {
	var held [2]sluice.Policy // most requests' policies, on the stack
	policies := held[:0]
	for i := range req.Checks {
		policies = append(policies, req.Checks[i].Policy)
	}
	if !res.Allowed && res.Decision.FailedClosed {
		// A fault, not a limit: unavailable, never 429.
		writeError(w, wire.FailedClosed(res.Decision.Policy))
		return
	}
	httplimit.WriteHeaders(w.Header(), res, policies, h.opts.Now())
	wire.WriteResult(w, statusOfResult(res), res)
}

func statusOfResult(res sluice.Result) int {
	if res.Allowed {
		return http.StatusOK
	}
	return http.StatusTooManyRequests
}
