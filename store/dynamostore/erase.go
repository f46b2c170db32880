package dynamostore

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sluicehq/sluice"
)

var _ sluice.KeyEraser = (*Store)(nil)

// EraseKey implements sluice.KeyEraser. A counter's partition key is the
// whole key (counterPK), so the store deletes the known keys alone: for
// each, under every algorithm and in every region, every item of its partition (the counter, a
// region's allotments), read by a Query and deleted one by one; and what
// this node remembers of them (its state cache, leased batches,
// allotments). Other nodes' caches are stale until their next write on
// the key, which a stale version makes read afresh, or until their
// remembered state expires.
func (s *Store) EraseKey(ctx context.Context, tenant, value string, known []sluice.Key) (int, error) {
	if s.isClosed() {
		return 0, sluice.ErrStoreClosed
	}
	regions := []string{""}
	if s.region != "" {
		regions = s.regions
	}
	n := 0
	done := map[string]bool{}
	for _, k := range known {
		if k.Tenant != tenant || k.Value != value || !k.Space.Erasable() {
			continue
		}
		// Under every algorithm: a policy whose algorithm the operator
		// changed has its earlier counter under the earlier one.
		for _, alg := range sluice.Algorithms {
			for _, r := range regions {
				k.Algorithm, k.Region = alg, r
				pk := counterPK(&k)
				if done[pk] {
					continue
				}
				done[pk] = true
				m, err := s.erasePartition(ctx, pk)
				n += m
				if err != nil {
					return n, unavailable("dynamostore.erase", err)
				}
				s.forgetLocal(pk)
			}
		}
	}
	return n, nil
}

// erasePartition deletes every item of partition pk and returns how many
// it deleted.
func (s *Store) erasePartition(ctx context.Context, pk string) (int, error) {
	n := 0
	var next map[string]types.AttributeValue
	for {
		out, err := s.db.Query(ctx, &dynamodb.QueryInput{
			TableName:                 &s.table,
			KeyConditionExpression:    aws.String("pk = :pk"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: pk}},
			ProjectionExpression:      aws.String("pk, sk"),
			ConsistentRead:            aws.Bool(true),
			ExclusiveStartKey:         next,
		})
		if err != nil {
			return n, err
		}
		for _, item := range out.Items {
			if err := s.deleteItem(ctx, item[attrPK], item[attrSK]); err != nil {
				return n, err
			}
			n++
		}
		if next = out.LastEvaluatedKey; len(next) == 0 {
			return n, nil
		}
	}
}

// forgetLocal drops what this node remembers of partition pk.
func (s *Store) forgetLocal(pk string) {
	s.cache.mu.Lock()
	delete(s.cache.m, pk)
	s.cache.mu.Unlock()
	s.leases.mu.Lock()
	delete(s.leases.m, pk)
	s.leases.mu.Unlock()
	s.allots.mu.Lock()
	delete(s.allots.m, pk)
	s.allots.mu.Unlock()
}

// deleteItem deletes one item, sent again after a backoff while DynamoDB
// refuses it for now (throttled, or in conflict with a transaction on the
// item: a decision's, which a healthy store has at any time), within the
// store's write attempts: a delete is unconditional, so sending it again
// is safe.
func (s *Store) deleteItem(ctx context.Context, pk, sk types.AttributeValue) error {
	in := &dynamodb.DeleteItemInput{TableName: &s.table, Key: map[string]types.AttributeValue{attrPK: pk, attrSK: sk}}
	b := s.budget()
	for {
		if err := b.take(ctx, "erase"); err != nil {
			return err
		}
		_, err := s.db.DeleteItem(ctx, in, noRetry)
		if err == nil || !b.failed(ctx, err) {
			return err
		}
	}
}
