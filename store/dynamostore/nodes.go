package dynamostore

import (
	"context"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sluicehq/sluice"
)

// The nodes of a cluster: one item per run of a node (sluice.Heartbeat) in
// one partition (pk "#nodes", sk "<node URL>#<tag>"; outside every
// tenant's keys, "<tenant>#…", so that no role scoped to a tenant can name
// a node, to which the nodes send the admin key), holding the node's URL,
// its run's tag and until when it counts as live. A node announces itself
// every few seconds (one write), and reads the list as often (one Query, a
// read unit per 4 KB of runs). A run's item stays a day past its until
// (its ttl), so that the other nodes know its tag as dead's for as long as
// its leases may live.
const nodesPK = "#nodes"

const (
	attrUntil = "until"
	attrTag   = "tag"
)

// NodesKept is how long a node's item stays past its until.
const NodesKept = 24 * time.Hour

// Announce records h.
func (st *Store) Announce(ctx context.Context, h sluice.Heartbeat) error {
	item := key(nodesPK, h.Node+"#"+strconv.Itoa(int(h.Tag)))
	item[attrNode] = str(h.Node)
	item[attrTag] = &types.AttributeValueMemberN{Value: strconv.Itoa(int(h.Tag))}
	item[attrUntil] = &types.AttributeValueMemberN{Value: strconv.FormatInt(h.Until.UnixMilli(), 10)}
	item[attrTTL] = &types.AttributeValueMemberN{Value: strconv.FormatInt(h.Until.Add(NodesKept).Unix(), 10)}
	_, err := st.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &st.table, Item: item})
	return unavailableIf("announce", err)
}

// Heartbeats returns every run of a node recorded, live or not. An item of
// an older version (sk the URL, no tag) is a run of tag 0.
func (st *Store) Heartbeats(ctx context.Context) ([]sluice.Heartbeat, error) {
	var out []sluice.Heartbeat
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
		ms, err := strconv.ParseInt(u.Value, 10, 64)
		if err != nil {
			return nil
		}
		h := sluice.Heartbeat{Node: sk.Value, Until: time.UnixMilli(ms)}
		if n, ok := item[attrNode].(*types.AttributeValueMemberS); ok {
			h.Node = n.Value
		}
		if t, ok := item[attrTag].(*types.AttributeValueMemberN); ok {
			if v, err := strconv.ParseUint(t.Value, 10, 16); err == nil {
				h.Tag = uint16(v)
			}
		}
		out = append(out, h)
		return nil
	})
	return out, err
}
