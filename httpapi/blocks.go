package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/tenancy"
	"github.com/sluicehq/sluice/wire"
)

// KeyKeeper is what the abuse view does to one key (engine.Engine): read
// its state without deciding, and lift its penalty.
type KeyKeeper interface {
	State(ctx context.Context, tenant string, c sluice.Check) (counter, box sluice.Decision, err error)
	Lift(ctx context.Context, tenant string, c sluice.Check) (bool, error)
}

// The operator's hand on single keys and the audit trail:
//
//	GET    /v1/tenants/{id}/blocks                 the tenant's live blocks (its key or the admin)
//	POST   /v1/tenants/{id}/blocks                 the admin blocks a key of a policy for a time
//	DELETE /v1/tenants/{id}/blocks?policy=P&key=K  the admin ends a key's block and penalty
//	GET    /v1/tenants/{id}/audit?n=50             the tenant's trail of changes, newest first
//
// A block lives in the tenant's record (sluice.KeyBlock), read by every
// request already: it costs no store call of its own and takes effect on
// every node as a tenant change does. A tenant's key reads its blocks and
// trail and changes neither: blocks and lifts only tighten or loosen what
// the operator set.
func (h *Handler) routeBlocks() {
	h.route("GET", "/v1/tenants/{id}/blocks", h.listBlocks)
	h.route("POST", "/v1/tenants/{id}/blocks", h.block)
	h.route("DELETE", "/v1/tenants/{id}/blocks", h.lift)
	h.route("GET", "/v1/tenants/{id}/audit", h.listAudit)
}

// blockRequest is the body of POST .../blocks: the key as the abuse view
// lists it (key), or by its parts, as a check names them (parts).
type blockRequest struct {
	Policy  string            `json:"policy"`
	Key     *string           `json:"key"`
	Parts   map[string]string `json:"parts"`
	Seconds int64             `json:"seconds"`
	Reason  string            `json:"reason"`
}

// blockJSON is a block on the wire, its key readable ("user=bot-7"): the
// same in key and in label.
type blockJSON struct {
	sluice.KeyBlock
	Key   string `json:"key"`
	Label string `json:"label"`
}

// blockOut is b on the wire.
func (h *Handler) blockOut(b sluice.KeyBlock) blockJSON {
	k := h.keyLabel(b.Policy, b.Key)
	return blockJSON{b, k, k}
}

// blocksOut is bs on the wire, as the audit trail keeps them: keys
// readable.
func (h *Handler) blocksOut(bs []sluice.KeyBlock) []blockJSON {
	if bs == nil {
		return nil // null in the trail, as before
	}
	out := make([]blockJSON, len(bs))
	for i, b := range bs {
		out[i] = h.blockOut(b)
	}
	return out
}

// maxBlock is the longest block: a longer one is a limit to set.
const maxBlock = 30 * 24 * time.Hour

func (h *Handler) listBlocks(w http.ResponseWriter, r *http.Request, who principal) {
	tenant := r.PathValue("id")
	if !who.can(tenant) {
		writeError(w, errForbidden)
		return
	}
	t, err := h.readTenant(r.Context(), tenant)
	if err != nil {
		writeError(w, err)
		return
	}
	now := h.opts.Now()
	out := []blockJSON{}
	for _, b := range t.Blocks {
		if now.Before(b.Until) {
			if !who.admin {
				b.By = operator(b.By)
			}
			out = append(out, h.blockOut(b))
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"blocks": out})
}

