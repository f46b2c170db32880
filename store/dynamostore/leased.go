package dynamostore

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
)

// Leased mode (sluice.Policy.Leased, fixed and sliding windows): a node
// takes a batch of a window's hits in one conditional write, sized to its
// recent rate on the key, and admits from the batch locally until it is
// spent or the window (the current aligned window) ends. The batch is
// decided by the policy's own algorithm as b hits, so the table counts
// every hit taken: a fixed window never admits more than Limit across all
// nodes, and a sliding window's estimate (the previous window's count
// weighed by its overlap, plus the current one's) never passes Limit, on
// the table or by the admitted hits' own times, on any number of nodes:
// the overshoot is zero. The cost is the other way: hits taken but not
// used by the window's end are lost, at most one batch per node per window,
// and a sliding window weighs them in the next window's estimate as if
// admitted. A batch is the node's demand over batchSpan (a LeasePeriod, or
// a twelfth of a longer window, at most five LeasePeriods: a node sending
// one a second takes five of a minute's at a time, one write per five), at
// least the request's hits, at most Limit/MaxLeaseShare, whatever the
// tenant's rate;
// when less than a whole batch is left, the node takes what fits, and then
// asks the table again no sooner than shortWait later (a LeasePeriod, or a
// MaxLeaseShare-th of a shorter window), denying meanwhile, so that a key
// at its limit costs at most one refill a shortWait per node however hard
// it is pressed. What a sliding window frees in that wait before its end
// may go untaken: at most Limit/MaxLeaseShare more. So K nodes admit at
// least Limit·(1−K/MaxLeaseShare) of a fixed window's demand when it is
// there, and Limit·(1−(K+1)/MaxLeaseShare) of a sliding window's. A
// refill that fails (a slow store past the decision's deadline) fails the
// decision, for the policy's fail mode to answer: nothing is admitted past
// a batch taken.
//
// A sliding window's batch is one UpdateItem on the item's numbers (ws, c,
// p) with the algorithm's condition, not on a version, so that a node
// whose memory of the item is stale (every other node wrote since) still
// pays one request:
//
//	same window:  SET c = c + :b            IF ws = :ws AND p = :p AND c <= :most
//	next window:  SET ws = :ws, p = :c, c = :b IF ws = :ws - W AND c = :c
//	later, none:  SET ws = :ws, p = 0, c = :b  IF attribute_not_exists(pk) OR ws < :ws - W
//
// where :most is Limit − b − weigh(p) at the node's now. A failed condition
// returns the item (ALL_OLD), from which the batch is decided again.
const (
	LeasePeriod   = time.Second
	MaxLeaseShare = 50 // a batch is at most 2% of the limit
)

// leases are a node's batches, by counter key. The key's turn is held
// around every use of an entry.
type leases struct {
	mu    sync.Mutex
	m     map[string]*lease
	calls int
}

type lease struct {
	window  int64 // start of the window the batch belongs to
	end     int64 // and its end
	left    int64 // hits of the batch not yet admitted
	remain  int64 // the window's remaining hits in the table, when taken
	count   int64 // requests since the last batch
	taken   int64 // when the last batch was taken
	resetAt time.Time
	// short is when the table last had less than a whole batch in this
	// window (0: not since the window began): the node asks again no
	// sooner than short+LeasePeriod.
	short int64
}

// get returns pk's lease, made if need be. The caller holds pk's turn;
// every 4096 calls, get drops the batches of windows over, each under its
// key's turn taken only if free (tryLock), so that the map stays bounded
// by the keys of current windows without touching an entry in use (nor
// waiting: the caller holds a turn).
func (l *leases) get(pk string, now int64, tryLock func(pk string) (func(), bool)) *lease {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[string]*lease{}
	}
	if l.calls++; l.calls%4096 == 0 {
		for k, e := range l.m {
			if k == pk {
				continue
			}
			if unlock, ok := tryLock(k); ok {
				if e.end != 0 && e.end <= now {
					delete(l.m, k)
				}
				unlock()
			}
		}
	}
	e := l.m[pk]
	if e == nil {
		e = &lease{}
		l.m[pk] = e
	}
	return e
}

