package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/redisstore"
	"github.com/sluicehq/sluice/store/redisstore/redistest"
)

// TestDial: each URL form gives the client it names, and a store on the
// one-server and cluster forms decides.
func TestDial(t *testing.T) {
	single := redistest.Get(t).Addr
	cluster := redistest.StartCluster(t).Addr
	p := sluice.Policy{Name: "p", Algorithm: sluice.FixedWindow, Limit: 1, Window: time.Minute}
	for _, tc := range []struct {
		url  string
		kind string
		run  bool
	}{
		{"redis://" + single + "/0", "single", true},
		{"redis+cluster://" + cluster, "cluster", true},
		{"redis://" + cluster + "?addr=" + cluster, "cluster", true},
		{"redis://127.0.0.1:26379?master_name=mymaster", "single", false}, // a Sentinel client: none runs here
	} {
		c, err := redisstore.Dial(tc.url)
		if err != nil {
			t.Fatalf("%s: %v", tc.url, err)
		}
		defer c.Close()
		kind := "single"
		if _, ok := c.(*redis.ClusterClient); ok {
			kind = "cluster"
		}
		if kind != tc.kind {
			t.Fatalf("%s: a %s client, want %s", tc.url, kind, tc.kind)
		}
		if !tc.run {
			continue
		}
		s, err := redisstore.New(c, redisstore.Options{Prefix: redistest.Prefix(t), Timeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		dst := make([]sluice.Decision, 1)
		if err := s.Apply(context.Background(), t0, []sluice.Op{{Key: sluice.Key{Tenant: "a", Policy: "p"}, Policy: &p, Hits: 1}}, dst); err != nil || !dst[0].Allowed {
			t.Fatalf("%s: %+v %v", tc.url, dst[0], err)
		}
	}
	if _, err := redisstore.Dial("redis://h:1?nonsense=1"); err == nil {
		t.Fatal("an unknown option was accepted")
	}
}
