package httplimit

import (
	"net/http/httptest"
	"testing"
)

// TestClientIP: a policy keyed by ip takes the client's address, from
// X-Forwarded-For only through a trusted proxy.
func TestClientIP(t *testing.T) {
	tr, err := ParsePrefixes("10.0.0.0/8, 127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ peer, xff, want string }{
		{"203.0.113.9:5000", "1.2.3.4", "203.0.113.9"}, // untrusted peer: header ignored
		{"127.0.0.1:5000", "1.2.3.4", "1.2.3.4"},
		{"127.0.0.1:5000", "1.2.3.4, 10.1.1.1", "1.2.3.4"},  // skip trusted hops from the right
		{"127.0.0.1:5000", "6.6.6.6, 1.2.3.4", "1.2.3.4"},   // a spoofed left entry is not believed
		{"127.0.0.1:5000", "garbage, 10.0.0.1", "10.0.0.1"}, // stop at malformed
		{"[::1]:5000", "1.2.3.4", "::1"},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = tc.peer
		r.Header.Set("X-Forwarded-For", tc.xff)
		if got := ClientIP(r, tr).String(); got != tc.want {
			t.Errorf("peer %s xff %q: %s, want %s", tc.peer, tc.xff, got, tc.want)
		}
	}
}
