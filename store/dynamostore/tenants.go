package dynamostore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sluicehq/sluice"
)

var _ sluice.TenantStore = (*Store)(nil)

// Tenant items (docs/dynamodb.md):
//
//	tenant:    pk "<tenant>#t"  sk "t"         doc (JSON)  gsi1pk "tenants"         gsi1sk "<tenant>"
//	override:  pk "<tenant>#t"  sk "o#<pol>"   doc (JSON)  gsi1pk "policy#<pol>"    gsi1sk "<tenant>"
//	API key:   pk "<tenant>#k"  sk "<key id>"  doc (JSON, with the secret's hash)
//
// The override items duplicate the tenant's overrides so that the index
// lists every tenant's limit on one policy (seed 002's service limits).
const (
	attrDoc    = "doc"
	attrVer    = "ver" // the tenant's version (Tenant.Version), for UpdateTenant's condition
	attrGSI1PK = "gsi1pk"
	attrGSI1SK = "gsi1sk"
	indexGSI1  = "gsi1"
	skTenant   = "t"
)

func tenantPK(id string) string   { return id + "#t" }
func keysPK(tenant string) string { return tenant + "#k" }

func str(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }

// tenantWrites returns the transaction items that write t: its item,
// conditioned by cond (with its values), its override items, and deletes
// of the override items it no longer has.
func (st *Store) tenantWrites(t sluice.Tenant, old *sluice.Tenant, cond string, values map[string]types.AttributeValue) ([]types.TransactWriteItem, error) {
	doc, err := json.Marshal(t)
	if err != nil {
		return nil, err
	}
	item := key(tenantPK(t.ID), skTenant)
	item[attrDoc] = str(string(doc))
	item[attrVer] = num(t.Version)
	item[attrGSI1PK] = str("tenants")
	item[attrGSI1SK] = str(t.ID)
	items := []types.TransactWriteItem{{Put: &types.Put{TableName: &st.table, Item: item, ConditionExpression: aws.String(cond), ExpressionAttributeValues: values}}}
	for name, o := range t.Overrides {
		doc, err := json.Marshal(o)
		if err != nil {
			return nil, err
		}
		it := key(tenantPK(t.ID), "o#"+name)
		it[attrDoc] = str(string(doc))
		it[attrGSI1PK] = str("policy#" + name)
		it[attrGSI1SK] = str(t.ID)
		items = append(items, types.TransactWriteItem{Put: &types.Put{TableName: &st.table, Item: it}})
	}
	if old != nil {
		for name := range old.Overrides {
			if _, ok := t.Overrides[name]; !ok {
				items = append(items, types.TransactWriteItem{Delete: &types.Delete{TableName: &st.table, Key: key(tenantPK(t.ID), "o#"+name)}})
			}
		}
	}
	if len(items) > 100 {
		return nil, sluice.Invalid("overrides", "at most 99 overrides per tenant")
	}
	return items, nil
}

// CreateTenant implements sluice.TenantStore.
func (st *Store) CreateTenant(ctx context.Context, t sluice.Tenant) error {
	t.Version = 1
	items, err := st.tenantWrites(t, nil, "attribute_not_exists(pk)", nil)
	if err != nil {
		return err
	}
	_, err = st.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
	st.tenants.forget(t.ID)
	if conditionFailed(err, 0) {
		return sluice.ErrTenantExists
	}
	return unavailableIf("create tenant", err)
}

// UpdateTenant implements sluice.TenantStore: a transaction conditioned
// on the tenant's version. A tenant written before versions has none, and
// is version 0.
func (st *Store) UpdateTenant(ctx context.Context, t sluice.Tenant) error {
	old, err := st.readTenant(ctx, t.ID)
	if err != nil {
		return err
	}
	if old.Version != t.Version {
		st.tenants.forget(t.ID) // the caller read it from a cache
		return sluice.ErrTenantChanged
	}
	cond, values := "attribute_exists(pk) AND attribute_not_exists(ver)", map[string]types.AttributeValue(nil)
	if t.Version != 0 {
		cond, values = "ver = :v", map[string]types.AttributeValue{":v": num(t.Version)}
	}
	t.Version++
	items, err := st.tenantWrites(t, &old, cond, values)
	if err != nil {
		return err
	}
	_, err = st.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
	st.tenants.forget(t.ID)
	switch {
	case conditionFailed(err, 0):
		if _, rerr := st.readTenant(ctx, t.ID); errors.Is(rerr, sluice.ErrTenantNotFound) {
			return rerr
		}
		return sluice.ErrTenantChanged
	case transactionConflict(err):
		// Another transaction on the tenant at the same moment: it
		// changed, or is changing; contention, not a fault.
		return sluice.ErrTenantChanged
	}
	return unavailableIf("update tenant", err)
}

