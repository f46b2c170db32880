package dynamostore

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// globalTable plays DynamoDB's control plane for AddReplicas: no emulator
// here has global tables. It records the updates, and applies them.
type globalTable struct {
	stream   bool
	replicas []string
	updates  []string
}

func (g *globalTable) DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, _ ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error) {
	d := &types.TableDescription{TableStatus: types.TableStatusActive, StreamSpecification: &types.StreamSpecification{StreamEnabled: aws.Bool(g.stream)}}
	for _, r := range g.replicas {
		d.Replicas = append(d.Replicas, types.ReplicaDescription{RegionName: aws.String(r), ReplicaStatus: types.ReplicaStatusActive})
	}
	return &dynamodb.DescribeTableOutput{Table: d}, nil
}

func (g *globalTable) UpdateTable(ctx context.Context, in *dynamodb.UpdateTableInput, _ ...func(*dynamodb.Options)) (*dynamodb.UpdateTableOutput, error) {
	switch {
	case in.StreamSpecification != nil:
		if in.StreamSpecification.StreamViewType != types.StreamViewTypeNewAndOldImages {
			g.updates = append(g.updates, "bad stream view")
		}
		g.stream = true
		g.updates = append(g.updates, "stream")
	case len(in.ReplicaUpdates) == 1 && in.ReplicaUpdates[0].Create != nil:
		r := *in.ReplicaUpdates[0].Create.RegionName
		g.replicas = append(g.replicas, r)
		g.updates = append(g.updates, "replica "+r)
	default:
		g.updates = append(g.updates, "unexpected")
	}
	return &dynamodb.UpdateTableOutput{}, nil
}

// AddReplicas turns the stream on, then adds each missing replica, one
// update at a time; run again, it changes nothing.
func TestAddReplicas(t *testing.T) {
	g := &globalTable{replicas: []string{"us-east-1"}}
	if err := AddReplicas(context.Background(), g, "sluice", []string{"us-east-1", "eu-west-1", "ap-south-1"}); err != nil {
		t.Fatal(err)
	}
	want := []string{"stream", "replica eu-west-1", "replica ap-south-1"}
	if len(g.updates) != len(want) {
		t.Fatalf("updates %v, want %v", g.updates, want)
	}
	for i := range want {
		if g.updates[i] != want[i] {
			t.Fatalf("updates %v, want %v", g.updates, want)
		}
	}
	if err := AddReplicas(context.Background(), g, "sluice", []string{"eu-west-1", "ap-south-1"}); err != nil || len(g.updates) != 3 {
		t.Fatalf("again: %v, updates %v", err, g.updates)
	}
}
