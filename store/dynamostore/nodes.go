package dynamostore

import (
	"context"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// The nodes of a cluster, for the dashboard to sum what each decided: one
// item per node in one partition (pk "#nodes", sk the node's base URL;
// outside every tenant's keys, "<tenant>#…", so that no role scoped to a
// tenant can name a node, to which the nodes send the admin key), holding until when it counts as live. A node announces itself
// every few seconds (one write), a dashboard lists them (one Query, a read
// unit per 4 KB of nodes).
const nodesPK = "#nodes"

const attrUntil = "until"

// Announce records node as live until until.
func (st *Store) Announce(ctx context.Context, node string, until time.Time) error {
	item := key(nodesPK, node)
	item[attrUntil] = &types.AttributeValueMemberN{Value: strconv.FormatInt(until.UnixMilli(), 10)}
	item[attrTTL] = &types.AttributeValueMemberN{Value: strconv.FormatInt(until.Add(24*time.Hour).Unix(), 10)}
	_, err := st.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &st.table, Item: item})
	return unavailableIf("announce", err)
}

// Nodes returns the nodes live at now, by URL.
func (st *Store) Nodes(ctx context.Context, now time.Time) ([]string, error) {
	var out []string
	err := st.query(ctx, &dynamodb.QueryInput{
		TableName:                 &st.table,
		KeyConditionExpression:    aws.String("pk = :p"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":p": str(nodesPK)},
	}, func(item map[string]types.AttributeValue) error {
		u, _ := item[attrUntil].(*types.AttributeValueMemberN)
		sk, _ := item[attrSK].(*types.AttributeValueMemberS)
		if u == nil || sk == nil {
			return nil
		}
		if ms, err := strconv.ParseInt(u.Value, 10, 64); err == nil && ms > now.UnixMilli() {
			out = append(out, sk.Value)
		}
		return nil
	})
	return out, err
}