// GetTenant implements sluice.TenantStore. It answers from the tenant
// cache (Options.TenantTTL) when it can.
func (st *Store) GetTenant(ctx context.Context, id string) (sluice.Tenant, error) {
	t, found, ok, gen := st.tenants.get(id)
	if ok {
		if !found {
			return sluice.Tenant{}, sluice.ErrTenantNotFound
		}
		return t, nil
	}
	t, err := st.readTenant(ctx, id)
	switch {
	case err == nil:
		st.tenants.put(id, t, true, gen)
	case errors.Is(err, sluice.ErrTenantNotFound):
		st.tenants.put(id, sluice.Tenant{}, false, gen)
	}
	return t, err
}

// readTenant reads the tenant from the table, consistently.
func (st *Store) readTenant(ctx context.Context, id string) (sluice.Tenant, error) {
	out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &st.table, Key: key(tenantPK(id), skTenant), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return sluice.Tenant{}, unavailable("get tenant", err)
	}
	if len(out.Item) == 0 {
		return sluice.Tenant{}, sluice.ErrTenantNotFound
	}
	var t sluice.Tenant
	return t, decodeDoc(out.Item, &t)
}

// ListTenants implements sluice.TenantStore, from the index.
func (st *Store) ListTenants(ctx context.Context) ([]sluice.Tenant, error) {
	out := []sluice.Tenant{}
	err := st.query(ctx, &dynamodb.QueryInput{
		TableName: &st.table, IndexName: aws.String(indexGSI1),
		KeyConditionExpression:    aws.String("gsi1pk = :p"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":p": str("tenants")},
	}, func(item map[string]types.AttributeValue) error {
		var t sluice.Tenant
		if err := decodeDoc(item, &t); err != nil {
			return err
		}
		out = append(out, t)
		return nil
	})
	slices.SortFunc(out, func(a, b sluice.Tenant) int { return cmpString(a.ID, b.ID) })
	return out, err
}

// ListOverrides returns every tenant's override of a policy, by tenant, from
// the index: seed 002's listing of the limits of one service.
func (st *Store) ListOverrides(ctx context.Context, policy string) (map[string]sluice.PolicyOverride, error) {
	out := map[string]sluice.PolicyOverride{}
	err := st.query(ctx, &dynamodb.QueryInput{
		TableName: &st.table, IndexName: aws.String(indexGSI1),
		KeyConditionExpression:    aws.String("gsi1pk = :p"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":p": str("policy#" + policy)},
	}, func(item map[string]types.AttributeValue) error {
		var o sluice.PolicyOverride
		if err := decodeDoc(item, &o); err != nil {
			return err
		}
		tenant, _ := item[attrGSI1SK].(*types.AttributeValueMemberS)
		if tenant != nil {
			out[tenant.Value] = o
		}
		return nil
	})
	return out, err
}

// DeleteTenant implements sluice.TenantStore: the tenant, its overrides and
// its API keys. Counters are left to expire.
func (st *Store) DeleteTenant(ctx context.Context, id string) error {
	t, err := st.readTenant(ctx, id)
	if err != nil {
		return err
	}
	keys, err := st.ListAPIKeys(ctx, id)
	if err != nil {
		return err
	}
	// The tenant item goes first and alone, conditioned on existing, so
	// that two deletes cannot both succeed; the rest follows.
	_, err = st.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &st.table, Key: key(tenantPK(id), skTenant), ConditionExpression: aws.String("attribute_exists(pk)")})
	st.tenants.forget(id)
	if conditionFailed(err, -1) {
		return sluice.ErrTenantNotFound
	}
	if err != nil {
		return unavailable("delete tenant", err)
	}
	var rest []map[string]types.AttributeValue
	for name := range t.Overrides {
		rest = append(rest, key(tenantPK(id), "o#"+name))
	}
	for _, k := range keys {
		rest = append(rest, key(keysPK(id), k.ID))
	}
	for _, k := range rest {
		if _, err := st.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &st.table, Key: k}); err != nil {
			return unavailable("delete tenant", err)
		}
	}
	return nil
}

// apiKeyDoc is an APIKey as stored, with its hash.
type apiKeyDoc struct {
	sluice.APIKey
	Hash []byte `json:"hash"`
}

