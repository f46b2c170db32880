package dynamostore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sluicehq/sluice"
)

// The audit trail: one item per entry, in a partition per tenant (pk
// "#audit#<tenant>": outside the tenant's own keys, "<tenant>#…", so that
// a role scoped to the tenant (TenantPolicy) cannot touch its trail), sorted by time (sk: nanoseconds, zero-padded, this
// node's sequence, which orders its entries of one nanosecond, and a random
// suffix, so that two nodes' entries of one nanosecond both stay).
// An entry is one write unit (under 1 KB) plus the tenant's records before
// and after; reading n entries is one Query.
func auditPK(tenant string) string { return "#audit#" + tenant }

var _ sluice.AuditLog = (*Store)(nil)

// AppendAudit implements sluice.AuditLog.
func (st *Store) AppendAudit(ctx context.Context, e sluice.AuditEntry) error {
	doc, err := json.Marshal(e)
	if err != nil {
		return err
	}
	var suffix [4]byte
	rand.Read(suffix[:])
	item := key(auditPK(e.Tenant), fmt.Sprintf("%019d#%016x#%s", e.At.UnixNano(), st.auditSeq.Add(1), hex.EncodeToString(suffix[:])))
	item[attrDoc] = str(string(doc))
	_, err = st.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &st.table, Item: item})
	return unavailableIf("append audit", err)
}

// ListAudit implements sluice.AuditLog.
func (st *Store) ListAudit(ctx context.Context, tenant string, n int) ([]sluice.AuditEntry, error) {
	out := []sluice.AuditEntry{}
	in := &dynamodb.QueryInput{
		TableName: &st.table, ConsistentRead: aws.Bool(true), ScanIndexForward: aws.Bool(false),
		KeyConditionExpression:    aws.String("pk = :p"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":p": str(auditPK(tenant))},
	}
	for len(out) < n {
		in.Limit = aws.Int32(int32(n - len(out)))
		page, err := st.db.Query(ctx, in)
		if err != nil {
			return nil, unavailable("list audit", err)
		}
		for _, item := range page.Items {
			var e sluice.AuditEntry
			if err := decodeDoc(item, &e); err != nil {
				return nil, err
			}
			out = append(out, e)
		}
		if len(page.LastEvaluatedKey) == 0 {
			break
		}
		in.ExclusiveStartKey = page.LastEvaluatedKey
	}
	return out, nil
}