func (h *Handler) block(w http.ResponseWriter, r *http.Request, who principal) {
	if !who.admin {
		writeError(w, errAdminOnly)
		return
	}
	body, err := readBody(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	var in blockRequest
	if err := wire.DecodeStrict(body, &in, ""); err != nil {
		writeError(w, err)
		return
	}
	tenant := r.PathValue("id")
	key, err := h.blockKey(r, tenant, in)
	if err != nil {
		writeError(w, err)
		return
	}
	if in.Seconds < 1 || in.Seconds > int64(maxBlock/time.Second) {
		writeError(w, sluice.Invalid("seconds", "must be 1 to %d (30 days), got %d", int64(maxBlock/time.Second), in.Seconds))
		return
	}
	if len(in.Reason) > 256 || !utf8.ValidString(in.Reason) {
		writeError(w, sluice.Invalid("reason", "must be UTF-8 of at most 256 bytes"))
		return
	}
	now := h.opts.Now().UTC()
	b := sluice.KeyBlock{Policy: in.Policy, Key: key, Until: now.Add(time.Duration(in.Seconds) * time.Second),
		Reason: in.Reason, By: actor(r, who), At: now}
	before, after, err := h.changeBlocks(r.Context(), tenant, func(bs []sluice.KeyBlock) []sluice.KeyBlock {
		bs = slices.DeleteFunc(bs, func(o sluice.KeyBlock) bool { return o.Policy == b.Policy && o.Key == b.Key })
		return append(bs, b)
	})
	if err != nil {
		writeError(w, err)
		return
	}
	h.audit(r, who, "block", tenant, h.blocksOut(before), h.blocksOut(after))
	writeJSON(w, http.StatusCreated, h.blockOut(b))
}

func (h *Handler) lift(w http.ResponseWriter, r *http.Request, who principal) {
	if !who.admin {
		writeError(w, errAdminOnly)
		return
	}
	tenant := r.PathValue("id")
	q := r.URL.Query()
	if !q.Has("key") {
		writeError(w, sluice.Invalid("key", "is required: the key as the abuse view lists it"))
		return
	}
	given := q.Get("key")
	in := blockRequest{Policy: q.Get("policy"), Key: &given}
	key, err := h.blockKey(r, tenant, in)
	if err != nil {
		writeError(w, err)
		return
	}
	// A tenant of the file without a record has no block to lift: its
	// penalty box is lifted all the same.
	var before, after []sluice.KeyBlock
	if t, lerr := h.tenants.Lookup(r.Context(), tenant); lerr != nil {
		err = lerr
	} else if t.Record != nil {
		before, after, err = h.changeBlocks(r.Context(), tenant, func(bs []sluice.KeyBlock) []sluice.KeyBlock {
			return slices.DeleteFunc(bs, func(o sluice.KeyBlock) bool { return o.Policy == in.Policy && o.Key == key })
		})
	}
	if err != nil {
		writeError(w, err)
		return
	}
	penalty := false
	if kk, ok := h.opts.Limiter.(KeyKeeper); ok {
		rs, _, _, rerr := h.resolve(r, tenant, "", []string{in.Policy})
		if err = rerr; err == nil {
			penalty, err = kk.Lift(r.Context(), tenant, sluice.Check{Policy: rs[0].Policy, Key: key})
		}
	}
	h.audit(r, who, "lift", tenant, h.blocksOut(before), h.blocksOut(after)) // the block is gone, whatever the box
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"lifted": true, "block": len(before) != len(after), "penalty": penalty})
}

// blockKey checks a block's policy and tenant and returns the key it
// names: given whole, or built from its parts as a check builds it.
func (h *Handler) blockKey(r *http.Request, tenant string, in blockRequest) (string, error) {
	if !sluice.ValidID(tenant) {
		return "", sluice.Invalid("id", "is not a valid tenant id")
	}
	cfg := h.opts.Config()
	if _, ok := cfg.Policies[in.Policy]; !ok {
		return "", sluice.Invalid("policy", "%q is not a configured policy: blocks apply to configured policies", in.Policy)
	}
	var key string
	switch {
	case in.Key != nil && in.Parts != nil:
		return "", sluice.Invalid("parts", "give key or parts, not both")
	case in.Key != nil:
		// As the API shows it ("user=bot-7"), or the counter's key itself.
		key = *in.Key
		if raw, ok := tenancy.ParseReadableKey(cfg.Policies[in.Policy].Key, key); ok {
			key = raw
		}
	case in.Parts != nil:
		rs, _, _, err := h.resolve(r, tenant, "", []string{in.Policy})
		if err != nil {
			return "", err
		}
		for _, name := range rs[0].Key {
			// Every part, ip too: a check fills in its client's address,
			// which here would be the operator's.
			if _, ok := in.Parts[name]; !ok {
				return "", sluice.Invalid("parts."+name, "is needed by policy %q", in.Policy)
			}
		}
		if key, err = h.counterKey(r, rs[0], in.Parts); err != nil {
			return "", sluice.Invalid("parts", "%s", err.(*sluice.Error).Message)
		}
	default:
		return "", sluice.Invalid("key", "is required: the key as the abuse view lists it, or its parts")
	}
	switch {
	case len(key) > sluice.MaxKeyLen:
		return "", sluice.Invalid("key", "is %d bytes, at most %d", len(key), sluice.MaxKeyLen)
	case !utf8.ValidString(key):
		// JSON, on the wire and in the tenant's record, keeps UTF-8
		// only: such a block could not be read back, nor lifted.
		return "", sluice.Invalid("key", "is not valid UTF-8 (a key part of 128 bytes or more is, in its length): such keys cannot be blocked yet")
	}
	return key, nil
}

