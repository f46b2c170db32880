// Package engine decides requests: it validates them, scopes every key by
// tenant and policy, reads the clock once, and asks the store to apply all of
// a request's checks in one atomic operation.
package engine

import (
	"context"
	"fmt"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
)

// Options configures an Engine. The zero Options are the defaults.
type Options struct {
	// Now is the clock, read once per decision. Default time.Now.
	Now func() time.Time
}

// Engine is the in-process sluice.Limiter. It is safe for concurrent use.
type Engine struct {
	store sluice.Store
	one   oneApplier // store's single-op path, if it has one
	now   func() time.Time
	pool  sync.Pool // *batch
}

// oneApplier is the optional single-op path of a store: Apply for one op,
// without slices, so that a decision on a key already held allocates
// nothing.
type oneApplier interface {
	ApplyOne(ctx context.Context, now time.Time, op sluice.Op) (sluice.Decision, error)
}

// batch is the scratch space of one decision, pooled so that a decision on
// a key already held allocates nothing.
type batch struct {
	ops [sluice.MaxChecks]sluice.Op
	dst [sluice.MaxChecks]sluice.Decision
}

var _ sluice.Limiter = (*Engine)(nil)

// New returns an Engine deciding on store. The caller still owns the store
// and closes it.
func New(store sluice.Store, opts Options) *Engine {
	if opts.Now == nil {
		opts.Now = newWallClock().now
	}
	e := &Engine{store: store, now: opts.Now}
	e.one, _ = store.(oneApplier)
	e.pool.New = func() any { return new(batch) }
	return e
}

// Check decides req all-or-nothing: it is admitted only if every check
// admits req.Hits, and otherwise consumes from none. Invalid input returns a
// KindInvalid *sluice.Error naming the field, and nothing is counted.
func (e *Engine) Check(ctx context.Context, req sluice.Request) (sluice.Result, error) {
	if err := validateRequest(&req); err != nil {
		return sluice.Result{}, sluice.WithOp("engine.check", err)
	}
	b := e.pool.Get().(*batch)
	defer e.pool.Put(b)
	ops, dst := b.ops[:len(req.Checks)], b.dst[:len(req.Checks)]
	for i := range req.Checks {
		c := &req.Checks[i]
		ops[i] = sluice.Op{Key: sluice.Key{Tenant: req.Tenant, Policy: c.Policy.Name, Value: c.Key}, Policy: &c.Policy, Hits: req.Hits}
	}
	err := e.store.Apply(ctx, e.now(), ops, dst)
	clear(ops) // drop references to the request before pooling
	if err != nil {
		return sluice.Result{}, sluice.WithOp("engine.check", err)
	}
	res := sluice.Result{Decisions: make([]sluice.Decision, len(dst))}
	copy(res.Decisions, dst)
	res.Decision, res.Allowed = sluice.Reporting(res.Decisions)
	return res, nil
}

// Allow decides hits against a single policy for key, the common case of a
// middleware. On a key already held it allocates nothing.
func (e *Engine) Allow(ctx context.Context, tenant string, p *sluice.Policy, key string, hits int64) (sluice.Decision, error) {
	if err := validateOne(tenant, p, key, hits); err != nil {
		return sluice.Decision{}, sluice.WithOp("engine.allow", err)
	}
	op := sluice.Op{Key: sluice.Key{Tenant: tenant, Policy: p.Name, Value: key}, Policy: p, Hits: hits}
	var d sluice.Decision
	var err error
	if e.one != nil {
		d, err = e.one.ApplyOne(ctx, e.now(), op)
	} else {
		b := e.pool.Get().(*batch)
		b.ops[0] = op
		err = e.store.Apply(ctx, e.now(), b.ops[:1], b.dst[:1])
		d, b.ops[0] = b.dst[0], sluice.Op{}
		e.pool.Put(b)
	}
	if err != nil {
		return sluice.Decision{}, sluice.WithOp("engine.allow", err)
	}
	return d, nil
}

