package engine

import (
	"context"

	"github.com/sluicehq/sluice"
)

// Prepared decides by key under one policy of one tenant, which Prepare
// validated and scoped once: a decision checks only its key's length and
// its hits, reads the clock, and asks the store. It decides exactly as
// Engine.Allow does with the same tenant and policy, on the same counters.
// It is safe for concurrent use.
type Prepared struct {
	e        *Engine
	tenant   string
	policy   sluice.Policy // the caller's, copied: it cannot change under us
	capacity int64
	// apply is the store's decision function for the policy's keys
	// (memstore's Scope), nil if the store has none or if a decision
	// needs the general path (Engine.general).
	apply func(ctx context.Context, now int64, value string, hits int64) (sluice.Decision, error)
}

// scoper is the optional prepared path of a store (memstore.Store.Scope):
// the decision function of the keys of one tenant, space and policy, or nil.
type scoper interface {
	Scope(tenant string, space sluice.Space, p *sluice.Policy) func(ctx context.Context, now int64, value string, hits int64) (sluice.Decision, error)
}

// Prepare validates tenant and p once and returns a limiter deciding by key
// under p for tenant, in the key space of Allow (sluice.SpacePolicy). Bad
// input returns a KindInvalid *sluice.Error naming the field. The policy is
// copied: later changes to p do not reach the Prepared.
func (e *Engine) Prepare(tenant string, p sluice.Policy) (*Prepared, error) {
	if err := validateOne(tenant, &p, "", 0); err != nil {
		return nil, sluice.WithOp("engine.prepare", err)
	}
	pr := &Prepared{e: e, tenant: tenant, policy: p, capacity: p.Capacity()}
	if s, ok := e.store.(scoper); ok && !e.general(&pr.policy) {
		pr.apply = s.Scope(tenant, sluice.SpacePolicy, &pr.policy)
	}
	return pr, nil
}

// Allow decides hits against the prepared policy for key, as Engine.Allow
// does: a key longer than sluice.MaxKeyLen, or hits below zero or above the
// policy's capacity, return a KindInvalid *sluice.Error naming the field;
// when the store fails, the policy's fail mode decides. On a key already
// held it allocates nothing.
func (p *Prepared) Allow(ctx context.Context, key string, hits int64) (sluice.Decision, error) {
	// One unsigned comparison rejects negative hits too.
	if len(key) > sluice.MaxKeyLen || uint64(hits) > uint64(p.capacity) {
		return sluice.Decision{}, sluice.WithOp("engine.allow", validateOne(p.tenant, &p.policy, key, hits))
	}
	if p.apply == nil {
		return p.e.allow(ctx, p.tenant, &p.policy, key, hits)
	}
	d, err := p.apply(ctx, p.e.unixNano(), key, hits)
	if err != nil {
		return p.e.allowFailed(p.tenant, &p.policy, key, err)
	}
	return d, nil
}

// unixNano reads the engine's clock in Unix nanoseconds, without a
// time.Time when it is the wall clock.
func (e *Engine) unixNano() int64 {
	if e.clock != nil {
		return e.clock.unixNano()
	}
	return e.now().UnixNano()
}
