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

// TestBracketIPv6: a template's http://$(POD_IP):8080 with an IPv6 pod
// address becomes the URL a dialer and a Host header take; other URLs stay.
func TestBracketIPv6(t *testing.T) {
	for in, want := range map[string]string{
		"http://fd00:10:244::5:8080":    "http://[fd00:10:244::5]:8080",
		"https://fd00:10:244::5:8443/x": "https://[fd00:10:244::5]:8443/x",
		"http://[fd00::5]:8080":         "http://[fd00::5]:8080",
		"http://fd00::1":                "http://[fd00::1]",
		"http://10.0.0.5:8080":          "http://10.0.0.5:8080",
		"http://node-1.sluice:8080":     "http://node-1.sluice:8080",
		"not a url":                     "not a url",
	} {
		if got := BracketIPv6(in); got != want {
			t.Errorf("BracketIPv6(%q) = %q, want %q", in, got, want)
		}
	}
}
