package httpapi

import (
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/tenancy"
	"github.com/sluicehq/sluice/wire"
)

func (h *Handler) check(w http.ResponseWriter, r *http.Request, who principal) {
	buf, body, err := readPooledBody(w, r)
	if err != nil {
		releaseBody(buf, body)
		writeError(w, err)
		return
	}
	in, err := wire.DecodeCheck(body)
	releaseBody(buf, body) // nothing decoded refers to it
	if err != nil {
		writeError(w, err)
		return
	}
	req := sluice.Request{Hits: in.Hits}
	if req.Tenant, err = who.TenantOf(in.Tenant); err != nil {
		writeError(w, err)
		return
	}
	noteTenant(w, req.Tenant)
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
			h.storeLog.Log(h.log, h.opts.Now(), slog.LevelWarn, "tenant store failed; fail modes decide", "tenant", req.Tenant, "err", storeErr)
			h.answer(w, req, sluice.FailedResult(req, h.opts.Now()))
			return
		}
	case in.Key != nil:
		err = sluice.Invalid("key", "applies to named policies: give endpoint or policies")
	default:
		req.Checks = in.Checks
		err = h.tenants.RefuseConfigured(req.Checks, "checks[%d].policy.name")
		h.tenants.HideKeys(req.Tenant, req.Checks)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	h.decide(w, r, req, named)
}

// namedChecks resolves configured policies for tenant into the engine's
// checks (tenancy.Service.Checks), with the request's key parts: a policy
// keyed by "ip" takes the client's address if the body gives none.
func (h *Handler) namedChecks(r *http.Request, tenant, endpoint string, names []string, parts map[string]string) (checks []sluice.Check, storeErr, err error) {
	return h.tenants.Checks(r.Context(), tenant, endpoint, names, h.keyParts(r, parts))
}

// keyParts are a request's key parts, with its client's address.
func (h *Handler) keyParts(r *http.Request, parts map[string]string) tenancy.KeyParts {
	return tenancy.KeyParts{Parts: parts, IP: func() (string, bool) {
		if a := httplimit.ClientIP(r, h.opts.TrustedProxies); a.IsValid() {
			return a.String(), true
		}
		return "", false
	}}
}

// decide runs req and writes the decision, its headers and its body. A
// named request's (endpoint or policies) errors name its own fields.
func (h *Handler) decide(w http.ResponseWriter, r *http.Request, req sluice.Request, named bool) {
	res, err := h.opts.Limiter.Check(r.Context(), req)
	if err != nil {
		if sluice.KindOf(err) != sluice.KindInvalid {
			h.log.Error("check failed", "tenant", req.Tenant, "err", err)
		}
		if named {
			err = namedField(err)
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
	wire.WriteRateLimitHeaders(w.Header(), res, policies, h.opts.Now())
	wire.WriteResult(w, statusOfResult(res), res)
}

// namedField renames the field of the engine's error, which names the
// request's checks, as a named request names it: a check's key is made of
// the request's key parts (key), its hits are the request's (hits).
func namedField(err error) error {
	for e := err; e != nil; e = errors.Unwrap(e) {
		se, ok := e.(*sluice.Error)
		if !ok || se.Field == "" {
			continue
		}
		if !strings.HasPrefix(se.Field, "checks[") {
			return err
		}
		field := ""
		switch _, rest, _ := strings.Cut(se.Field, "]."); {
		case rest == "key" || strings.HasPrefix(rest, "key."):
			field = "key"
		case rest == "hits":
			field = "hits"
		default:
			return err
		}
		return &sluice.Error{Kind: sluice.KindOf(err), Field: field, Message: se.Message}
	}
	return err
}

func statusOfResult(res sluice.Result) int {
	if res.Allowed {
		return http.StatusOK
	}
	return http.StatusTooManyRequests
}
