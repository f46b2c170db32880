// Package sluice holds the domain of the Sluice rate limiter: policies,
// requests, decisions and the interfaces that limiters and stores implement.
// It does no I/O; the algorithms live in package algo, the stores under
// store/, the server's assembly in internal/server, and the wiring in
// cmd/sluice.
//
// Being over a limit is a Decision with Allowed false, never an error. Errors
// are for broken things: bad input (KindInvalid), a store that is closed or
// unreachable (KindUnavailable), and bugs (KindInternal).
package sluice

import (
	"context"
	"time"
)

// Decision is the answer for one policy.
type Decision struct {
	// Policy is the name of the policy decided.
	Policy string
	// Allowed reports whether the hits were admitted (and consumed).
	Allowed bool
	// Limit is the policy's capacity: the limit of a window, the burst of a
	// token bucket, the number of concurrent leases.
	Limit int64
	// Remaining is how many more hits would be admitted now, after this
	// decision.
	Remaining int64
	// ResetAt is the earliest time at which Remaining is back to Limit if no
	// more hits arrive. It is never before now.
	ResetAt time.Time
	// RetryAfter is, for a denial, the shortest wait after which the same
	// request would be admitted if nothing else consumed in between. It is
	// zero when Allowed is true.
	RetryAfter time.Duration
	// Lease is the lease acquired by an allowed decision of a concurrency
	// policy; its ID is zero otherwise.
	Lease Lease
	// Shadowed is set when a shadow policy would have denied: Allowed is
	// then true and nothing was consumed.
	Shadowed bool
	// FailedOpen is set when the store could not decide and the policy's
	// fail mode admitted the hits.
	FailedOpen bool
	// FailedClosed is set when the store could not decide and the
	// policy's fail mode denied: a fault, not a limit anybody reached.
	// Transports answer it as unavailable (503), never as 429.
	FailedClosed bool
}

// Lease is a claim on a concurrency policy's capacity. It returns its
// capacity when released or, unless renewed, when it expires.
type Lease struct {
	ID        uint64
	ExpiresAt time.Time
}

// NamedLease is the bit that every lease id a caller names (Check.Lease)
// has set, and that no id a store names has: a store's ids are times in
// nanoseconds, below 1<<63, so the two never meet.
const NamedLease uint64 = 1 << 63

// A named lease may carry its owner: a process's tag (bits 47 to 62 of the
// id; OwnedLease, LeaseOwner). A check that names the owners it knows dead
// (Check.DeadOwners) counts their leases on its counter as expired, and
// its write drops them: the counts of a process that died come back at the
// next decision of each, without a write of their own and without the
// process renewing its leases while it lived.
const (
	leaseOwnerShift = 47
	leaseOwnerMask  = 1<<16 - 1
)

// MaxDeadOwners caps a check's DeadOwners.
const MaxDeadOwners = 64

// OwnedLease returns the named lease id of owner whose other bits are
// those of rest below bit 47.
func OwnedLease(owner uint16, rest uint64) uint64 {
	return NamedLease | uint64(owner)<<leaseOwnerShift | rest&(1<<leaseOwnerShift-1)
}

// LeaseOwner returns the owner a lease id carries, and false for an id the
// store named (no owner).
func LeaseOwner(id uint64) (uint16, bool) {
	if id&NamedLease == 0 {
		return 0, false
	}
	return uint16(id >> leaseOwnerShift & leaseOwnerMask), true
}

