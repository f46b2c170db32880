package benchcheck

import (
	"strings"
	"testing"
	"time"
)

// TestValidate: load goes only to loopback, and each bad field is an
// error naming its flag.
func TestValidate(t *testing.T) {
	ok := Config{URL: "http://127.0.0.1:8080", Workers: 50, Keys: 1000, Duration: 10 * time.Second, MaxReqs: 1, Policy: DefaultPolicy}
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string // in the error; "" for none
	}{
		{"defaults", func(*Config) {}, ""},
		{"localhost without a port", func(c *Config) { c.URL = "http://localhost" }, ""},
		{"IPv6 loopback", func(c *Config) { c.URL = "http://[::1]:8080/"; c.GRPC = "[::1]:8081" }, ""},
		{"not a URL", func(c *Config) { c.URL = "127.0.0.1:8080" }, "--url"},
		{"URL off loopback", func(c *Config) { c.URL = "http://192.0.2.1:8080" }, "not on loopback"},
		{"gRPC off loopback", func(c *Config) { c.GRPC = "192.0.2.1:8081" }, "--grpc"},
		{"gRPC without a port", func(c *Config) { c.GRPC = "127.0.0.1" }, "--grpc"},
		{"gRPC limit", func(c *Config) { c.GRPCLimit = 1 << 32 }, "--grpc-limit"},
		{"no workers", func(c *Config) { c.Workers = 0 }, "--workers"},
		{"no keys", func(c *Config) { c.Keys = 0 }, "--keys"},
		{"too long", func(c *Config) { c.Duration = 11 * time.Minute }, "--duration"},
		{"no requests", func(c *Config) { c.MaxReqs = 0 }, "--requests"},
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
