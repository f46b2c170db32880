// Package engine decides requests: it validates them, scopes every key by
// tenant and policy, reads the clock once, and asks the store to apply all of
// a request's checks in one atomic operation.
//
// Three entry points, from the most general to the fastest:
//
//   - Engine.Check decides a request against up to sluice.MaxChecks
//     policies at once, all or nothing, with operators' blocks.
//   - Engine.Allow decides one policy for one key, validating the tenant
//     and the policy on every call.
//   - Engine.Prepare validates a tenant and a policy once and returns a
//     Prepared, whose Allow decides by key: the common case of an
//     in-process caller holding one limiter per policy. On the memory
//     store it asks the store's scope of the policy's keys
//     (memstore.Store.Scope), which hashes and compares only the key's
//     value.
//
// Allow and Prepared.Allow decide alike, on the same counters; a policy with
// a shadow or a penalty, or an engine with a deadline or an observer, takes
// Check's path for them.
package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/internal/logevery"
)

// Options configures an Engine. The zero Options are the defaults.
type Options struct {
	// Now is the clock, read once per decision. Default: the wall clock.
	Now func() time.Time
	// Timeout is the deadline of one decision's store operation; past it,
	// each policy's fail mode decides. Zero means none, for stores that
	// never wait (memstore).
	Timeout time.Duration
	// Observer is told of every decision, for metrics. Optional.
	Observer Observer
	// Logger receives store failures. Default: discard.
	Logger *slog.Logger
}

// Observer is told what the engine decides, for metrics. It must be safe
// for concurrent use and fast.
type Observer interface {
	// Decided is called once per policy of every decided request.
	Decided(policy string, o Outcome)
	// StoreDone is called after every store operation.
	StoreDone(d time.Duration, err error)
}

// KeyObserver, if an Observer implements it, is also told each policy's
// decision with its tenant, check (policy and key) and hits: what an
// operator's dashboard counts (package insight). It must be safe for
// concurrent use and fast.
type KeyObserver interface {
	DecidedKey(tenant string, c *sluice.Check, hits int64, o Outcome)
}

// Outcome is how a policy's part of a request ended.
type Outcome uint8

// The outcomes.
const (
	Allowed      Outcome = iota // admitted
	Denied                      // denied by the policy
	Penalised                   // denied by the policy's penalty box
	ShadowDenied                // a shadow policy would have denied
	FailedOpen                  // the store failed; admitted by fail mode
	FailedClosed                // the store failed; denied by fail mode
)

func (o Outcome) String() string {
	return [...]string{"allowed", "denied", "penalised", "shadow_denied", "failed_open", "failed_closed"}[o]
}

// Engine is the in-process sluice.Limiter. It is safe for concurrent use.
type Engine struct {
	store   sluice.Store
	one     oneApplier // store's single-op path, if it has one
	now     func() time.Time
	clock   *wallClock // now's, unless Options.Now replaced it
	timeout time.Duration
	obs     Observer
	kobs    KeyObserver // obs, if it is one
	log     *slog.Logger
	pool    sync.Pool // *batch
	// storeLog and boxLog bound the lines of a store's failure, which
	// every request meets during an outage, to one an interval.
	storeLog, boxLog logevery.Gate
}

// oneApplier is the optional single-op path of a store: Apply for one op,
// without slices, so that a decision on a key already held allocates
// nothing.
type oneApplier interface {
	ApplyOne(ctx context.Context, now time.Time, op sluice.Op) (sluice.Decision, error)
}

// batch is the scratch space of one decision, pooled so that a decision on
// a key already held allocates nothing. A request of n checks needs up to
// 2n ops: its checks and their penalty boxes.
type batch struct {
	ops [2 * sluice.MaxChecks]sluice.Op
	dst [2 * sluice.MaxChecks]sluice.Decision
	box [2 * sluice.MaxChecks]sluice.Policy
	idx [2 * sluice.MaxChecks]int // the check of each op
}

var _ sluice.LeaseLimiter = (*Engine)(nil)

