package httpapi

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/tenancy"
)

// TestHostAllowed: without an admin key, loopback names and the allowed
// hosts, with a port or without, in any case; nothing else, however close.
func TestHostAllowed(t *testing.T) {
	h := New(Options{Tenancy: newTenancy(tenancy.Options{}), AllowedHosts: []string{"sluice.test", "*.corp.example.com", "pinned.example.com:8443", "fd00::1"}})
	for host, want := range map[string]bool{
		"":                             true, // HTTP/1.0: not a browser
		"localhost":                    true,
		"LOCALHOST:8080":               true,
		"localhost.:8080":              true,
		"127.0.0.1:8080":               true,
		"127.0.0.53":                   true,
		"[::1]:8080":                   true,
		"[::1]":                        true,
		"[::ffff:127.0.0.1]:8080":      true,
		"sluice.test":                  true,
		"Sluice.Test:9000":             true,
		"a.corp.example.com:8080":      true,
		"pinned.example.com:8443":      true,
		"[fd00::1]:8080":               true,
		"pinned.example.com:8080":      false,
		"pinned.example.com":           false,
		"corp.example.com":             false,
		"rebind.attacker.example":      false,
		"localhost.attacker.example":   false,
		"127.0.0.1.nip.io:8080":        false,
		"0.0.0.0:8080":                 false,
		"10.0.0.1:8080":                false,
		"[fd00::2]:8080":               false,
		"sluice.test.attacker.example": false,
	} {
		if got := h.hostAllowed(host); got != want {
			t.Errorf("host %q: %v, want %v", host, got, want)
		}
	}
}

// TestBrowserWalls: which requests the walls refuse, with an admin key and
// without: the Host wall only without one (or with allowed hosts), the
// Origin wall always, for requests that change state only.
func TestBrowserWalls(t *testing.T) {
	for _, tc := range []struct {
		name                        string
		opts                        Options
		method, host, origin, ctype string
		body                        string
		refused                     bool
	}{
		{"foreign host", Options{}, "GET", "rebind.example", "", "", "", true},
		{"foreign host, admin key", Options{Tenancy: newTenancy(tenancy.Options{AdminKey: "k"})}, "GET", "rebind.example", "", "", "", false},
		{"foreign host, admin key and allowed hosts", Options{Tenancy: newTenancy(tenancy.Options{AdminKey: "k"}), AllowedHosts: []string{"sluice.test"}}, "GET", "rebind.example", "", "", "", true},
		{"foreign origin, admin key", Options{Tenancy: newTenancy(tenancy.Options{AdminKey: "k"})}, "POST", "sluice.test", "https://evil.example", "application/json", "{}", true},
		{"foreign origin reads", Options{}, "GET", "localhost", "https://evil.example", "", "", false},
		{"foreign origin, HEAD", Options{}, "HEAD", "localhost", "https://evil.example", "", "", false},
		{"foreign origin, PATCH", Options{}, "PATCH", "localhost", "https://evil.example", "application/json", "{}", true},
		{"own origin behind a TLS proxy", Options{Tenancy: newTenancy(tenancy.Options{AdminKey: "k"})}, "POST", "sluice.test", "https://sluice.test", "application/json", "{}", false},
		{"own origin, another scheme", Options{}, "POST", "localhost:8080", "ftp://localhost:8080", "application/json", "{}", true},
		{"empty origin", Options{}, "POST", "localhost", "", "application/json", "{}", true}, // no browser sends it
		{"allowed origin pattern", Options{AllowedOrigins: []string{"https://*.example.com"}}, "POST", "localhost", "https://app.example.com", "application/json", "{}", false},
		{"allowed origin pattern, other scheme", Options{AllowedOrigins: []string{"https://*.example.com"}}, "POST", "localhost", "http://app.example.com", "application/json", "{}", true},
		{"own origin, multipart", Options{}, "POST", "localhost", "http://localhost", "multipart/form-data; boundary=x", "--x--", true},
		{"own origin, JSON with a charset", Options{}, "POST", "localhost", "http://localhost", "application/json; charset=utf-8", "{}", false},
	} {
		if tc.opts.Tenancy == nil {
			tc.opts.Tenancy = newTenancy(tenancy.Options{})
		}
		h := New(tc.opts)
		var body io.Reader
		if tc.body != "" {
			body = strings.NewReader(tc.body)
		}
		r := httptest.NewRequest(tc.method, "/v1/nothing", body)
		r.Host = tc.host
		if tc.origin != "" || tc.name == "empty origin" {
			r.Header.Set("Origin", tc.origin)
		}
		if tc.ctype != "" {
			r.Header.Set("Content-Type", tc.ctype)
		}
		if err := h.checkBrowser(r); (err != nil) != tc.refused {
			t.Errorf("%s: %v, want refused %v", tc.name, err, tc.refused)
		}
	}
}

// TestHealthProbesPassTheHostWall: a kubelet or a load balancer probes a
// node by its address, which --allowed-hosts need not name: /healthz and
// /readyz answer it; every other route, /metrics among them, stays behind
// the wall.
func TestHealthProbesPassTheHostWall(t *testing.T) {
	h := New(Options{Tenancy: newTenancy(tenancy.Options{AdminKey: "0123456789abcdef"}), AllowedHosts: []string{"sluice.internal"}})
	for _, tc := range []struct {
		method, target string
		want           int
	}{
		{"GET", "/healthz", 200},
		{"HEAD", "/healthz", 200},
		{"GET", "/readyz", 200},
		{"GET", "/metrics", 403},
		{"POST", "/healthz", 403},
		{"GET", "/healthz/../v1/tenants", 403},
		{"GET", "/v1/tenants", 403},
	} {
		r := httptest.NewRequest(tc.method, tc.target, nil)
		r.Host = "192.0.2.10:8080"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tc.want {
			t.Errorf("%s %s by address: %d, want %d", tc.method, tc.target, w.Code, tc.want)
		}
	}
}
