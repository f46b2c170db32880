package dynamostore

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/dynamostore/dynamotest"
	"github.com/sluicehq/sluice/store/storetest"
)

// TestMain runs the tests against the package's emulator and, once it has
// stopped (ending its clients' idle connections), fails them if any
// goroutine outlives them: a store's refresh and its combined writes end
// at Close.
func TestMain(m *testing.M) {
	code := dynamotest.Main(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// newStore returns a store on a new table of the package's emulator.
func newStore(t testing.TB) *Store {
	t.Helper()
	db := dynamotest.Client(t)
	table := dynamotest.TableName(t)
	if err := CreateTable(dynamotest.Context(t), db, table); err != nil {
		t.Fatal(err)
	}
	s, err := New(db, Options{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) sluice.Store { return newStore(t) })
}

// TestConformanceNoCache runs the suite with a cache of one key, so that
// nearly every write is computed from a stale or missing state and must be
// corrected by its failed condition.
func TestConformanceNoCache(t *testing.T) {
	storetest.Run(t, func(t *testing.T) sluice.Store {
		s := newStore(t)
		s.cache = newCache(1)
		return s
	})
}

func TestCreateTableIsIdempotent(t *testing.T) {
	db := dynamotest.Client(t)
	table := dynamotest.TableName(t)
	for range 2 {
		if err := CreateTable(dynamotest.Context(t), db, table); err != nil {
			t.Fatal(err)
		}
	}
}

func TestTenantsConformance(t *testing.T) {
	storetest.RunTenants(t, func(t *testing.T) sluice.TenantStore { return newStore(t) })
}

// TestListOverrides: the index lists one policy's overrides across tenants,
// and follows updates.
func TestListOverrides(t *testing.T) {
	s := newStore(t)
	ctx := dynamotest.Context(t)
	five, nine := int64(5), int64(9)
	for id, l := range map[string]*int64{"acme": &five, "beta": &nine} {
		if err := s.CreateTenant(ctx, sluice.Tenant{ID: id, Overrides: map[string]sluice.PolicyOverride{"chat": {Limit: l}}}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.ListOverrides(ctx, "chat")
	if err != nil || len(got) != 2 || *got["acme"].Limit != 5 || *got["beta"].Limit != 9 {
		t.Fatalf("%v %v", got, err)
	}
	if err := s.UpdateTenant(ctx, sluice.Tenant{ID: "beta", Version: 1}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.ListOverrides(ctx, "chat"); len(got) != 1 {
		t.Fatalf("after removing beta's override: %v", got)
	}
}

func TestSessionsConformance(t *testing.T) {
	storetest.RunSessions(t, func(t *testing.T) sluice.SessionStore { return newStore(t) })
}

func TestRegistryConformance(t *testing.T) {
	storetest.RunRegistry(t, func(t *testing.T) sluice.Registry { return newStore(t) })
}

func TestAuditConformance(t *testing.T) { storetest.RunAudit(t, newStore(t)) }