// New returns an Engine deciding on store. The caller still owns the store
// and closes it.
func New(store sluice.Store, opts Options) *Engine {
	var clock *wallClock
	if opts.Now == nil {
		clock = newWallClock()
		opts.Now = clock.now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	e := &Engine{store: store, now: opts.Now, clock: clock, timeout: opts.Timeout, obs: opts.Observer, log: opts.Logger}
	e.kobs, _ = opts.Observer.(KeyObserver)
	e.one, _ = store.(oneApplier)
	e.pool.New = func() any { return new(batch) }
	return e
}

// Check decides req all-or-nothing: it is admitted only if every enforced
// check admits req.Hits, and otherwise consumes from none. Invalid input
// returns a KindInvalid *sluice.Error naming the field, and nothing is
// counted.
//
// Beyond the counters: a check whose key is in its penalty box is denied
// until the box opens, and a denial records an offence; shadow checks are
// decided and counted after the enforced ones admit, and never deny; a
// Burn check adds its hits whatever the others decide, in a store
// operation of its own (after the others'), and denies while its count is
// past its limit; when the store fails or misses the deadline, each
// check's fail mode decides, and Check returns the result without an
// error.
func (e *Engine) Check(ctx context.Context, req sluice.Request) (sluice.Result, error) {
	if err := validateRequest(&req); err != nil {
		return sluice.Result{}, sluice.WithOp("engine.check", err)
	}
	now := e.now()
	res := sluice.Result{Decisions: make([]sluice.Decision, len(req.Checks))}
	b := e.pool.Get().(*batch)
	defer e.pool.Put(b)
	defer clear(b.ops[:]) // drop references to the request before pooling

	// Enforced checks, then the penalty boxes of those with a penalty:
	// a boxed key denies the whole request, consuming nothing.
	// A key an operator blocked denies the whole request too: the checks
	// are only read, to report their state.
	hits := req.Hits
	blocked := false
	for i := range req.Checks {
		if c := &req.Checks[i]; !c.Policy.Shadow && c.BlockedUntil.After(now) {
			hits, blocked = 0, true
		}
	}
	// The ops: enforced checks that do not burn, all or nothing; the
	// penalty boxes of the enforced checks; then, in a store operation of
	// their own, the burn checks, whose hits count whatever the others
	// decide (sluice.Check.Burn).
	ops := b.ops[:0]
	idx := b.idx[:0]
	boxes := 0
	for i := range req.Checks {
		if c := &req.Checks[i]; !c.Policy.Shadow && !c.Burn {
			ops = append(ops, op(req.Tenant, c, hits))
			idx = append(idx, i)
		}
	}
	enforced := len(ops)
	for i := range req.Checks {
		if c := &req.Checks[i]; !c.Policy.Shadow && c.Policy.Penalty.Enabled() {
			ops = append(ops, boxOp(req.Tenant, c, &b.box[boxes], 0))
			idx = append(idx, i)
			boxes++
		}
	}
	burns := len(ops)
	for i := range req.Checks {
		if c := &req.Checks[i]; !c.Policy.Shadow && c.Burn {
			ops = append(ops, op(req.Tenant, c, hits))
			idx = append(idx, i)
		}
	}
	dst := b.dst[:len(ops)]
	if burns > 0 {
		if err := e.apply(ctx, now, ops[:burns], dst[:burns]); err != nil {
			return e.failed(req, res, err)
		}
	}
	var failed []bool // the burn checks the store failed, if it did
	if burns < len(ops) {
		if err := e.apply(ctx, now, ops[burns:], dst[burns:]); err != nil {
			if !storeFailure(err) {
				return sluice.Result{}, sluice.WithOp("engine.check", err)
			}
			e.storeLog.Log(e.log, now, slog.LevelWarn, "store failed; fail modes decide", "tenant", req.Tenant, "err", err)
			failed = make([]bool, len(req.Checks))
			for j := burns; j < len(ops); j++ {
				dst[j] = e.failure(req.Tenant, &req.Checks[idx[j]], now, err)
				failed[idx[j]] = true
			}
		}
		for j := burns; j < len(ops); j++ {
			burnt(&dst[j])
		}
	}
	for j := range len(ops) {
		if j < enforced || j >= burns {
			res.Decisions[idx[j]] = dst[j]
		}
	}
	penalised := make([]bool, len(req.Checks))
	for j := enforced; j < burns; j++ {
		if box := dst[j]; !box.Allowed {
			hold(&res.Decisions[idx[j]], box.RetryAfter, box.ResetAt)
			penalised[idx[j]] = true
		}
	}
	if blocked {
		for i := range req.Checks {
			if c := &req.Checks[i]; !c.Policy.Shadow && c.BlockedUntil.After(now) {
				hold(&res.Decisions[i], c.BlockedUntil.Sub(now), c.BlockedUntil)
				penalised[i] = true
			}
		}
	}
	allowed := true
	for i := range req.Checks {
		if req.Checks[i].Policy.Shadow {
			continue
		}
		allowed = allowed && res.Decisions[i].Allowed
		switch {
		case failed != nil && failed[i]: // told the observer already
		case penalised[i]:
			e.observe(req.Tenant, &req.Checks[i], req.Hits, Penalised)
		case res.Decisions[i].Allowed:
			e.observe(req.Tenant, &req.Checks[i], req.Hits, Allowed)
		default:
			e.observe(req.Tenant, &req.Checks[i], req.Hits, Denied)
		}
	}
	if !allowed && !blocked {
		e.recordOffences(ctx, now, req, res.Decisions, b)
	}

	// Shadow checks: each on its own, only if the enforced ones admitted.
	for i := range req.Checks {
		c := &req.Checks[i]
		if !c.Policy.Shadow {
			continue
		}
		hits := hits
		if !allowed && !c.Burn {
			hits = 0 // report its state; consume nothing for a denied request
		}
		ops, dst := b.ops[:1], b.dst[:1]
		ops[0] = op(req.Tenant, c, hits)
		if err := e.apply(ctx, now, ops, dst); err != nil {
			res.Decisions[i] = e.failure(req.Tenant, c, now, err)
			continue
		}
		d := dst[0]
		if c.Burn {
			burnt(&d)
		}
		if d.Allowed {
			e.observe(req.Tenant, c, hits, Allowed)
		} else {
			d.Allowed, d.Shadowed, d.RetryAfter = true, true, 0
			e.observe(req.Tenant, c, req.Hits, ShadowDenied)
		}
		res.Decisions[i] = d
	}
	res.Decision, res.Allowed = sluice.Report(req.Checks, res.Decisions)
	return res, nil
}

// op is check c's op: the request's hits, or the check's own if it has
// them and the request is not a read, and the lease it names.
func op(tenant string, c *sluice.Check, hits int64) sluice.Op {
	if c.Hits > 0 && hits > 0 {
		hits = c.Hits
	}
	return sluice.Op{Key: c.CounterKey(tenant), Policy: &c.Policy, Hits: hits, Lease: c.Lease, DeadOwners: c.DeadOwners, RemainingMayLag: c.RemainingMayLag, Burn: c.Burn}
}

// burnt turns a store's decision of a burn op, an admission whatever the
// count (sluice.Op.Burn), into its check's: denied while the count is
// past the limit, which a negative Remaining tells.
func burnt(d *sluice.Decision) {
	if d.Remaining < 0 {
		d.Allowed, d.Remaining = false, 0
	}
}

// boxOp is the op on c's penalty box; box is scratch space for its policy.
// A box is keyed as its check's counter in the space of boxes (BoxKey), so
// that no counter can be taken for a box, nor one policy's box for another's.
func boxOp(tenant string, c *sluice.Check, box *sluice.Policy, hits int64) sluice.Op {
	*box = sluice.Policy{Name: c.Policy.Name, Algorithm: sluice.PenaltyBox, Window: c.Policy.Window, Penalty: c.Policy.Penalty}
	if box.Window == 0 {
		box.Window = c.Policy.EffectiveLeaseTTL()
	}
	return sluice.Op{Key: c.BoxKey(tenant), Policy: box, Hits: hits}
}

// recordOffences puts an offence in the penalty box of every enforced check
// with a penalty that its own policy denied. Best effort: a failure is
// logged, and the request's answer stands.
func (e *Engine) recordOffences(ctx context.Context, now time.Time, req sluice.Request, ds []sluice.Decision, b *batch) {
	ops := b.ops[:0]
	for i := range req.Checks {
		c := &req.Checks[i]
		if c.Policy.Shadow || !c.Policy.Penalty.Enabled() || ds[i].Allowed {
			continue
		}
		ops = append(ops, boxOp(req.Tenant, c, &b.box[len(ops)], 1))
	}
	if len(ops) == 0 {
		return
	}
	if err := e.apply(ctx, now, ops, b.dst[:len(ops)]); err != nil {
		e.boxLog.Log(e.log, now, slog.LevelWarn, "recording penalty offences failed", "tenant", req.Tenant, "err", err)
	}
}

// State reads c's counter and, if its policy has a penalty, its penalty
// box, consuming nothing and telling no observer: for an operator looking
// at a key, not a decision. box is zero without a penalty.
func (e *Engine) State(ctx context.Context, tenant string, c sluice.Check) (counter, box sluice.Decision, err error) {
	if err := validateOne(tenant, &c.Policy, c.Key, 0); err != nil {
		return counter, box, sluice.WithOp("engine.state", err)
	}
	var boxPolicy sluice.Policy
	ops := []sluice.Op{op(tenant, &c, 0)}
	if c.Policy.Penalty.Enabled() {
		ops = append(ops, boxOp(tenant, &c, &boxPolicy, 0))
	}
	dst := make([]sluice.Decision, len(ops))
	if err := e.apply(ctx, e.now(), ops, dst); err != nil {
		return counter, box, sluice.WithOp("engine.state", err)
	}
	if len(dst) == 2 {
		box = dst[1]
	}
	burnt(&dst[0]) // a burn check's read: past the limit is 0 left
	return dst[0], box, nil
}

// Lift ends the penalty of c's key: its penalty box forgets its offences
// and its blocks. It reports whether the key was blocked. A policy without
// a penalty has no box: Lift returns false and writes nothing.
func (e *Engine) Lift(ctx context.Context, tenant string, c sluice.Check) (bool, error) {
	if err := validateTenant(tenant); err != nil {
		return false, sluice.WithOp("engine.lift", err)
	}
	if !c.Policy.Penalty.Enabled() {
		return false, nil
	}
	var box sluice.Policy
	ops := []sluice.Op{boxOp(tenant, &c, &box, algo.Lift)}
	dst := make([]sluice.Decision, 1)
	if err := e.apply(ctx, e.now(), ops, dst); err != nil {
		return false, sluice.WithOp("engine.lift", err)
	}
	return dst[0].RetryAfter > 0, nil
}

// apply runs one store operation under the engine's deadline.
func (e *Engine) apply(ctx context.Context, now time.Time, ops []sluice.Op, dst []sluice.Decision) error {
	if e.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, e.timeout)
		defer cancel()
	}
	start := time.Now()
	err := e.store.Apply(ctx, now, ops, dst)
	if e.obs != nil {
		e.obs.StoreDone(time.Since(start), err)
	}
	return err
}

