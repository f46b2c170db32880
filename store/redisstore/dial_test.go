package redisstore_test

import (
	"context"
	"crypto/x509"
	"strings"
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

// TestDialRefuses: a URL naming no host (go-redis would reach
// localhost:6379), a CA for a URL without TLS and a URL that does not
// parse are refused, and no error repeats the password.
func TestDialRefuses(t *testing.T) {
	for _, tc := range []struct {
		url  string
		ca   bool
		want string
	}{
		{"redis://:hunter2@/0", false, "names no host"},
		{"redis://:hunter2@:6379", false, "names no host"},
		{"rediss://user:hunter2@", false, "names no host"},
		{"unix://:hunter2@", false, "names no host"},
		{"redis://:hunter2@h:6379/0", true, "not TLS"},
		{"redis://:hunter2@h:port/0", false, "invalid port"},
		{"redis://:hunter2@h:6379/0?bogus=1", false, "unexpected option"},
	} {
		var o redisstore.DialOptions
		if tc.ca {
			o.RootCAs = x509.NewCertPool()
		}
		c, err := redisstore.DialWith(tc.url, o)
		if err == nil {
			c.Close()
			t.Errorf("%s: accepted", tc.url)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: %v, want an error with %q and without the password", tc.url, err, tc.want)
		}
	}
}

// TestRedact: the password of a URL, wherever it is, is hidden; the rest
// stays, to tell which Redis a log names.
func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"redis://h:6379/0":                       "redis://h:6379/0",
		"redis://:pw@h:6379/0":                   "redis://:xxxxx@h:6379/0",
		"rediss://user:pw@h:6380?master_name=m":  "rediss://user:xxxxx@h:6380?master_name=m",
		"redis://h?sentinel_password=pw&addr=h2": "redis://h?addr=h2&sentinel_password=xxxxx",
		"redis://:pw@h:port":                     "redis://(unparsable)",
		"::pw@":                                  "(unparsable)",
	} {
		if got := redisstore.Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}
