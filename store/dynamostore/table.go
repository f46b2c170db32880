package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// TableAPI is the part of the DynamoDB client CreateTable uses.
type TableAPI interface {
	CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, opts ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, opts ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	UpdateTimeToLive(ctx context.Context, in *dynamodb.UpdateTimeToLiveInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error)
}

// CreateTable creates the table (on-demand billing, partition key pk and
// sort key sk, both strings, and the sparse index gsi1) unless it exists, waits until it is active, and
// turns TTL on for the ttl attribute. It is idempotent.
func CreateTable(ctx context.Context, db TableAPI, table string) error {
	_, err := db.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:   &table,
		BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String(attrPK), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String(attrSK), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String(attrGSI1PK), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String(attrGSI1SK), AttributeType: types.ScalarAttributeTypeS},
		},
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String(attrPK), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String(attrSK), KeyType: types.KeyTypeRange},
		},
		// A sparse index: tenants (to list them) and tenants' policy
		// overrides (to list one policy's limits across tenants).
		GlobalSecondaryIndexes: []types.GlobalSecondaryIndex{{
			IndexName: aws.String(indexGSI1),
			KeySchema: []types.KeySchemaElement{
				{AttributeName: aws.String(attrGSI1PK), KeyType: types.KeyTypeHash},
				{AttributeName: aws.String(attrGSI1SK), KeyType: types.KeyTypeRange},
			},
			Projection: &types.Projection{ProjectionType: types.ProjectionTypeAll},
		}},
	})
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return fmt.Errorf("dynamostore: create table %s: %w", table, err)
	}
	for {
		out, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &table})
		if err != nil {
			return fmt.Errorf("dynamostore: describe table %s: %w", table, err)
		}
		if out.Table.TableStatus == types.TableStatusActive {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	_, err = db.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName:               &table,
		TimeToLiveSpecification: &types.TimeToLiveSpecification{AttributeName: aws.String(attrTTL), Enabled: aws.Bool(true)},
	})
	if err != nil && !ttlAlreadyOn(err) {
		return fmt.Errorf("dynamostore: TTL on %s: %w", table, err)
	}
	return nil
}

// ttlAlreadyOn reports whether err says TTL is already enabled, which
// DynamoDB answers as a validation error.
func ttlAlreadyOn(err error) bool {
	var api interface{ ErrorMessage() string }
	return errors.As(err, &api) && strings.Contains(api.ErrorMessage(), "already enabled")
}

// GlobalTableAPI is what AddReplicas needs.
type GlobalTableAPI interface {
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, opts ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	UpdateTable(ctx context.Context, in *dynamodb.UpdateTableInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateTableOutput, error)
}

// AddReplicas makes the table a global table (version 2019.11.21) with a
// replica in each of regions it lacks: it turns the table's stream on
// (new and old images, which replication needs), then adds the replicas
// one at a time, as DynamoDB allows, waiting each time until the table is
// active again. It is idempotent: regions that hold a replica already are
// skipped.
func AddReplicas(ctx context.Context, db GlobalTableAPI, table string, regions []string) error {
	out, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &table})
	if err != nil {
		return fmt.Errorf("dynamostore: describe table %s: %w", table, err)
	}
	if s := out.Table.StreamSpecification; s == nil || s.StreamEnabled == nil || !*s.StreamEnabled {
		_, err := db.UpdateTable(ctx, &dynamodb.UpdateTableInput{
			TableName:           &table,
			StreamSpecification: &types.StreamSpecification{StreamEnabled: aws.Bool(true), StreamViewType: types.StreamViewTypeNewAndOldImages},
		})
		if err != nil {
			return fmt.Errorf("dynamostore: stream on %s: %w", table, err)
		}
		if out, err = waitActive(ctx, db, table); err != nil {
			return err
		}
	}
	have := map[string]bool{}
	for _, r := range out.Table.Replicas {
		if r.RegionName != nil {
			have[*r.RegionName] = true
		}
	}
	for _, region := range regions {
		if have[region] {
			continue
		}
		_, err := db.UpdateTable(ctx, &dynamodb.UpdateTableInput{
			TableName:      &table,
			ReplicaUpdates: []types.ReplicationGroupUpdate{{Create: &types.CreateReplicationGroupMemberAction{RegionName: aws.String(region)}}},
		})
		if err != nil {
			return fmt.Errorf("dynamostore: replica of %s in %s: %w", table, region, err)
		}
		if _, err := waitActive(ctx, db, table); err != nil {
			return err
		}
	}
	return nil
}

// waitActive waits until the table and all its replicas are active.
func waitActive(ctx context.Context, db GlobalTableAPI, table string) (*dynamodb.DescribeTableOutput, error) {
	for {
		out, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &table})
		if err != nil {
			return nil, fmt.Errorf("dynamostore: describe table %s: %w", table, err)
		}
		active := out.Table.TableStatus == types.TableStatusActive
		for _, r := range out.Table.Replicas {
			active = active && r.ReplicaStatus == types.ReplicaStatusActive
		}
		if active {
			return out, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}