// failed answers a request whose store operation failed: each check's fail
// mode decides, unless the failure is bad input, which is returned.
func (e *Engine) failed(req sluice.Request, res sluice.Result, err error) (sluice.Result, error) {
	if !storeFailure(err) {
		return sluice.Result{}, sluice.WithOp("engine.check", err)
	}
	now := e.now()
	e.storeLog.Log(e.log, now, slog.LevelWarn, "store failed; fail modes decide", "tenant", req.Tenant, "err", err)
	for i := range req.Checks {
		c := &req.Checks[i]
		if until := c.BlockedUntil; !c.Policy.Shadow && until.After(now) {
			// An operator's block needs no store: it holds.
			res.Decisions[i] = sluice.Decision{Policy: c.Policy.Name, Limit: c.Policy.Capacity()}
			hold(&res.Decisions[i], until.Sub(now), until)
			e.observe(req.Tenant, c, 0, Penalised)
			continue
		}
		res.Decisions[i] = e.failure(req.Tenant, c, now, err)
	}
	res.Decision, res.Allowed = sluice.Report(req.Checks, res.Decisions)
	return res, nil
}

// storeFailure reports whether err is the store failing (unavailable,
// full, past the deadline), for the fail modes to decide.
func storeFailure(err error) bool {
	return sluice.KindOf(err) == sluice.KindUnavailable || errors.Is(err, context.DeadlineExceeded)
}

