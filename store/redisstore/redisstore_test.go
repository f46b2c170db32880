package redisstore_test

import (
	"os"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/redisstore"
	"github.com/sluicehq/sluice/store/redisstore/redistest"
	"github.com/sluicehq/sluice/store/storetest"
)

func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }

func newStore(t *testing.T, opts redisstore.Options) *redisstore.Store {
	t.Helper()
	if opts.Prefix == "" {
		opts.Prefix = redistest.Prefix(t)
	}
	s, err := redisstore.New(redistest.Client(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) sluice.Store { return newStore(t, redisstore.Options{}) })
}

func TestTenants(t *testing.T) {
	storetest.RunTenants(t, func(t *testing.T) sluice.TenantStore { return newStore(t, redisstore.Options{}) })
}

func TestAudit(t *testing.T) {
	storetest.RunAudit(t, newStore(t, redisstore.Options{}))
}

func TestSessions(t *testing.T) {
	storetest.RunSessions(t, func(t *testing.T) sluice.SessionStore { return newStore(t, redisstore.Options{}) })
}

func TestRegistry(t *testing.T) {
	storetest.RunRegistry(t, func(t *testing.T) sluice.Registry { return newStore(t, redisstore.Options{}) })
}
