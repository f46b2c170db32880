package dynamostore

import (
	"context"
	"crypto/rand"
	"errors"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sluicehq/sluice"
)

var _ sluice.SecretStore = (*Store)(nil)

// Secret items: pk "<tenant>#x", sk the secret's name, with the secret
// (B). The tenant leads, so that a node under a tenant's IAM policy
// reaches its tenant's secrets.
const attrSecret = "b"

func secretPK(tenant string) string { return tenant + "#x" }

// Secret implements sluice.SecretStore: the first node to need a secret
// puts it, conditioned on there being none; every other node reads the one
// that won.
func (s *Store) Secret(ctx context.Context, tenant, name string) ([]byte, error) {
	k := key(secretPK(tenant), name)
	for range 2 {
		out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &s.table, Key: k, ConsistentRead: aws.Bool(true)})
		if err != nil {
			return nil, unavailable("secret", err)
		}
		if len(out.Item) > 0 {
			if b, ok := out.Item[attrSecret].(*types.AttributeValueMemberB); ok && len(b.Value) == sluice.SecretLen {
				return b.Value, nil
			}
			return nil, &sluice.Error{Op: "dynamostore.secret", Kind: sluice.KindInternal, Message: "secret item " + name + " of tenant " + tenant + " is malformed"}
		}
		b := make([]byte, sluice.SecretLen)
		rand.Read(b)
		item := key(secretPK(tenant), name)
		item[attrSecret] = &types.AttributeValueMemberB{Value: b}
		_, err = s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &s.table, Item: item, ConditionExpression: aws.String("attribute_not_exists(pk)")})
		var ccf *types.ConditionalCheckFailedException
		if !errors.As(err, &ccf) {
			if err != nil {
				return nil, unavailable("secret", err)
			}
			return b, nil
		}
		// Another node made it first: read theirs.
	}
	return nil, &sluice.Error{Op: "dynamostore.secret", Kind: sluice.KindUnavailable, Message: "secret " + name + " could not be made"}
}