// failure is check c's decision when the store could not decide: its
// fail mode's, counted.
func (e *Engine) failure(tenant string, c *sluice.Check, now time.Time, err error) sluice.Decision {
	d := c.Failed(now)
	if d.FailedClosed {
		e.observe(tenant, c, 0, FailedClosed)
	} else {
		e.observe(tenant, c, 0, FailedOpen)
	}
	return d
}

func (e *Engine) observe(tenant string, c *sluice.Check, hits int64, o Outcome) {
	if e.obs != nil {
		e.obs.Decided(c.Policy.Name, o)
		if e.kobs != nil {
			e.kobs.DecidedKey(tenant, c, hits, o)
		}
	}
}

// hold denies d until a penalty box or an operator's block opens: it
// waits at least retryAfter and resets no sooner than resetAt.
func hold(d *sluice.Decision, retryAfter time.Duration, resetAt time.Time) {
	d.Allowed, d.RetryAfter, d.Remaining = false, max(d.RetryAfter, retryAfter), 0
	d.ResetAt = maxTime(d.ResetAt, resetAt)
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// Allow decides hits against a single policy for key, the common case of a
// middleware. On a key already held it allocates nothing. A caller that
// decides many keys under one policy saves the policy's validation on each
// decision with Prepare.
func (e *Engine) Allow(ctx context.Context, tenant string, p *sluice.Policy, key string, hits int64) (sluice.Decision, error) {
	if err := validateOne(tenant, p, key, hits); err != nil {
		return sluice.Decision{}, sluice.WithOp("engine.allow", err)
	}
	return e.allow(ctx, tenant, p, key, hits)
}

// allow is Allow on valid input.
func (e *Engine) allow(ctx context.Context, tenant string, p *sluice.Policy, key string, hits int64) (sluice.Decision, error) {
	if e.general(p) {
		res, err := e.Check(ctx, sluice.Request{Tenant: tenant, Hits: hits, Checks: []sluice.Check{{Policy: *p, Key: key}}})
		return res.Decision, err
	}
	op := sluice.Op{Key: sluice.Key{Tenant: tenant, Space: sluice.SpacePolicy, Algorithm: p.Algorithm, Policy: p.Name, Value: key}, Policy: p, Hits: hits}
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
		return e.allowFailed(tenant, p, key, err)
	}
	return d, nil
}

