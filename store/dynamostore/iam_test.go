package dynamostore

import (
	"context"
	"encoding/json"
	"path"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/dynamostore/dynamotest"
)

// access is one item-level request as IAM authorises it: an action on a
// resource (the table or an index), with the partition keys it reaches.
type access struct {
	action, resource string
	keys             []string
}

// recorder is the store's API over the real client, recording every
// request's action, resource and partition keys.
type recorder struct {
	*dynamodb.Client
	arn string
	mu  sync.Mutex
	got []access
}

func (r *recorder) add(action string, index *string, keys ...map[string]types.AttributeValue) {
	a := access{action: "dynamodb:" + action, resource: r.arn}
	if index != nil {
		a.resource += "/index/" + *index
	}
	for _, k := range keys {
		for _, name := range []string{attrPK, attrGSI1PK} {
			if v, ok := k[name].(*types.AttributeValueMemberS); ok {
				a.keys = append(a.keys, v.Value)
			}
		}
	}
	r.mu.Lock()
	r.got = append(r.got, a)
	r.mu.Unlock()
}

func (r *recorder) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	r.add("GetItem", nil, in.Key)
	return r.Client.GetItem(ctx, in, opts...)
}

func (r *recorder) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	r.add("PutItem", nil, in.Item)
	return r.Client.PutItem(ctx, in, opts...)
}

func (r *recorder) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	r.add("UpdateItem", nil, in.Key)
	return r.Client.UpdateItem(ctx, in, opts...)
}

func (r *recorder) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	r.add("DeleteItem", nil, in.Key)
	return r.Client.DeleteItem(ctx, in, opts...)
}

func (r *recorder) Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	// The partition key of a Query is its :p value (the store's
	// convention: "pk = :p" or "gsi1pk = :p").
	r.add("Query", in.IndexName, map[string]types.AttributeValue{attrPK: in.ExpressionAttributeValues[":p"]})
	return r.Client.Query(ctx, in, opts...)
}

func (r *recorder) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	for _, it := range in.TransactItems {
		switch {
		case it.Put != nil:
			r.add("PutItem", nil, it.Put.Item)
		case it.Update != nil:
			r.add("UpdateItem", nil, it.Update.Key)
		case it.Delete != nil:
			r.add("DeleteItem", nil, it.Delete.Key)
		case it.ConditionCheck != nil:
			r.add("ConditionCheckItem", nil, it.ConditionCheck.Key)
		}
	}
	return r.Client.TransactWriteItems(ctx, in, opts...)
}

func (r *recorder) DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, opts ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error) {
	r.add("DescribeTable", nil)
	return r.Client.DescribeTable(ctx, in, opts...)
}

func (r *recorder) take() []access {
	r.mu.Lock()
	defer r.mu.Unlock()
	got := r.got
	r.got = nil
	return got
}

