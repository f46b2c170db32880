package benchws

import (
	"strings"
	"testing"
	"time"
)

// TestValidate: load goes only to loopback, on every node, and each bad
// field is an error naming its flag.
func TestValidate(t *testing.T) {
	ok := Config{URL: "http://127.0.0.1:8080", Idle: 10_000, Conns: 1_000, Rate: 1_000, Duration: 10 * time.Second,
		Fanout: 100, Burst: 1_000, SlowFrame: 32 << 10, SlowQueue: "pooled", SlowFor: 10 * time.Second}
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string // in the error; "" for none
	}{
		{"defaults", func(*Config) {}, ""},
		{"nodes", func(c *Config) { c.URL = "http://127.0.0.1:8080,http://localhost,http://[::1]:8082/" }, ""},
		{"slow", func(c *Config) { c.Slow, c.Self = 2, []string{"bench-ws", "--slow", "2"} }, ""},
		{"not a URL", func(c *Config) { c.URL = "127.0.0.1:8080" }, "--url"},
		{"one node off loopback", func(c *Config) { c.URL = "http://127.0.0.1:8080,http://192.0.2.1:8080" }, "not on loopback"},
		{"no conns", func(c *Config) { c.Conns = 0 }, "--conns"},
		{"rate", func(c *Config) { c.Rate = 0 }, "--rate"},
		{"duration", func(c *Config) { c.Duration = 0 }, "--duration"},
		{"fanout", func(c *Config) { c.Fanout = 1_001 }, "--fanout"},
		{"burst", func(c *Config) { c.Burst = -1 }, "--burst"},
		{"slow frame", func(c *Config) { c.SlowFrame = 0 }, "--slow-frame"},
		{"slow duration", func(c *Config) { c.SlowFor = time.Millisecond }, "--slow-duration"},
		{"slow queue", func(c *Config) { c.SlowQueue = "fast" }, "--slow-queue"},
		{"slow without Self", func(c *Config) { c.Slow = 2 }, "Self"},
		{"store metrics", func(c *Config) { c.StoreMetrics, c.IdleWindow = "http://127.0.0.1:18399/metrics", time.Second }, ""},
		{"store metrics off loopback", func(c *Config) { c.StoreMetrics, c.IdleWindow = "http://192.0.2.1:18399/metrics", time.Second }, "--store-metrics"},
		{"store metrics not a URL", func(c *Config) { c.StoreMetrics, c.IdleWindow = "127.0.0.1:18399", time.Second }, "--store-metrics"},
		{"idle window", func(c *Config) { c.StoreMetrics = "http://[::1]:18399/metrics" }, "--idle-window"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.edit(&c)
			err := c.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("%+v: %v", c, err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("%+v: %v, want an error naming %s", c, err, tc.want)
			}
		})
	}
}
