package tenancy

import (
	"context"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/pseudo"
)

// The operator's hand on single keys. A block lives in the tenant's
// record (sluice.KeyBlock), read by every request already: it costs no
// store call of its own and takes effect on every node as a tenant change
// does. Blocks and lifts are the admin's: a tenant's key reads its blocks
// and changes none, as they only tighten or loosen what the operator set.

// BlockRequest asks for a block of one key of a configured policy: the
// key as the API lists it (Key), or by its parts, as a check names them
// (Parts), for Seconds.
type BlockRequest struct {
	Policy  string            `json:"policy"`
	Key     *string           `json:"key"`
	Parts   map[string]string `json:"parts"`
	Seconds int64             `json:"seconds"`
	Reason  string            `json:"reason"`
}

// Block is a block as the API shows it and the audit trail records it,
// its key readable ("user=bot-7"): the same in Key and in Label.
type Block struct {
	sluice.KeyBlock
	Key   string `json:"key"`
	Label string `json:"label"`
}

// blockOut is b as people read it.
func (s *Service) blockOut(b sluice.KeyBlock) Block {
	k := s.KeyLabel(b.Policy, b.Key)
	return Block{b, k, k}
}

// blocksOut is bs as the audit trail keeps them: keys readable.
func (s *Service) blocksOut(bs []sluice.KeyBlock) []Block {
	if bs == nil {
		return nil // null in the trail, as before
	}
	out := make([]Block, len(bs))
	for i, b := range bs {
		out[i] = s.blockOut(b)
	}
	return out
}

// maxBlock is the longest block: a longer one is a limit to set.
const maxBlock = 30 * 24 * time.Hour

// Blocks returns stored tenant's live blocks, for who: a tenant's key
// reads the operators' names as "admin".
func (s *Service) Blocks(ctx context.Context, who Principal, tenant string) ([]Block, error) {
	if !who.Can(tenant) {
		return nil, ErrForbidden
	}
	// A tenant of the file alone has no record, and so no blocks yet.
	t, err := s.Lookup(ctx, tenant)
	if err != nil {
		return nil, err
	}
	now := s.opts.Now()
	out := []Block{}
	if t.Record == nil {
		return out, nil
	}
	for _, b := range t.Record.Blocks {
		if now.Before(b.Until) {
			if !who.Admin {
				b.By = operator(b.By)
			}
			out = append(out, s.blockOut(b))
		}
	}
	return out, nil
}

// Block blocks a key of tenant as in asks, for the admin, in place of
// any block of that key, and records it in the audit trail.
func (s *Service) Block(ctx context.Context, a Actor, tenant string, in BlockRequest) (Block, error) {
	if err := a.AdminOnly(); err != nil {
		return Block{}, err
	}
	key, err := s.blockKey(ctx, tenant, in)
	if err != nil {
		return Block{}, err
	}
	if in.Seconds < 1 || in.Seconds > int64(maxBlock/time.Second) {
		return Block{}, sluice.Invalid("seconds", "must be 1 to %d (30 days), got %d", int64(maxBlock/time.Second), in.Seconds)
	}
	if len(in.Reason) > 256 || !utf8.ValidString(in.Reason) {
		return Block{}, sluice.Invalid("reason", "must be UTF-8 of at most 256 bytes")
	}
	now := s.opts.Now().UTC()
	b := sluice.KeyBlock{Policy: in.Policy, Key: key, Until: now.Add(time.Duration(in.Seconds) * time.Second),
		Reason: in.Reason, By: a.String(), At: now}
	before, after, err := s.changeBlocks(ctx, tenant, func(bs []sluice.KeyBlock) []sluice.KeyBlock {
		bs = slices.DeleteFunc(bs, func(o sluice.KeyBlock) bool { return o.Policy == b.Policy && o.Key == b.Key })
		return append(bs, b)
	})
	if err != nil {
		return Block{}, err
	}
	s.audit(ctx, a, "block", tenant, s.blocksOut(before), s.blocksOut(after))
	return s.blockOut(b), nil
}

// Lifted says what a lift ended: a block, a penalty box's block.
type Lifted struct {
	Block, Penalty bool
}

// LiftRequest names the key whose block and penalty box a lift ends, as
// BlockRequest names it: as the API lists it (Key) or by its parts.
type LiftRequest struct {
	Policy string            `json:"policy"`
	Key    *string           `json:"key"`
	Parts  map[string]string `json:"parts"`
}