// leased decides one op of a leased window. The caller holds pk's turn.
func (s *Store) leased(ctx context.Context, now int64, op *sluice.Op, pk string) (sluice.Decision, error) {
	p := op.Policy
	w := int64(p.Window)
	start := now - ((now%w)+w)%w
	e := s.leases.get(pk, now, s.tryLock)
	e.count++
	if e.window == start && e.left >= op.Hits {
		e.left -= op.Hits
		s.stats.leasedLocal.Add(1)
		return sluice.Decision{Policy: p.Name, Allowed: true, Limit: p.Limit, Remaining: e.remain + e.left, ResetAt: e.resetAt}, nil
	}
	if wait := shortWait(w); e.window == start && e.short != 0 && now < e.short+wait {
		// The table was short of a batch a moment ago: at its limit.
		// Come back when this node asks again, or later if the table as
		// last seen says so.
		s.stats.localDenials.Add(1)
		v, _ := s.cache.get(pk)
		st := v.state
		var d sluice.Decision
		algo.UpdateOp(op, &st, now, &d)
		retry := time.Duration(e.short + wait - now)
		if !d.Allowed {
			retry = max(retry, d.RetryAfter)
		}
		return sluice.Decision{Policy: p.Name, Limit: p.Limit, Remaining: e.left, ResetAt: d.ResetAt, RetryAfter: retry}, nil
	}
	// A new batch: the node's demand over the batch's span, within bounds.
	elapsed := max(now-e.taken, int64(time.Millisecond))
	demand := float64(e.count) / float64(elapsed) * float64(batchSpan(w))
	batch := min(max(int64(demand+0.5), op.Hits), max(p.Limit/MaxLeaseShare, op.Hits))
	e.count, e.taken = 0, now
	short := int64(0)
	for {
		take := *op
		take.Hits = batch
		d, err := s.take(ctx, now, &take, pk)
		if err != nil {
			return sluice.Decision{}, err
		}
		if d.Allowed {
			e.window, e.end, e.left, e.remain, e.resetAt = start, start+w, batch-op.Hits, d.Remaining, d.ResetAt
			e.short = short
			d.Remaining += e.left
			return d, nil
		}
		short = now
		// Not a whole batch left: take what there is, if it serves, or
		// deny the request's own hits (from the state just seen: no
		// request), for the Retry-After of those.
		if batch > op.Hits {
			batch = max(d.Remaining, op.Hits)
			continue
		}
		e.window, e.end, e.left, e.short = start, start+w, 0, now
		return d, nil
	}
}

// batchSpan is how much of its demand a node's batch of a window of w
// covers: a LeasePeriod, or a twelfth of a longer window, at most five
// LeasePeriods. Longer spans cost fewer writes at a low rate; what a batch
// may leave unused at the window's end is bounded by its cap
// (Limit/MaxLeaseShare) whatever the span.
func batchSpan(w int64) int64 {
	return min(max(int64(LeasePeriod), w/12), 5*int64(LeasePeriod))
}

// shortWait is how long a node waits, after the table of a window of w
// had less than a batch, before it asks again: a LeasePeriod, or a
// MaxLeaseShare-th of a shorter window, so that what a sliding window
// frees meanwhile, and may not be taken by its end, is at most
// Limit/MaxLeaseShare.
func shortWait(w int64) int64 { return min(int64(LeasePeriod), max(w/MaxLeaseShare, 1)) }

// take decides op, a batch, on pk: by the sliding window's update on its
// numbers, or by a versioned write.
func (s *Store) take(ctx context.Context, now int64, op *sluice.Op, pk string) (sluice.Decision, error) {
	if op.Policy.Algorithm == sluice.SlidingWindow {
		return s.takeSliding(ctx, now, op, pk)
	}
	dst := []sluice.Decision{{}}
	err := s.applyVersioned(ctx, now, []sluice.Op{*op}, dst)
	return dst[0], err
}

// takeSliding takes op.Hits of a sliding window's key pk in one
// UpdateItem (see above), decided first from the node's memory of the
// item: a denial from it stands (other nodes' takes only add hits), an
// admission is checked by the condition. An item without the numbers (of
// a version before them) is taken by a versioned write, which adds them.
func (s *Store) takeSliding(ctx context.Context, now int64, op *sluice.Op, pk string) (sluice.Decision, error) {
	cur, _ := s.cache.get(pk)
	id := writeID()
	b := s.budget()
	for {
		if cur.kind == genericItem && !cur.counters {
			dst := []sluice.Decision{{}}
			err := s.applyVersioned(ctx, now, []sluice.Op{*op}, dst)
			return dst[0], err
		}
		next := cur.state
		var d sluice.Decision
		algo.UpdateOp(op, &next, now, &d)
		if !d.Allowed {
			s.stats.localDenials.Add(1)
			return d, nil
		}
		in := s.slidingUpdate(pk, cur, next, op.Policy.Window, op.Hits, d.Remaining, id)
		if err := b.take(ctx, "take"); err != nil {
			return sluice.Decision{}, err
		}
		s.stats.writes.Add(1)
		s.stats.writeUnits.Add(1)
		out, err := s.db.UpdateItem(ctx, in, noRetry)
		var ccf *types.ConditionalCheckFailedException
		switch {
		case err == nil:
			v, err := decodeItem(out.Attributes)
			if err != nil {
				return sluice.Decision{}, err
			}
			return s.slidingTaken(op, pk, now, v), nil
		case errors.As(err, &ccf):
			old, err := s.failedItem(ctx, pk, ccf.Item)
			if err != nil {
				return sluice.Decision{}, err
			}
			if old.write == id { // landed on an earlier try
				return s.slidingTaken(op, pk, now, old), nil
			}
			s.stats.conflicts.Add(1)
			b.lost(changed(cur, old))
			cur = old
			s.cache.put(pk, cur)
		case b.failed(ctx, err):
			// The same update, id and all: if the last try landed
			// unanswered, this one's condition fails on our id.
		default:
			return sluice.Decision{}, unavailable("take", err)
		}
	}
}