// changeBlocks rewrites tenant's live blocks with change, dropping the
// ended ones, and returns the live ones before and those after. The write
// is over the version read (updateTenant): two blocks made at once, on one
// node or two, both stay.
func (h *Handler) changeBlocks(ctx context.Context, tenant string, change func([]sluice.KeyBlock) []sluice.KeyBlock) (before, after []sluice.KeyBlock, err error) {
	now := h.opts.Now()
	// A tenant of the file holds its blocks in a record of its own.
	if err := h.tenants.Adopt(ctx, tenant); err != nil {
		return nil, nil, err
	}
	_, t, err := h.tenants.Update(ctx, tenant, func(t sluice.Tenant) (sluice.Tenant, error) {
		before = slices.DeleteFunc(slices.Clone(t.Blocks), func(b sluice.KeyBlock) bool { return !now.Before(b.Until) })
		t.Blocks = change(slices.Clone(before))
		if len(t.Blocks) == 0 {
			t.Blocks = nil
		}
		t.UpdatedAt = now.UTC()
		return t, t.Validate()
	})
	if err != nil {
		return nil, nil, err
	}
	return before, t.Blocks, nil
}

func (h *Handler) listAudit(w http.ResponseWriter, r *http.Request, who principal) {
	tenant := r.PathValue("id")
	if !who.can(tenant) {
		writeError(w, errForbidden)
		return
	}
	n := 50
	if v := r.URL.Query().Get("n"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 || n > 500 {
			writeError(w, sluice.Invalid("n", "must be 1 to 500, got %q", v))
			return
		}
	}
	entries, err := h.opts.Audit.ListAudit(r.Context(), tenant, n)
	if err != nil {
		writeError(w, err)
		return
	}
	if !who.admin {
		// A tenant's key reads its own tenant's trail: not that of an
		// earlier, deleted tenant of the same id, nor the operators'
		// names.
		t, err := h.readTenant(r.Context(), tenant)
		if err != nil && sluice.KindOf(err) != sluice.KindNotFound {
			writeError(w, err)
			return
		}
		created := t.CreatedAt
		entries = slices.DeleteFunc(entries, func(e sluice.AuditEntry) bool { return e.At.Before(created) })
		for i := range entries {
			e := &entries[i]
			e.Actor = operator(e.Actor)
			e.Before, e.After = hideOperators(e.Before), hideOperators(e.After)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"entries": entries})
}

// operator returns who made a change as a tenant may read it: "admin"
// for any operator (their names, ActorHeader, are the operators' own).
func operator(by string) string {
	if strings.HasPrefix(by, "admin") {
		return "admin"
	}
	return by
}

// hideOperators returns a recorded state with the operators' names in it
// (blocks' "by") as a tenant may read them (operator).
func hideOperators(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return raw
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil // not ours to show if it cannot be read
	}
	var walk func(v any) any
	walk = func(v any) any {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if by, ok := e.(string); ok && k == "by" {
					x[k] = operator(by)
				} else {
					x[k] = walk(e)
				}
			}
		case []any:
			for i := range x {
				x[i] = walk(x[i])
			}
		}
		return v
	}
	b, err := json.Marshal(walk(v))
	if err != nil {
		return nil
	}
	return b
}

// audit records a change after it is made. A failure to record it is
// logged: the change stands, and the log says what the trail misses.
func (h *Handler) audit(r *http.Request, who principal, action, tenant string, before, after any) {
	e := sluice.AuditEntry{At: h.opts.Now().UTC(), Actor: actor(r, who), Action: action, Tenant: tenant,
		Before: auditJSON(before), After: auditJSON(after)}
	// The change is made: record it even if the client has gone.
	ctx, cancel := h.storeCtx(context.WithoutCancel(r.Context()))
	defer cancel()
	if err := h.opts.Audit.AppendAudit(ctx, e); err != nil {
		h.log.Error("audit trail: recording a change failed", "tenant", tenant, "action", action, "actor", e.Actor, "err", err)
	}
}

func auditJSON(v any) json.RawMessage {
	if v == nil {
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil || string(b) == "null" {
		return nil
	}
	return b
}

// keyLabel is a configured policy's counter key as people read it and
// the API shows it ("user=bot-7", tenancy.ReadableKey); any other key as
// it is.
func (h *Handler) keyLabel(policy, key string) string {
	if p, ok := h.opts.Config().Policies[policy]; ok {
		if s, ok := tenancy.ReadableKey(p.Key, key); ok {
			return s
		}
	}
	return key
}