// Check asks for hits against one policy under one key.
type Check struct {
	Policy Policy
	// Key names the counter within the tenant and the policy: a user id, an
	// IP address, a descriptor. It may be empty (one counter per tenant and
	// policy) and is at most MaxKeyLen bytes.
	Key string
	// Hits, if not zero, is this check's cost instead of the request's:
	// for a request that sizes a named lease of one policy by its own
	// measure (Lease) while it spends one hit of the others. A request of
	// zero hits (a read) reads every check.
	Hits int64
	// Lease, for a Concurrency policy, names the lease the check sets to
	// Hits units (see Op.Lease); zero: the store names a new lease.
	Lease uint64
	// DeadOwners, for a Concurrency policy, are owners (LeaseOwner) known
	// dead: their named leases on the check's counter count as expired
	// (see Op.DeadOwners). At most MaxDeadOwners.
	DeadOwners []uint16
	// RemainingMayLag lets a store shared by nodes decide the check
	// without the other nodes' latest writes where its condition holds
	// anyway (DynamoDB: a transaction conditioned on the counter's
	// numbers, not its version), so that a node whose copy is stale still
	// decides in one request: admission stays exact, but the decision's
	// Remaining and ResetAt are as of this node's copy. For a caller that
	// does not read them as the truth (the gateway's admission).
	RemainingMayLag bool
	// Space is the key space of the check's counter: SpacePolicy (the
	// zero value) for configured policies and Go callers, SpaceInline for
	// the inline policies a client sends, SpaceInternal for Sluice's own
	// components. Transports set it; no client input chooses it. Not for
	// callers: leave it zero.
	Space Space
	// BlockedUntil, if after the request's time, is the end of an
	// operator's block of this check's key (KeyBlock): the request is
	// denied and consumes nothing. Transports set it from the tenant. Not
	// for callers: leave it zero (blocks are set with the operator's API).
	BlockedUntil time.Time
	// Burn adds the check's hits to its counter even when they deny, as
	// envoyproxy/ratelimit counts (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT
	// false): the count may pass the limit, up to MaxBurnCount, and the
	// check denies while the count is past the limit, a read (zero hits)
	// too; at exactly the limit a read admits. A Burn check adds its hits
	// whatever the request's other checks decide; the others stay
	// all-or-nothing among themselves, and the request is allowed only if
	// every check allows. An operator's block (BlockedUntil) still makes
	// the request a read. For fixed windows only (algo.Burnable: a
	// FixedWindow policy, or a Quota by calendar month): a request with a
	// Burn check of another algorithm is refused as invalid, naming the
	// check, and changes nothing. Set by code (the Envoy service's
	// reference counting); no client input sets it.
	Burn bool
	// Epoch is the tenant's (Tenant.Epoch), set by the tenant layer: the
	// counters of one tenant id under two epochs are two counters, so
	// that a tenant created again under the id of a deleted one starts
	// with none of its counts, penalties or leases. Zero for tenants
	// without one (the configuration file's, inline checks', Go callers').
	Epoch int64
}

// CounterKey returns the key of c's counter for tenant. Not for callers:
// it is the stores' and the engine's.
func (c *Check) CounterKey(tenant string) Key {
	return Key{Tenant: tenant, Epoch: c.Epoch, Space: c.Space, Algorithm: c.Policy.Algorithm, Policy: c.Policy.Name, Value: c.Key}
}

// BoxKey returns the key of the penalty box of c's counter for tenant: the
// counter's key in its space's boxes. Not for callers: it is the stores'
// and the engine's.
func (c *Check) BoxKey(tenant string) Key {
	k := c.CounterKey(tenant)
	k.Space |= spaceBoxes
	return k
}

// Request asks whether a tenant may spend Hits against every check at once.
// Either all checks admit the hits and all consume them, or none consumes.
type Request struct {
	Tenant string
	Checks []Check
	// Hits is the cost of the request. Zero reads the current state without
	// consuming anything.
	Hits int64
}

// Result is the answer to a Request.
type Result struct {
	// Allowed is true when every check admitted the hits.
	Allowed bool
	// Decision is the decision to report: when denied, the denying policy
	// with the longest RetryAfter; when allowed, the policy with the fewest
	// hits remaining. Ties go to the earlier check.
	Decision Decision
	// Decisions holds one decision per check, in the order of the checks.
	// When the request is denied, no check consumed; the decisions of the
	// checks that would have admitted show their state unchanged.
	Decisions []Decision
}

// Limiter decides requests. It is implemented in-process by engine.Engine,
// and over HTTP by client.Client.
type Limiter interface {
	Check(ctx context.Context, req Request) (Result, error)
}

// LeaseLimiter is a Limiter that also releases and renews the leases its
// concurrency decisions hand out. engine.Engine implements it; the HTTP API
// and the WebSocket gateway use it.
type LeaseLimiter interface {
	Limiter
	// Release returns a lease's units at once; ErrLeaseNotFound if it was
	// released or has expired.
	Release(ctx context.Context, tenant string, c Check, lease uint64) (Decision, error)
	// Renew extends a live lease; ErrLeaseNotFound if it was released or
	// has expired.
	Renew(ctx context.Context, tenant string, c Check, lease uint64) (Decision, error)
}