// slidingUpdate is the UpdateItem that takes hits of a sliding window's
// item, as the node last saw it (cur), into next, its state after them;
// remaining is the algorithm's Remaining after them from cur.
func (s *Store) slidingUpdate(pk string, cur versioned, next algo.State, window time.Duration, hits, remaining int64, id string) *dynamodb.UpdateItemInput {
	u := slidingExpr(cur, next, window, hits, remaining, id)
	return &dynamodb.UpdateItemInput{
		TableName: &s.table, Key: key(pk, skCounter),
		UpdateExpression: u.upd, ConditionExpression: u.cond,
		ExpressionAttributeNames: u.names, ExpressionAttributeValues: u.vals,
		ReturnValues:                        types.ReturnValueAllNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
}

// numbersUpdate is an update of a counter item conditioned on its numbers
// rather than on its version: slidingExpr's and leaseExpr's (numbers.go).
type numbersUpdate struct {
	upd, cond *string
	names     map[string]string
	vals      map[string]types.AttributeValue
}

// transactItem is u as an item of a transaction on pk.
func (u numbersUpdate) transactItem(table, pk string) types.TransactWriteItem {
	return types.TransactWriteItem{Update: &types.Update{
		TableName: &table, Key: key(pk, skCounter),
		UpdateExpression: u.upd, ConditionExpression: u.cond,
		ExpressionAttributeNames: u.names, ExpressionAttributeValues: u.vals,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}}
}

// slidingExpr is the update, and its condition, that take hits of a
// sliding window's item as the node last saw it (cur) into next (see
// above), in a request of its own (slidingUpdate) or in a transaction.
func slidingExpr(cur versioned, next algo.State, window time.Duration, hits, remaining int64, id string) numbersUpdate {
	vals := map[string]types.AttributeValue{
		":ws": num(next.Start), ":b": num(hits), ":id": str(id), ":zero": num(0), ":one": num(1),
		":exp": num(next.Expires / int64(time.Millisecond)), ":ttl": num(ttlOf(next.Expires)),
	}
	set := "SET v = if_not_exists(v, :zero) + :one, w = :id, #exp = :exp, #ttl = :ttl, ws = :ws, "
	var upd, cond string
	switch {
	case cur.kind == genericItem && cur.state.Start == next.Start:
		// What the others took since only lowers what may be taken:
		// c + hits + weigh(p) <= Limit, with p as it is in this window.
		upd, cond = set+"c = c + :b", "ws = :ws AND p = :p AND c <= :most AND w <> :id"
		vals[":p"], vals[":most"] = num(next.Prev), num(cur.state.Count+remaining)
	case cur.kind == genericItem && cur.state.Start == next.Start-int64(window):
		upd, cond = set+"p = :c, c = :b", "ws = :prev AND c = :c"
		vals[":prev"], vals[":c"] = num(cur.state.Start), num(cur.state.Count)
	default:
		upd, cond = set+"p = :zero, c = :b", "attribute_not_exists(pk) OR ws < :prev"
		vals[":prev"] = num(next.Start - int64(window))
	}
	return numbersUpdate{
		upd: aws.String(upd + " REMOVE st"), cond: aws.String(cond),
		names: map[string]string{"#ttl": attrTTL, "#exp": attrExpires}, vals: vals,
	}
}

// slidingTaken is the decision of a take of op.Hits that left the item
// as v: the algorithm's, from the state before it.
func (s *Store) slidingTaken(op *sluice.Op, pk string, now int64, v versioned) sluice.Decision {
	s.cache.put(pk, v)
	before := v.state
	before.Count -= op.Hits
	var d sluice.Decision
	algo.UpdateOp(op, &before, now, &d)
	return d
}
