package tenancy

import (
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/store/dynamostore"
	"github.com/sluicehq/sluice/store/dynamostore/dynamotest"
)

// TestKeysLeftByAHalfDeletionDoNotReachANewTenant: on DynamoDB a tenant's
// deletion removes its item first and its keys after; one that fails
// between leaves the keys. A tenant created again under the id is a new
// tenant: none of those keys authenticates as it, and its own keys do.
func TestKeysLeftByAHalfDeletionDoNotReachANewTenant(t *testing.T) {
	ctx := dynamotest.Context(t)
	db := dynamotest.Client(t)
	table := dynamotest.TableName(t)
	if err := dynamostore.CreateTable(ctx, db, table); err != nil {
		t.Fatal(err)
	}
	st, err := dynamostore.New(db, dynamostore.Options{Table: table, TenantTTL: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	clock := t0
	s := New(Options{Store: st, Sessions: st, Audit: st, AdminKey: "admin", Config: config.Default, Now: func() time.Time { return clock }})

	if _, err := s.CreateTenant(ctx, admin, TenantDoc{ID: "acme"}); err != nil {
		t.Fatal(err)
	}
	old, err := s.CreateKey(ctx, admin, "acme", "old")
	if err != nil {
		t.Fatal(err)
	}
	if p, err := s.Authenticate(ctx, old.Token); err != nil || p.Tenant != "acme" {
		t.Fatalf("the first tenant's key: %+v, %v", p, err)
	}
	// The first step of a deletion alone: the tenant's item goes, its
	// keys stay.
	if _, err := db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &table, Key: map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: "acme#t"}, "sk": &types.AttributeValueMemberS{Value: "t"},
	}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.GetTenant(ctx, "acme"); !errors.Is(err, sluice.ErrTenantNotFound) {
		t.Fatalf("after its item's deletion the tenant reads %v, want not found", err)
	}

	clock = t0.Add(time.Hour)
	if _, err := s.CreateTenant(ctx, admin, TenantDoc{ID: "acme"}); err != nil {
		t.Fatalf("creating acme again: %v", err)
	}
	if p, err := s.Authenticate(ctx, old.Token); sluice.KindOf(err) != sluice.KindUnauthorized {
		t.Errorf("the earlier tenant's key, after acme was created again: %+v, %v; want unauthorized", p, err)
	}
	fresh, err := s.CreateKey(ctx, admin, "acme", "new")
	if err != nil {
		t.Fatal(err)
	}
	if p, err := s.Authenticate(ctx, fresh.Token); err != nil || p.Tenant != "acme" {
		t.Errorf("the new tenant's key: %+v, %v", p, err)
	}
	keys, err := st.ListAPIKeys(ctx, "acme")
	if err != nil || len(keys) != 1 || keys[0].ID != fresh.ID {
		t.Errorf("acme's keys: %+v, %v; want the new one alone", keys, err)
	}
}
