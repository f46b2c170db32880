package server

import (
	"net"
	"slices"
	"testing"
)

// TestAllowedHosts: the hosts answered are --allowed-hosts' and the
// advertised URL's, literally, when the server answers only some: always
// without an admin key, with one only if --allowed-hosts names any.
func TestAllowedHosts(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, tc := range []struct {
		c    Config
		want []string
	}{
		{Config{}, []string{"127.0.0.1"}},
		{Config{AdvertiseURL: "http://[fd00::1]:8080", AllowedHosts: []string{"sluice.test"}}, []string{"sluice.test", "fd00::1"}},
		{Config{AdvertiseURL: "http://node-*.internal:8080"}, []string{`node-\*.internal`}},
		{Config{AdminKey: "an-admin-key-0123456789"}, nil},
		{Config{AdminKey: "an-admin-key-0123456789", AllowedHosts: []string{"sluice.test"}}, []string{"sluice.test", "127.0.0.1"}},
	} {
		if got := tc.c.allowedHosts(ln); !slices.Equal(got, tc.want) {
			t.Errorf("%+v: %q, want %q", tc.c, got, tc.want)
		}
	}
}