// allows reports whether the policy document (as JSON) allows a, by IAM's
// rules for what TenantPolicy uses: Action and Resource lists with
// wildcards, and a ForAllValues:StringLike (or StringEquals) condition on
// dynamodb:LeadingKeys (true when every key matches one of the patterns,
// or equals one of the values).
func allows(t *testing.T, doc []byte, a access) bool {
	t.Helper()
	var pol struct {
		Statement []struct {
			Effect    string
			Action    []string
			Resource  []string
			Condition map[string]map[string][]string
		}
	}
	if err := json.Unmarshal(doc, &pol); err != nil {
		t.Fatal(err)
	}
	like := func(patterns []string, v string) bool {
		return slices.ContainsFunc(patterns, func(p string) bool { ok, _ := path.Match(p, v); return ok })
	}
	for _, st := range pol.Statement {
		if st.Effect != "Allow" || !like(st.Action, a.action) || !like(st.Resource, a.resource) {
			continue
		}
		ok := true
		for op, conds := range st.Condition {
			match := like
			switch {
			case len(conds) != 1 || conds["dynamodb:LeadingKeys"] == nil:
				t.Fatalf("a condition this test cannot evaluate: %s %v", op, conds)
			case op == "ForAllValues:StringEquals":
				match = slices.Contains[[]string]
			case op != "ForAllValues:StringLike":
				t.Fatalf("a condition this test cannot evaluate: %s %v", op, conds)
			}
			for _, k := range a.keys {
				ok = ok && match(conds["dynamodb:LeadingKeys"], k)
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// TestTenantPolicyCoversTheStore: a store whose every request is recorded
// runs a tenant's whole workload (counters of every algorithm, one key and
// several, leases released and renewed, its tenant item, API keys,
// sessions, registrations, readiness); every request, as IAM sees it, is
// allowed by TenantPolicy for that tenant. The cross-tenant listings of the
// admin API are not, and another tenant's key is not.
func TestTenantPolicyCoversTheStore(t *testing.T) {
	const arn = "arn:aws:dynamodb:us-east-1:123456789012:table/sluice"
	doc, err := json.Marshal(TenantPolicy("acme", arn))
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{Client: dynamotest.Client(t), arn: arn}
	table := dynamotest.TableName(t)
	if err := CreateTable(dynamotest.Context(t), rec.Client, table); err != nil {
		t.Fatal(err)
	}
	s, err := New(rec, Options{Table: table, TenantTTL: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := dynamotest.Context(t)
	now := time.Now()
	// The admin creates the tenant, under its own role.
	if err := s.CreateTenant(ctx, sluice.Tenant{ID: "acme"}); err != nil {
		t.Fatal(err)
	}
	rec.take()

	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.Ping(ctx))
	var ops []sluice.Op
	for _, alg := range sluice.Algorithms {
		p := sluice.Policy{Name: alg.String(), Algorithm: alg, Limit: 10, Window: time.Hour, LeaseTTL: time.Hour}
		if alg == sluice.Concurrency {
			p.Window = 0
		}
		for _, space := range []sluice.Space{sluice.SpacePolicy, sluice.SpaceInline, sluice.SpaceInternal} {
			op := sluice.Op{Key: sluice.Key{Tenant: "acme", Space: space, Algorithm: alg, Policy: p.Name, Value: "u\xff"}, Policy: &p, Hits: 1}
			ops = append(ops, op)
			dst := make([]sluice.Decision, 1)
			must(s.Apply(ctx, now, []sluice.Op{op}, dst))
			if alg == sluice.Concurrency {
				_, err := s.Renew(ctx, now, op.Key, &p, dst[0].Lease.ID)
				must(err)
				_, err = s.Release(ctx, now, op.Key, &p, dst[0].Lease.ID)
				must(err)
			}
			op.Hits = 0
			must(s.Apply(ctx, now, []sluice.Op{op}, dst))
		}
	}
	must(s.Apply(ctx, now, ops, make([]sluice.Decision, len(ops))))
	_, err = s.GetTenant(ctx, "acme")
	must(err)
	must(s.PutAPIKey(ctx, sluice.APIKey{ID: "k1", Tenant: "acme", Hash: []byte("h")}))
	_, err = s.GetAPIKey(ctx, "acme", "k1")
	must(err)
	_, err = s.ListAPIKeys(ctx, "acme")
	must(err)
	must(s.DeleteAPIKey(ctx, "acme", "k1"))
	must(s.CreateSession(ctx, sluice.Session{Tenant: "acme", ID: "s1", CreatedAt: now, ExpiresAt: now.Add(time.Hour)}))
	_, err = s.GetSession(ctx, now, "acme", "s1")
	must(err)
	_, err = s.TouchSession(ctx, now, "acme", "s1", now.Add(2*time.Hour))
	must(err)
	must(s.Register(ctx, sluice.Registration{Tenant: "acme", Session: "s1", Node: "http://n", ExpiresAt: now.Add(time.Hour)}))
	_, err = s.Registrations(ctx, now, "acme", "s1")
	must(err)
	must(s.Deregister(ctx, "acme", "s1", "http://n"))
	must(s.DeleteSession(ctx, now, "acme", "s1"))
	// The node's own heartbeat, which its WebSocket admission needs.
	must(s.Announce(ctx, sluice.Heartbeat{Node: "http://n", Tag: 7, Until: now.Add(time.Minute)}))
	_, err = s.Heartbeats(ctx)
	must(err)

	got := rec.take()
	seen := map[string]bool{}
	for _, a := range got {
		seen[a.action] = true
		if !allows(t, doc, a) {
			t.Errorf("acme's policy refuses %s on %s of %q", a.action, a.resource, a.keys)
		}
	}
	for _, action := range []string{"GetItem", "PutItem", "UpdateItem", "DeleteItem", "Query", "ConditionCheckItem", "DescribeTable"} {
		if !seen["dynamodb:"+action] {
			t.Errorf("the workload made no %s: the test covers less than it says", action)
		}
	}

	// The walls: another tenant's items, and the admin's listings.
	_, err = s.ListTenants(ctx)
	must(err)
	_, err = s.ListOverrides(ctx, "chat")
	must(err)
	_, err = s.GetTenant(ctx, "beta")
	if err == nil {
		t.Fatal("beta found")
	}
	for _, a := range rec.take() {
		if allows(t, doc, a) {
			t.Errorf("acme's policy allows %s on %s of %q", a.action, a.resource, a.keys)
		}
	}
}
