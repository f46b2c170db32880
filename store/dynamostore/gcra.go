package dynamostore

import (
	"context"
	"errors"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
)

// gcra decides one token-bucket op with no prior read, by the two
// conditional updates of DESIGN.md on the item's arrival time (tat, epoch
// ns), cost being hits times the emission interval and tau the bucket's
// depth:
//
//	active bucket:  SET tat = tat + :cost   IF tat > :now AND tat <= :now + :tau - :cost
//	idle bucket:    SET tat = :now + :cost  IF attribute_not_exists(tat) OR tat <= :now
//
// Which one to try first comes from the node's memory of the key; a failed
// condition returns the item as it is (ALL_OLD), which says whether to try
// the other or to deny: an arrival time beyond the bucket's depth is a
// denial, with Retry-After from it, and no further request. Every write
// carries its id, and the first update refuses to repeat one, so that an
// SDK retry of a write that landed is recognised, not counted twice, unless
// another node wrote in between: then the hits are counted again, erring on
// the side of the limit. The caller holds the key's turn.
func (s *Store) gcra(ctx context.Context, now int64, op *sluice.Op, pk string) (sluice.Decision, error) {
	p := op.Policy
	cost := op.Hits * algo.EmissionInterval(p)
	tau := p.EffectiveBurst() * algo.EmissionInterval(p)
	cached, ok := s.cache.get(pk)
	if ok {
		// The deny cache: other nodes can only have moved tat later.
		if _, d := algo.Decide(p, cached.state, now, op.Hits); !d.Allowed {
			s.stats.localDenials.Add(1)
			return d, nil
		}
	}
	active := ok && cached.kind == tatItem && cached.state.TAT > now
	basis, based := cached, ok // the item as last seen, if ever
	id := writeID()
	num := func(v int64) types.AttributeValue {
		return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
	}
	b := s.budget()
	for {
		in := &dynamodb.UpdateItemInput{
			TableName: &s.table, Key: key(pk, skCounter),
			ExpressionAttributeNames:            map[string]string{"#ttl": attrTTL},
			ReturnValues:                        types.ReturnValueUpdatedNew,
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		}
		if active {
			in.UpdateExpression = aws.String("SET tat = tat + :cost, #ttl = :ttl, w = :w")
			in.ConditionExpression = aws.String("tat > :now AND tat <= :lim AND (attribute_not_exists(w) OR w <> :w)")
			in.ExpressionAttributeValues = map[string]types.AttributeValue{
				":cost": num(cost), ":now": num(now), ":lim": num(now + tau - cost),
				":ttl": num(ttlOf(now + tau)), ":w": str(id),
			}
		} else {
			in.UpdateExpression = aws.String("SET tat = :new, #ttl = :ttl, w = :w")
			in.ConditionExpression = aws.String("attribute_not_exists(tat) OR tat <= :now")
			in.ExpressionAttributeValues = map[string]types.AttributeValue{
				":new": num(now + cost), ":now": num(now), ":ttl": num(ttlOf(now + cost)), ":w": str(id),
			}
		}
		if err := b.take(ctx, "gcra"); err != nil {
			return sluice.Decision{}, err
		}
		s.stats.writes.Add(1)
		s.stats.writeUnits.Add(1)
		out, err := s.db.UpdateItem(ctx, in, noRetry)
		var ccf *types.ConditionalCheckFailedException
		switch {
		case err == nil:
			tat, perr := strconv.ParseInt(out.Attributes[attrTAT].(*types.AttributeValueMemberN).Value, 10, 64)
			if perr != nil {
				return sluice.Decision{}, perr
			}
			return s.gcraAdmitted(p, pk, now, op.Hits, tat, cost), nil
		case errors.As(err, &ccf):
			old, derr := s.failedItem(ctx, pk, ccf.Item)
			if derr != nil {
				return sluice.Decision{}, derr
			}
			if old.write == id { // landed on an earlier try
				return s.gcraAdmitted(p, pk, now, op.Hits, old.state.TAT, cost), nil
			}
			s.stats.conflicts.Add(1)
			// Lost to another node, or taught by the item which update
			// to try: neither is a fault, unless the item had not moved.
			b.lost(!based || changed(basis, old))
			basis, based = old, true
			if old.kind != tatItem || old.state.TAT <= now {
				active = false
				continue
			}
			s.cache.put(pk, old)
			if _, d := algo.Decide(p, old.state, now, op.Hits); !d.Allowed {
				return d, nil
			}
			active = true
		case b.failed(ctx, err):
			// The same update, id and all: if the last try landed
			// unanswered, this one's condition fails on our id.
		default:
			return sluice.Decision{}, unavailable("update", err)
		}
	}
}

// gcraAdmitted is the decision of an update that moved tat to tat by
// cost: the algorithm's, from the state before it.
func (s *Store) gcraAdmitted(p *sluice.Policy, pk string, now, hits, tat, cost int64) sluice.Decision {
	before := algo.State{Algorithm: sluice.TokenBucket, TAT: tat - cost, Expires: tat - cost}
	next, d := algo.Decide(p, before, now, hits)
	s.cache.put(pk, versioned{state: next, kind: tatItem})
	return d
}