// general reports whether a decision under p needs Check: for its shadow
// or penalty, for the engine's deadline, or to tell the observer.
func (e *Engine) general(p *sluice.Policy) bool {
	return p.Shadow || p.Penalty.Enabled() || e.timeout > 0 || e.obs != nil
}

// allowFailed answers Allow when the store failed with err: the policy's
// fail mode decides, unless the failure is not the store's.
func (e *Engine) allowFailed(tenant string, p *sluice.Policy, key string, err error) (sluice.Decision, error) {
	if storeFailure(err) {
		return e.failure(tenant, &sluice.Check{Policy: *p, Key: key}, e.now(), err), nil
	}
	return sluice.Decision{}, sluice.WithOp("engine.allow", err)
}

// Release returns the units of a lease taken by an allowed Check of a
// concurrency policy. It returns sluice.ErrLeaseNotFound (KindNotFound) if
// the lease was released or has expired.
func (e *Engine) Release(ctx context.Context, tenant string, c sluice.Check, lease uint64) (sluice.Decision, error) {
	if err := validateLease(tenant, &c); err != nil {
		return sluice.Decision{}, sluice.WithOp("engine.release", err)
	}
	d, err := e.store.Release(ctx, e.now(), c.CounterKey(tenant), &c.Policy, lease)
	return d, sluice.WithOp("engine.release", err)
}

