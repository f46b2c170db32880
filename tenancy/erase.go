package tenancy

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
)

// Erasing one key's state on request (docs/privacy.md): its counters and
// penalty boxes (the engine's, through the store), its blocks, what the
// dashboard holds of it (OnKeyErased), and a record in the audit trail that
// names the key by its pseudonym, or, without pseudonyms, by its parts'
// names alone, never as given.

// EraseRequest names one key of a tenant to erase: by its parts as a
// check sends them (Parts; under pseudonymised keys the server makes
// them pseudonyms), as the API lists it ("user=bot-7", or "user=~Ab3…"
// under pseudonymised keys: Key), or as an inline check's key (KeyValue,
// as /v1/check's checks[].key takes it). Give one. With KeyValue, Inline
// names the inline policies it was checked under: a store that cannot
// find a key's counters by its value alone (DynamoDB) erases those.
type EraseRequest struct {
	Parts    map[string]string `json:"parts"`
	Key      *string           `json:"key"`
	KeyValue *string           `json:"keyValue"`
	Inline   []InlineRef       `json:"inline"`
}

// InlineRef names an inline policy's counters: its name and algorithm.
type InlineRef struct {
	Name      string           `json:"name"`
	Algorithm sluice.Algorithm `json:"algorithm"`
}

// Erased says what an erase deleted, as the API answers it and the audit
// trail records it. Under pseudonymised keys, Keys are the keys as the API
// lists them; without, it holds no trace of the key (not even a hash, which
// a tenant reading its trail could reverse by trying addresses): the names
// of its parts (PartNames: "user"; none for an inline key) and how many
// counter keys it named (KeyCount). Counters are the states the store
// deleted (counters, penalty boxes; leases are in their counters), Blocks
// the blocks lifted. Partial marks an erase that failed part-way, Failed
// saying where ("blocks", "counters"): what it had done is recorded, and a
// retry does the rest.
type Erased struct {
	Keys      []string `json:"keys,omitempty"`
	PartNames []string `json:"partNames"`
	KeyCount  int      `json:"keyCount"`
	Counters  int      `json:"counters"`
	Blocks    int      `json:"blocks"`
	Partial   bool     `json:"partial,omitempty"`
	Failed    string   `json:"failed,omitempty"`
}

// EraseFunc deletes the state of tenant's key value: the engine's Erase.
type EraseFunc func(ctx context.Context, tenant, value string, checks []sluice.Check) (int, error)

// Erase erases a key of tenant as in names it, for the admin, and
// records it in the audit trail. A tenant's key may not: an erase starts
// the key's counters anew and lifts its blocks, which would let a tenant
// lift the operator's limits of its own keys.
//
// The blocks go first (one write of the tenant's record), then the
// counters, key by key. An erase that fails part-way (a store down, a
// deadline) is recorded all the same, marked partial with what it did; it
// is idempotent, so the caller retries it.
func (s *Service) Erase(ctx context.Context, a Actor, tenant string, in EraseRequest, erase EraseFunc) (Erased, error) {
	if err := a.AdminOnly(); err != nil {
		return Erased{}, err
	}
	if !sluice.ValidID(tenant) {
		return Erased{}, sluice.Invalid("id", "is not a valid tenant id")
	}
	t, err := s.View(ctx, tenant)
	if err != nil {
		return Erased{}, err
	}
	keys, err := s.erasedKeys(t, in)
	if err != nil {
		return Erased{}, err
	}
	values := slices.Sorted(maps.Keys(keys))
	out := Erased{PartNames: []string{}, KeyCount: len(values)}
	if in.KeyValue == nil { // a configured policy's key, of parts
		out.PartNames = partNames(values[0])
	}
	if s.Pseudonymised() {
		for _, v := range values {
			out.Keys = append(out.Keys, s.erasedLabel(v, keys[v]))
		}
	}
	failed := func(where string, err error) (Erased, error) {
		out.Partial, out.Failed = true, where
		s.audit(ctx, a, "erase", tenant, nil, out)
		return out, err
	}
	if t.Record != nil && len(t.Record.Blocks) > 0 {
		before, after, err := s.changeBlocks(ctx, tenant, func(bs []sluice.KeyBlock) []sluice.KeyBlock {
			return slices.DeleteFunc(bs, func(b sluice.KeyBlock) bool { _, ok := keys[b.Key]; return ok })
		})
		if err != nil {
			return failed("blocks", err)
		}
		out.Blocks = len(before) - len(after)
	}
	s.keyErased(tenant, values)
	for _, v := range values {
		n, err := erase(ctx, tenant, v, keys[v])
		out.Counters += n
		if err != nil {
			return failed("counters", err)
		}
	}
	s.audit(ctx, a, "erase", tenant, nil, out)
	return out, nil
}