// Release returns the units of a lease taken by an allowed Check of a
// concurrency policy. It returns sluice.ErrLeaseNotFound (KindNotFound) if
// the lease was released or has expired.
func (e *Engine) Release(ctx context.Context, tenant string, c sluice.Check, lease uint64) (sluice.Decision, error) {
	if err := validateLease(tenant, &c); err != nil {
		return sluice.Decision{}, sluice.WithOp("engine.release", err)
	}
	d, err := e.store.Release(ctx, e.now(), sluice.Key{Tenant: tenant, Policy: c.Policy.Name, Value: c.Key}, &c.Policy, lease)
	return d, sluice.WithOp("engine.release", err)
}

// Renew extends a lease to now plus the policy's lease TTL. It returns
// sluice.ErrLeaseNotFound (KindNotFound) if the lease was released or has
// expired: an expired lease's units may already be held by another.
func (e *Engine) Renew(ctx context.Context, tenant string, c sluice.Check, lease uint64) (sluice.Decision, error) {
	if err := validateLease(tenant, &c); err != nil {
		return sluice.Decision{}, sluice.WithOp("engine.renew", err)
	}
	d, err := e.store.Renew(ctx, e.now(), sluice.Key{Tenant: tenant, Policy: c.Policy.Name, Value: c.Key}, &c.Policy, lease)
	return d, sluice.WithOp("engine.renew", err)
}

func validateRequest(req *sluice.Request) error {
	if err := validateTenant(req.Tenant); err != nil {
		return err
	}
	if len(req.Checks) == 0 || len(req.Checks) > sluice.MaxChecks {
		return sluice.Invalid("checks", "must hold 1 to %d checks, got %d", sluice.MaxChecks, len(req.Checks))
	}
	if req.Hits < 0 || req.Hits > sluice.MaxHits {
		return sluice.Invalid("hits", "must be between 0 and %d, got %d", sluice.MaxHits, req.Hits)
	}
	for i := range req.Checks {
		c := &req.Checks[i]
		if err := validateCheck(c.Policy.Validate(), &c.Policy, c.Key, req.Hits); err != nil {
			return err.In(fmt.Sprintf("checks[%d]", i))
		}
	}
	return nil
}

// validateCheck checks a check's key and that hits can ever fit its policy;
// perr is the policy's own validation error.
func validateCheck(perr error, p *sluice.Policy, key string, hits int64) *sluice.Error {
	if perr != nil {
		return perr.(*sluice.Error).In("policy")
	}
	if len(key) > sluice.MaxKeyLen {
		return sluice.Invalid("key", "is %d bytes, at most %d allowed", len(key), sluice.MaxKeyLen)
	}
	if c := algo.Capacity(p); hits > c {
		// Never admissible: a denial would invite endless retries.
		return sluice.Invalid("hits", "%d exceed the capacity %d of policy %q", hits, c, p.Name)
	}
	return nil
}

func validateOne(tenant string, p *sluice.Policy, key string, hits int64) error {
	if err := validateTenant(tenant); err != nil {
		return err
	}
	if hits < 0 {
		return sluice.Invalid("hits", "must not be negative, got %d", hits)
	}
	if err := validateCheck(p.Validate(), p, key, hits); err != nil {
		return err
	}
	return nil
}

func validateLease(tenant string, c *sluice.Check) error {
	if err := validateOne(tenant, &c.Policy, c.Key, 0); err != nil {
		return err
	}
	if c.Policy.Algorithm != sluice.Concurrency {
		return sluice.Invalid("policy.algorithm", "must be concurrency to hold leases, got %s", c.Policy.Algorithm)
	}
	return nil
}

func validateTenant(tenant string) error {
	if tenant == "" || len(tenant) > sluice.MaxTenantLen || !utf8.ValidString(tenant) {
		return sluice.Invalid("tenant", "must be 1 to %d bytes of UTF-8", sluice.MaxTenantLen)
	}
	return nil
}
