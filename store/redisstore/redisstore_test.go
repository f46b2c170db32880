package redisstore_test

import (
	"os"
	"testing"

	"github.com/redis/go-redis/v9"

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

// suites runs every storetest suite the store passes on stores made by
// newStore.
func suites(t *testing.T, newStore func(t *testing.T) *redisstore.Store) {
	t.Run("Counters", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) sluice.Store { return newStore(t) })
	})
	t.Run("Tenants", func(t *testing.T) {
		storetest.RunTenants(t, func(t *testing.T) sluice.TenantStore { return newStore(t) })
	})
	t.Run("Sessions", func(t *testing.T) {
		storetest.RunSessions(t, func(t *testing.T) sluice.SessionStore { return newStore(t) })
	})
	t.Run("Registry", func(t *testing.T) {
		storetest.RunRegistry(t, func(t *testing.T) sluice.Registry { return newStore(t) })
	})
	t.Run("Audit", func(t *testing.T) { storetest.RunAudit(t, newStore(t)) })
}

// TestConformance runs the suites on a standalone Redis.
func TestConformance(t *testing.T) {
	suites(t, func(t *testing.T) *redisstore.Store { return newStore(t, redisstore.Options{}) })
}

// TestCluster runs the suites on Redis Cluster, which refuses a script
// whose keys are in two slots: every key of a tenant carries its hash tag.
func TestCluster(t *testing.T) {
	srv := redistest.StartCluster(t)
	suites(t, func(t *testing.T) *redisstore.Store {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{srv.Addr}})
		t.Cleanup(func() { c.Close() })
		s, err := redisstore.New(c, redisstore.Options{Prefix: redistest.Prefix(t)})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}