// PutAPIKey implements sluice.TenantStore. The tenant must exist: the key is
// written in a transaction that checks it.
func (st *Store) PutAPIKey(ctx context.Context, k sluice.APIKey) error {
	doc, err := json.Marshal(apiKeyDoc{APIKey: k, Hash: k.Hash})
	if err != nil {
		return err
	}
	item := key(keysPK(k.Tenant), k.ID)
	item[attrDoc] = str(string(doc))
	_, err = st.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{ConditionCheck: &types.ConditionCheck{TableName: &st.table, Key: key(tenantPK(k.Tenant), skTenant), ConditionExpression: aws.String("attribute_exists(pk)")}},
		{Put: &types.Put{TableName: &st.table, Item: item}},
	}})
	if conditionFailed(err, 0) {
		return sluice.ErrTenantNotFound
	}
	return unavailableIf("put key", err)
}

// GetAPIKey implements sluice.TenantStore.
func (st *Store) GetAPIKey(ctx context.Context, tenant, id string) (sluice.APIKey, error) {
	out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &st.table, Key: key(keysPK(tenant), id), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return sluice.APIKey{}, unavailable("get key", err)
	}
	if len(out.Item) == 0 {
		return sluice.APIKey{}, sluice.ErrKeyNotFound
	}
	var d apiKeyDoc
	if err := decodeDoc(out.Item, &d); err != nil {
		return sluice.APIKey{}, err
	}
	d.APIKey.Hash = d.Hash
	return d.APIKey, nil
}

// ListAPIKeys implements sluice.TenantStore.
func (st *Store) ListAPIKeys(ctx context.Context, tenant string) ([]sluice.APIKey, error) {
	out := []sluice.APIKey{}
	err := st.query(ctx, &dynamodb.QueryInput{
		TableName: &st.table, ConsistentRead: aws.Bool(true),
		KeyConditionExpression:    aws.String("pk = :p"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":p": str(keysPK(tenant))},
	}, func(item map[string]types.AttributeValue) error {
		var d apiKeyDoc
		if err := decodeDoc(item, &d); err != nil {
			return err
		}
		d.APIKey.Hash = d.Hash
		out = append(out, d.APIKey)
		return nil
	})
	return out, err
}

// DeleteAPIKey implements sluice.TenantStore.
func (st *Store) DeleteAPIKey(ctx context.Context, tenant, id string) error {
	_, err := st.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &st.table, Key: key(keysPK(tenant), id), ConditionExpression: aws.String("attribute_exists(pk)")})
	if conditionFailed(err, -1) {
		return sluice.ErrKeyNotFound
	}
	return unavailableIf("delete key", err)
}

// query runs a Query through all its pages.
func (st *Store) query(ctx context.Context, in *dynamodb.QueryInput, each func(map[string]types.AttributeValue) error) error {
	for {
		out, err := st.db.Query(ctx, in)
		if err != nil {
			return unavailable("query", err)
		}
		for _, item := range out.Items {
			if err := each(item); err != nil {
				return err
			}
		}
		if len(out.LastEvaluatedKey) == 0 {
			return nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

func decodeDoc(item map[string]types.AttributeValue, v any) error {
	d, ok := item[attrDoc].(*types.AttributeValueMemberS)
	if !ok {
		return fmt.Errorf("dynamostore: item without a document")
	}
	return json.Unmarshal([]byte(d.Value), v)
}

// conditionFailed reports whether err is a failed condition: of a single
// write (item < 0), or of item number item of a transaction.
func conditionFailed(err error, item int) bool {
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return true
	}
	var tce *types.TransactionCanceledException
	if item >= 0 && errors.As(err, &tce) && item < len(tce.CancellationReasons) {
		c := tce.CancellationReasons[item].Code
		return c != nil && *c == "ConditionalCheckFailed"
	}
	return false
}

// transactionConflict reports whether err is a transaction cancelled for
// another transaction on one of its items at the same time.
func transactionConflict(err error) bool {
	var tce *types.TransactionCanceledException
	if errors.As(err, &tce) {
		for _, r := range tce.CancellationReasons {
			if r.Code != nil && *r.Code == "TransactionConflict" {
				return true
			}
		}
	}
	return false
}

func unavailableIf(op string, err error) error {
	if err == nil {
		return nil
	}
	return unavailable(op, err)
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// conditionItem returns the item a failed single-item condition returned
// (ALL_OLD), if any.
func conditionItem(err error) map[string]types.AttributeValue {
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return ccf.Item
	}
	return nil
}