// Lift ends the block of the key in names (as the API lists it, the
// counter's key, or by its parts) under its policy of tenant, for the
// admin, and records it in the audit trail; with box (the engine's), it
// lifts the key's penalty box too. A tenant of the file without a record
// has no block to lift, and gets none: its penalty box is lifted all the
// same.
func (s *Service) Lift(ctx context.Context, a Actor, tenant string, in LiftRequest,
	box func(ctx context.Context, tenant string, c sluice.Check) (bool, error)) (Lifted, error) {
	if err := a.AdminOnly(); err != nil {
		return Lifted{}, err
	}
	policy := in.Policy
	key, err := s.blockKey(ctx, tenant, BlockRequest{Policy: policy, Key: in.Key, Parts: in.Parts})
	if err != nil {
		return Lifted{}, err
	}
	// One read of the tenant serves the block and the box: a change of
	// its blocks leaves its epoch and its policies as they are.
	t, err := s.Lookup(ctx, tenant)
	if err != nil {
		return Lifted{}, err
	}
	var before, after []sluice.KeyBlock
	if t.Record != nil {
		before, after, err = s.changeBlocks(ctx, tenant, func(bs []sluice.KeyBlock) []sluice.KeyBlock {
			return slices.DeleteFunc(bs, func(o sluice.KeyBlock) bool { return o.Policy == policy && o.Key == key })
		})
		if err != nil {
			return Lifted{}, err
		}
	}
	out := Lifted{Block: len(before) != len(after)}
	if box != nil {
		// The box is the tenant's as created last (its epoch).
		rs, rerr := t.Resolve("", []string{policy})
		if err = rerr; err == nil {
			out.Penalty, err = box(ctx, tenant, sluice.Check{Policy: rs[0].Policy, Key: key, Epoch: t.Epoch()})
		}
	}
	s.audit(ctx, a, "lift", tenant, s.blocksOut(before), s.blocksOut(after)) // the block is gone, whatever the box
	return out, err
}

// blockKey checks a block's policy and tenant and returns the key it
// names: given whole, or built from its parts as a check builds it.
func (s *Service) blockKey(ctx context.Context, tenant string, in BlockRequest) (string, error) {
	if !sluice.ValidID(tenant) {
		return "", sluice.Invalid("id", "is not a valid tenant id")
	}
	cfg := s.opts.Config()
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
		if raw, ok := ParseReadableKey(cfg.Policies[in.Policy].Key, key); ok {
			key = raw
		}
		if err := s.listedPseudonyms(key); err != nil {
			return "", err
		}
	case in.Parts != nil:
		t, _ := s.View(ctx, tenant)
		rs, err := t.Resolve("", []string{in.Policy})
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
		if key, err = CounterKey(rs[0], s.hide(tenant, KeyParts{Parts: in.Parts})); err != nil {
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

// listedPseudonyms refuses, under pseudonymised keys, a counter key given
// as the API lists it whose values are not pseudonyms: a raw key there
// would name no counter, and be kept as given in the tenant's record and
// the audit trail. The caller gives the raw key as parts, which the
// server makes pseudonyms. The message does not repeat the key.
func (s *Service) listedPseudonyms(key string) error {
	if !s.Pseudonymised() {
		return nil
	}
	for raw := key; raw != ""; {
		_, v, rest, ok := nextPart(raw)
		if !ok || !pseudo.Is(v) {
			return sluice.Invalid("key", "is not a pseudonymised key (keys are pseudonymised, and the API lists them as user=~Ab3…): give parts, the raw key, which the server makes a pseudonym")
		}
		raw = rest
	}
	return nil
}

// changeBlocks rewrites tenant's live blocks with change, dropping the
// ended ones, and returns the live ones before and those after. The write
// is over the version read (Update): two blocks made at once, on one node
// or two, both stay.
func (s *Service) changeBlocks(ctx context.Context, tenant string, change func([]sluice.KeyBlock) []sluice.KeyBlock) (before, after []sluice.KeyBlock, err error) {
	now := s.opts.Now()
	// A tenant of the file holds its blocks in a record of its own.
	if err := s.Adopt(ctx, tenant); err != nil {
		return nil, nil, err
	}
	_, t, err := s.Update(ctx, tenant, func(t sluice.Tenant) (sluice.Tenant, error) {
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
