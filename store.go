package sluice

import (
	"context"
	"time"
)

// Op is one policy's part of a request, as a store sees it. It is for
// implementers of Store; not for callers, who decide through the engine
// (engine.Engine, engine.Prepared) or a client, which build the ops.
type Op struct {
	Key    Key
	Policy *Policy
	Hits   int64
	// Lease, for a Concurrency policy, is the id, chosen by the caller
	// (NamedLease set), of the lease the op sets to Hits units: if that
	// lease is live its units count as free for the new size, which takes
	// its place if admitted, and otherwise it is taken anew; a denial
	// leaves it as it was. So a holder grows or shrinks its lease in one
	// atomic step, and a write whose outcome it does not know (a timeout)
	// is made right by the next, whichever way the first went. Zero: the
	// store names a new lease.
	Lease uint64
	// DeadOwners, for a Concurrency policy, are owners whose named leases
	// (LeaseOwner) count as expired in this decision, whatever their
	// expiry; an admitting write drops them.
	DeadOwners []uint16
	// RemainingMayLag: see Check.RemainingMayLag.
	RemainingMayLag bool
	// Burn: see Check.Burn. A store decides a burn op as an admission
	// whatever its count, and needs no code of its own for it: the
	// algorithm (algo.Burnable policies; the others ignore Burn) adds the
	// hits up to MaxBurnCount and answers Allowed, with Remaining the
	// limit less the count, negative when the count is past the limit,
	// and then a RetryAfter to the window's end. So the state is written
	// as any admission's, exactly, and all-or-nothing with the request's
	// other ops, which are burn ops too: the engine sends a request's
	// other checks apart, and turns a negative Remaining into the
	// check's denial.
	Burn bool
}

// Store keeps the state of counters and applies decisions to it atomically.
// Implementations: memstore (in process), pebblestore (embedded and
// durable), dynamostore (DynamoDB) and redisstore (Redis). Every
// implementation passes storetest.Run.
//
// A store trusts its input: the engine validates policies, keys and hits
// before calling it. Over the limit is a Decision, not an error; errors are
// for a store that is closed (ErrStoreClosed), full (ErrStoreFull) or broken.
type Store interface {
	// Apply decides every op at time now and writes dst[i] for ops[i]
	// (len(dst) >= len(ops)). It is all-or-nothing: if any op is denied,
	// no op consumes and the state of every key is left as it was. Ops on
	// the same key see each other's effect, in order. Concurrent Apply calls
	// are linearizable: an exact policy never admits more than its limit.
	Apply(ctx context.Context, now time.Time, ops []Op, dst []Decision) error
	// Release returns a Concurrency lease's units at once. It returns
	// ErrLeaseNotFound if the lease is not held.
	Release(ctx context.Context, now time.Time, key Key, p *Policy, lease uint64) (Decision, error)
	// Renew extends a Concurrency lease to now + the policy's lease TTL. It
	// returns ErrLeaseNotFound if the lease is not held.
	Renew(ctx context.Context, now time.Time, key Key, p *Policy, lease uint64) (Decision, error)
	// Close releases the store's resources; later calls return
	// ErrStoreClosed.
	Close() error
}

// KeyEraser is a Store that erases one key's state on request: a person's
// right to erasure (docs/privacy.md). memstore, pebblestore and
// dynamostore implement it, and storetest.Run holds each to one spec.
type KeyEraser interface {
	// EraseKey deletes the state of the counters and penalty boxes of
	// tenant whose key's Value is value, leases included (a Concurrency
	// counter's state holds them), in every region, and returns how many
	// states it deleted. known names such counters as the caller knows
	// them (the tenant's configured policies', and their boxes): each is
	// deleted, under every algorithm (a policy's earlier one too). A
	// store that can find the others of the tenant without reading all it
	// holds (memstore and pebblestore: those of every
	// epoch, space, algorithm and policy, inline ones included, Sluice's
	// own space aside) deletes them too; DynamoDB, whose partition key is
	// the whole key, deletes known alone. A decision racing with the erase
	// may leave a state made after it.
	EraseKey(ctx context.Context, tenant, value string, known []Key) (int, error)
}

// Erasable reports whether a key of space s is one a KeyEraser erases:
// any but Sluice's own counters (SpaceInternal) and their boxes.
func (s Space) Erasable() bool { return s&^spaceBoxes != SpaceInternal }