// partNames are the names of a configured policy's counter key's parts,
// in order.
func partNames(key string) []string {
	names := []string{}
	for raw := key; raw != ""; {
		name, _, rest, ok := nextPart(raw)
		if !ok {
			return []string{}
		}
		names, raw = append(names, name), rest
	}
	return names
}

// erasedKeys resolves in into the counter keys it names, each with the
// checks of the configured policies keyed by it.
func (s *Service) erasedKeys(t Tenant, in EraseRequest) (map[string][]sluice.Check, error) {
	if in.Inline != nil && in.KeyValue == nil {
		return nil, sluice.Invalid("inline", "names inline policies of keyValue: give keyValue")
	}
	given := 0
	for _, b := range []bool{in.Parts != nil, in.Key != nil, in.KeyValue != nil} {
		if b {
			given++
		}
	}
	if given != 1 {
		return nil, sluice.Invalid("parts", "is missing: give one of parts (a check's key parts), key (as the API lists it) or keyValue (an inline check's key)")
	}
	if in.KeyValue != nil {
		if len(*in.KeyValue) > sluice.MaxKeyLen {
			return nil, sluice.Invalid("keyValue", "is %d bytes, at most %d", len(*in.KeyValue), sluice.MaxKeyLen)
		}
		// Inline policies: named by their callers, found by the store if
		// it can (sluice.KeyEraser), else as in.Inline names them.
		v := s.HideKey(t.ID, *in.KeyValue)
		checks := make([]sluice.Check, len(in.Inline))
		for i, p := range in.Inline {
			if !sluice.ValidPolicyName(p.Name) {
				return nil, sluice.Invalid(fmt.Sprintf("inline[%d].name", i), "is not a valid policy name")
			}
			checks[i] = sluice.Check{Policy: sluice.Policy{Name: p.Name, Algorithm: p.Algorithm}, Key: v, Space: sluice.SpaceInline}
		}
		return map[string][]sluice.Check{v: checks}, nil
	}
	limits, err := t.Limits()
	if err != nil {
		return nil, err
	}
	keys := map[string][]sluice.Check{}
	for _, l := range limits {
		var v string
		var ok bool
		if in.Key != nil {
			if v, ok = ParseReadableKey(l.Key, *in.Key); ok {
				if err := s.listedPseudonyms(v); err != nil {
					return nil, err
				}
			}
		} else if ok = len(l.Key) == len(in.Parts) && len(l.Key) > 0; ok {
			for _, name := range l.Key {
				_, has := in.Parts[name]
				ok = ok && has
			}
			if ok {
				v, err = CounterKey(config.Resolved{Key: l.Key}, s.hide(t.ID, KeyParts{Parts: in.Parts}))
				ok = err == nil
			}
		}
		if ok {
			keys[v] = append(keys[v], sluice.Check{Policy: l.Policy, Key: v, Epoch: t.Epoch()})
		}
	}
	if len(keys) == 0 {
		field := "parts"
		if in.Key != nil {
			field = "key"
		}
		return nil, sluice.Invalid(field, "names no key of a configured policy of the tenant: a policy's key parts, every one and no other")
	}
	return keys, nil
}

// erasedLabel names an erased key, under pseudonymised keys, in the
// answer and the audit trail: as the API lists it.
func (s *Service) erasedLabel(value string, checks []sluice.Check) string {
	if len(checks) > 0 {
		return s.KeyLabel(checks[0].Policy.Name, value)
	}
	return value
}