// Renew extends a lease to now plus the policy's lease TTL. It returns
// sluice.ErrLeaseNotFound (KindNotFound) if the lease was released or has
// expired: an expired lease's units may already be held by another.
func (e *Engine) Renew(ctx context.Context, tenant string, c sluice.Check, lease uint64) (sluice.Decision, error) {
	if err := validateLease(tenant, &c); err != nil {
		return sluice.Decision{}, sluice.WithOp("engine.renew", err)
	}
	d, err := e.store.Renew(ctx, e.now(), c.CounterKey(tenant), &c.Policy, lease)
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
		hits := req.Hits
		if c.Hits < 0 || c.Hits > sluice.MaxHits {
			return sluice.Invalid(fmt.Sprintf("checks[%d].hits", i), "must be between 0 and %d, got %d", sluice.MaxHits, c.Hits)
		}
		if c.Hits > 0 {
			hits = c.Hits
		}
		if c.Lease != 0 {
			if c.Policy.Algorithm != sluice.Concurrency {
				return sluice.Invalid(fmt.Sprintf("checks[%d].lease", i), "applies to concurrency policies only")
			}
			if c.Lease&sluice.NamedLease == 0 {
				return sluice.Invalid(fmt.Sprintf("checks[%d].lease", i), "must have its top bit set (sluice.NamedLease), got %#x", c.Lease)
			}
		}
		if len(c.DeadOwners) > 0 && c.Policy.Algorithm != sluice.Concurrency {
			return sluice.Invalid(fmt.Sprintf("checks[%d].deadOwners", i), "applies to concurrency policies only")
		}
		if len(c.DeadOwners) > sluice.MaxDeadOwners {
			return sluice.Invalid(fmt.Sprintf("checks[%d].deadOwners", i), "at most %d, got %d", sluice.MaxDeadOwners, len(c.DeadOwners))
		}
		if err := validateCheck(c.Policy.Validate(), &c.Policy, c.Key, hits); err != nil {
			return err.In(fmt.Sprintf("checks[%d]", i))
		}
		if c.Burn && !algo.Burnable(&c.Policy) {
			return sluice.Invalid(fmt.Sprintf("checks[%d].burn", i), "applies to fixed windows only (fixed_window, or quota by calendar month); policy %q is %s", c.Policy.Name, algoName(&c.Policy))
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

// algoName names p's algorithm, a quota's calendar too.
func algoName(p *sluice.Policy) string {
	if p.Algorithm == sluice.Quota && p.Calendar == sluice.Rolling {
		return "a rolling quota"
	}
	return p.Algorithm.String()
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

// Observers returns an Observer telling each of obs, and the KeyObservers
// among them each decision's key.
func Observers(obs ...Observer) Observer {
	m := multiObserver{obs: obs}
	for _, o := range obs {
		if k, ok := o.(KeyObserver); ok {
			m.keys = append(m.keys, k)
		}
	}
	return m
}

type multiObserver struct {
	obs  []Observer
	keys []KeyObserver
}

func (m multiObserver) Decided(policy string, o Outcome) {
	for _, x := range m.obs {
		x.Decided(policy, o)
	}
}

func (m multiObserver) StoreDone(d time.Duration, err error) {
	for _, x := range m.obs {
		x.StoreDone(d, err)
	}
}

func (m multiObserver) DecidedKey(tenant string, c *sluice.Check, hits int64, o Outcome) {
	for _, k := range m.keys {
		k.DecidedKey(tenant, c, hits, o)
	}
}
