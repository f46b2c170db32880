package dynamostore

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
)

// Counters written in a transaction conditioned on their numbers, not on
// their versions (docs/dynamodb.md), so that a node whose copy of an item
// is stale (another node wrote it since) still decides in one
// transaction: the condition is the algorithm's own check, which holds
// whatever the others added unless the limit is really reached. A sliding
// window's item is updated as a leased batch is (slidingExpr). A
// concurrency counter's item holds its leases as a map as well as in its
// state, ls (lease id -> "units:expiry"), and u, the sum of their units,
// so that setting a named lease (sluice.Op.Lease) from old to new units is
//
//	SET ls.#x = :new, u = u + :delta, v = v + 1, w = :id
//	IF ls.#x = :old (or attribute_not_exists) AND u <= Limit − delta
//	   AND size(ls) within MaxLeases AND w <> :id
//
// u counts every lease in the map, expired or of an owner dead too: the
// condition is then stricter than the algorithm. So the numbers are used
// only when the node's copy has no lease expired or of an owner the op
// names dead, for a named lease, and not again in a decision once their
// condition failed on the item; otherwise the versioned write (put)
// decides, which prunes the map and writes u anew. A transaction returns
// no items: the decision's Remaining is from the node's copy, and may
// overstate what the others left.
const (
	attrLeases = "ls" // a concurrency counter's leases: id -> "units:expiry ns"
	attrUnits  = "u"  // the sum of the units in ls
)

// leaseValue is an entry of ls.
func leaseValue(e algo.Entry) types.AttributeValue {
	return str(strconv.FormatInt(e.N, 10) + ":" + strconv.FormatInt(e.At, 10))
}

// putLeases adds a concurrency state's leases, as a map and their sum, to
// an item being put.
func putLeases(item map[string]types.AttributeValue, st *algo.State) {
	m := make(map[string]types.AttributeValue, len(st.Entries))
	var u int64
	for _, e := range st.Entries {
		m[strconv.FormatUint(e.ID, 10)] = leaseValue(e)
		u += e.N
	}
	item[attrLeases] = &types.AttributeValueMemberM{Value: m}
	item[attrUnits] = num(u)
}

// decodeLeases sets v's leases from the item's map, if it has one: it is
// the truth, the state's entries may be stale.
func decodeLeases(item map[string]types.AttributeValue, v *versioned) error {
	m, ok := item[attrLeases].(*types.AttributeValueMemberM)
	if !ok {
		return nil
	}
	es := make([]algo.Entry, 0, len(m.Value))
	for k, val := range m.Value {
		id, err := strconv.ParseUint(k, 10, 64)
		if err != nil {
			return fmt.Errorf("dynamostore: counter lease id: %w", err)
		}
		s, ok := val.(*types.AttributeValueMemberS)
		if !ok {
			return fmt.Errorf("dynamostore: counter lease %s not a string", k)
		}
		units, at, ok := strings.Cut(s.Value, ":")
		var e algo.Entry
		e.ID = id
		if e.N, err = strconv.ParseInt(units, 10, 64); err == nil && ok {
			e.At, err = strconv.ParseInt(at, 10, 64)
		}
		if err != nil || !ok {
			return fmt.Errorf("dynamostore: counter lease %s: %q", k, s.Value)
		}
		es = append(es, e)
	}
	slices.SortFunc(es, func(a, b algo.Entry) int { return cmp.Or(cmp.Compare(a.At, b.At), cmp.Compare(a.ID, b.ID)) })
	v.leases = true
	v.state.Algorithm = sluice.Concurrency
	v.state.Entries = es
	if len(es) > 0 {
		v.state.Expires = es[len(es)-1].At
	}
	return nil
}

// numbers returns the update of op's item, conditioned on its numbers,
// from cur, the node's copy, to next, as decided (d), if op may be
// written so (see above); failed: a condition on the item's numbers
// failed already in this decision.
func numbers(op *sluice.Op, cur versioned, next algo.State, d *sluice.Decision, now int64, failed bool, id string) (numbersUpdate, bool) {
	if !op.RemainingMayLag {
		// The caller reads Remaining as the truth (a fair-share ledger
		// sums the nodes' demand from it): versioned, so it is.
		return numbersUpdate{}, false
	}
	switch op.Policy.Algorithm {
	case sluice.SlidingWindow:
		if cur.kind == tatItem || (cur.kind == genericItem && !cur.counters) {
			return numbersUpdate{}, false
		}
		return slidingExpr(cur, next, op.Policy.Window, op.Hits, d.Remaining, id), true
	case sluice.Concurrency:
		if failed || op.Lease == 0 || cur.kind != genericItem || !cur.leases || cur.state.Algorithm != sluice.Concurrency {
			return numbersUpdate{}, false
		}
		return leaseExpr(op, cur.state, next, now, id)
	}
	return numbersUpdate{}, false
}

// leaseExpr is the update that sets op's named lease as next has it, from
// the state from, if from has no lease expired at now nor of an owner op
// names dead.
func leaseExpr(op *sluice.Op, from, next algo.State, now int64, id string) (numbersUpdate, bool) {
	var old *algo.Entry
	for i, e := range from.Entries {
		if e.At <= now {
			return numbersUpdate{}, false
		}
		if o, ok := sluice.LeaseOwner(e.ID); ok && slices.Contains(op.DeadOwners, o) {
			return numbersUpdate{}, false
		}
		if e.ID == op.Lease {
			old = &from.Entries[i]
		}
	}
	i := slices.IndexFunc(next.Entries, func(e algo.Entry) bool { return e.ID == op.Lease })
	if i < 0 {
		return numbersUpdate{}, false
	}
	nw := next.Entries[i]
	vals := map[string]types.AttributeValue{
		":new": leaseValue(nw), ":id": str(id), ":one": num(1),
		":exp": num(next.Expires / int64(time.Millisecond)), ":ttl": num(ttlOf(next.Expires)),
	}
	delta, most := nw.N, int64(sluice.MaxLeases-1)
	cond := "attribute_exists(ls) AND attribute_not_exists(ls.#x)"
	if old != nil {
		delta, most = nw.N-old.N, sluice.MaxLeases
		cond = "ls.#x = :old"
		vals[":old"] = leaseValue(*old)
	}
	vals[":delta"], vals[":most"], vals[":leases"] = num(delta), num(op.Policy.Limit-delta), num(most)
	return numbersUpdate{
		upd: aws.String("SET ls.#x = :new, u = u + :delta, v = v + :one, w = :id, #exp = :exp, #ttl = :ttl"),
		// The expiry and TTL are this node's view's: the map is the
		// truth (decodeLeases), and a lease is renewed long before its
		// item's TTL, a day after its expiry.
		cond:  aws.String(cond + " AND u <= :most AND size(ls) <= :leases AND w <> :id"),
		names: map[string]string{"#x": strconv.FormatUint(op.Lease, 10), "#exp": attrExpires, "#ttl": attrTTL},
		vals:  vals,
	}, true
}