// Limits on the size of a request's parts.
const (
	MaxTenantLen = 128
	MaxKeyLen    = 1024
	MaxChecks    = 16
	MaxHits      = MaxLimit
	// MaxBurnCount is where a Burn check's counter saturates: a full
	// window and the most hits of one request past it. A count there
	// denies as any count past the limit does, and never overflows.
	MaxBurnCount = MaxLimit + MaxHits
)

// Key identifies one counter in a store. The tenant leads so that no two
// tenants can ever share state, whatever their policy names and keys. The
// space and the algorithm are part of the identity: a request cannot name
// Sluice's own counters (SpaceInternal), and one policy name used with two
// algorithms names two counters, so that a check of another algorithm can
// never read another's state as empty and so reset it.
type Key struct {
	Tenant string
	// Epoch tells apart the counters of tenants of one id, one deleted
	// and the other created since (Check.Epoch); zero for none. Stores
	// encode a key of epoch zero as before epochs were.
	Epoch     int64
	Space     Space
	Algorithm Algorithm
	Policy    string
	Value     string
	// Region, set by a store in multi-region mode, names the region whose
	// counter this is: each region writes only its own (DynamoDB global
	// tables). Empty elsewhere.
	Region string
}

// Space is a key space within a tenant's counters.
type Space uint8

const (
	// SpacePolicy holds the counters of configured policies, and of
	// policies given by Go callers in process.
	SpacePolicy Space = iota
	// SpaceInline holds the counters of inline policies, whose names
	// clients choose: never a configured policy's counter, even one
	// configured later under the same name.
	SpaceInline
	// SpaceInternal holds Sluice's own counters: the gateway's connection
	// and message limits. No request reaches it.
	SpaceInternal

	// spaceBoxes marks the penalty boxes of a space's counters
	// (Check.BoxKey), each beside its counter and never one.
	spaceBoxes Space = 0x80
)

// Failed is c's decision when the store could not decide at now: the
// policy's fail mode admits (FailedOpen) or denies (FailedClosed), asking
// for a retry a second later. A shadow policy never denies.
func (c *Check) Failed(now time.Time) Decision {
	capacity := c.Policy.Capacity()
	if c.Policy.FailMode == FailClosed && !c.Policy.Shadow {
		return Decision{Policy: c.Policy.Name, FailedClosed: true, Limit: capacity, ResetAt: now.Add(FailedRetry), RetryAfter: FailedRetry}
	}
	return Decision{Policy: c.Policy.Name, Allowed: true, FailedOpen: true, Limit: capacity, Remaining: capacity, ResetAt: now}
}

// FailedRetry is the Retry-After of a fail-closed denial: the store may be
// back soon.
const FailedRetry = time.Second

// FailedResult is the result of req when the store could not decide: each
// check's fail mode decides.
func FailedResult(req Request, now time.Time) Result {
	res := Result{Decisions: make([]Decision, len(req.Checks))}
	for i := range req.Checks {
		res.Decisions[i] = req.Checks[i].Failed(now)
	}
	res.Decision, res.Allowed = Report(req.Checks, res.Decisions)
	return res
}

// Report picks the decision to report for checks, as Reporting does,
// leaving out shadow policies, which clients should not see limit them,
// unless every check is one.
func Report(checks []Check, ds []Decision) (Decision, bool) {
	enforced := make([]Decision, 0, len(ds))
	for i := range ds {
		if !checks[i].Policy.Shadow {
			enforced = append(enforced, ds[i])
		}
	}
	if len(enforced) == 0 {
		return Reporting(ds)
	}
	return Reporting(enforced)
}

// Reporting picks the decision to report among decisions of one request:
// the denial with the longest RetryAfter if any check denied, otherwise the
// decision with the fewest hits remaining. It reports whether all allowed.
func Reporting(ds []Decision) (Decision, bool) {
	var pick Decision
	allowed := true
	for i, d := range ds {
		switch {
		case i == 0:
			pick, allowed = d, d.Allowed
		case !d.Allowed && allowed:
			pick, allowed = d, false
		case !d.Allowed && d.RetryAfter > pick.RetryAfter:
			pick = d
		case d.Allowed && allowed && d.Remaining < pick.Remaining:
			pick = d
		}
	}
	return pick, allowed
}
