package dynamotest

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"go.uber.org/goleak"
)

// TestMain runs the tests against the package's emulator and, once it has
// stopped (ending its clients' idle connections), fails them if any
// goroutine outlives them: a Replicator's scans end at Close.
func TestMain(m *testing.M) {
	code := Main(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// Regions returns n servers of the test's own, each with the table, as
// the regions of a global table.
func regions(t *testing.T, n int, table string) []*dynamodb.Client {
	t.Helper()
	var dbs []*dynamodb.Client
	for range n {
		s := StartOwn(t)
		db := NewClient(s.Endpoint)
		_, err := db.CreateTable(Context(t), &dynamodb.CreateTableInput{
			TableName:   &table,
			BillingMode: types.BillingModePayPerRequest,
			AttributeDefinitions: []types.AttributeDefinition{
				{AttributeName: str("pk"), AttributeType: types.ScalarAttributeTypeS},
				{AttributeName: str("sk"), AttributeType: types.ScalarAttributeTypeS},
			},
			KeySchema: []types.KeySchemaElement{
				{AttributeName: str("pk"), KeyType: types.KeyTypeHash},
				{AttributeName: str("sk"), KeyType: types.KeyTypeRange},
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		dbs = append(dbs, db)
	}
	return dbs
}

func str(s string) *string { return &s }

func put(t *testing.T, db *dynamodb.Client, table, pk, n string) {
	t.Helper()
	_, err := db.PutItem(Context(t), &dynamodb.PutItemInput{TableName: &table, Item: map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: pk}, "sk": &types.AttributeValueMemberS{Value: "c"}, "n": &types.AttributeValueMemberN{Value: n},
	}})
	if err != nil {
		t.Fatal(err)
	}
}

func get(t *testing.T, db *dynamodb.Client, table, pk string) string {
	t.Helper()
	out, err := db.GetItem(Context(t), &dynamodb.GetItemInput{TableName: &table, ConsistentRead: boolPtr(true), Key: map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: pk}, "sk": &types.AttributeValueMemberS{Value: "c"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if n, ok := out.Item["n"].(*types.AttributeValueMemberN); ok {
		return n.Value
	}
	return ""
}

// eventually waits up to d for f to hold.
func eventually(d time.Duration, f func() bool) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if f() {
			return true
		}
	}
	return f()
}

// An item written in one region reaches the others after the lag, not
// before; of two writes of one item in two regions, one wins everywhere;
// a region cut off neither sends nor receives until the cut ends.
func TestReplicator(t *testing.T) {
	table := TableName(t)
	dbs := regions(t, 3, table)
	apis := []ReplicaAPI{dbs[0], dbs[1], dbs[2]}
	lag := 300 * time.Millisecond
	r := NewReplicator(table, apis, lag, 20*time.Millisecond)
	defer func() {
		if err := r.Close(); err != nil {
			t.Error(err)
		}
	}()

	put(t, dbs[0], table, "a", "1")
	wrote := time.Now()
	if !eventually(5*time.Second, func() bool { return get(t, dbs[1], table, "a") == "1" && get(t, dbs[2], table, "a") == "1" }) {
		t.Fatalf("the write of region 0 never reached the others: %q %q", get(t, dbs[1], table, "a"), get(t, dbs[2], table, "a"))
	}
	if took := time.Since(wrote); took < lag {
		t.Errorf("the write reached the others after %v, before the lag of %v", took, lag)
	}

	// Two regions write one item at once: one value wins in all three.
	put(t, dbs[0], table, "b", "10")
	put(t, dbs[1], table, "b", "20")
	if !eventually(5*time.Second, func() bool {
		v := get(t, dbs[0], table, "b")
		return v != "" && v == get(t, dbs[1], table, "b") && v == get(t, dbs[2], table, "b")
	}) {
		t.Fatalf("regions disagree on b: %q %q %q", get(t, dbs[0], table, "b"), get(t, dbs[1], table, "b"), get(t, dbs[2], table, "b"))
	}
	if v := get(t, dbs[0], table, "b"); v != "10" && v != "20" {
		t.Errorf("b is %q, want one of the writes", v)
	}

	// Region 2 cut off for a second: its write stays home, the others'
	// do not reach it, until the cut ends.
	r.Cut(2, time.Second)
	put(t, dbs[2], table, "c", "3")
	put(t, dbs[0], table, "d", "4")
	time.Sleep(2 * lag)
	if get(t, dbs[0], table, "c") != "" || get(t, dbs[2], table, "d") != "" {
		t.Errorf("writes crossed the cut: c in region 0 %q, d in region 2 %q", get(t, dbs[0], table, "c"), get(t, dbs[2], table, "d"))
	}
	if get(t, dbs[1], table, "d") != "4" {
		t.Errorf("region 1 lacks region 0's write during region 2's cut")
	}
	if !eventually(5*time.Second, func() bool { return get(t, dbs[0], table, "c") == "3" && get(t, dbs[2], table, "d") == "4" }) {
		t.Errorf("after the cut: c in region 0 %q, d in region 2 %q", get(t, dbs[0], table, "c"), get(t, dbs[2], table, "d"))
	}
	if err := r.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := r.Stats(); st.Found < 5 || st.Copied < 8 {
		t.Errorf("stats %+v", st)
	}
}
