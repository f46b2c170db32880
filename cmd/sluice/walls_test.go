package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// request sends method path with headers (and host as its Host, if any)
// to p, and returns the status and JSON body of the answer.
func request(t *testing.T, p *process, method, path, host string, headers map[string]string, body string) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, "http://"+p.addr+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if json.Unmarshal(b, &out) != nil {
		out = map[string]any{"body": string(b)}
	}
	return resp.StatusCode, out
}

// TestCrossOriginWrites: on loopback without an admin key, a page of
// another origin cannot change anything: a request that changes state and
// carries an Origin that is neither the server's nor allowed is refused
// 403 naming it, whatever its content type; a page's request with a body
// must send it as JSON, so a form or a text/plain fetch of an allowed
// origin is refused too. Requests without Origin (curl, SDKs) pass with
// any content type, as the README's `curl -d` examples send, and reads
// pass from any page (the browser keeps their answers from it).
func TestCrossOriginWrites(t *testing.T) {
	p := start(t, "--store", "memory", "--allowed-origins", "https://app.example.com")
	self := "http://" + p.addr
	form := "application/x-www-form-urlencoded"
	for _, tc := range []struct {
		name, method, path, origin, ctype, body string
		want                                    int
		why                                     string // in the message of a refusal
	}{
		{"evil page creates a tenant", "POST", "/v1/tenants", "https://evil.example", "text/plain", `{"id":"evil"}`, 403, "https://evil.example"},
		{"evil page, as JSON", "POST", "/v1/tenants", "https://evil.example", "application/json", `{"id":"evil"}`, 403, "https://evil.example"},
		{"evil form blocks a key", "POST", "/v1/tenants/acme/blocks", "http://evil.example", form, `{"policy":"chat","key":"u1","seconds":60}`, 403, "http://evil.example"},
		{"evil page deletes", "DELETE", "/v1/tenants/acme", "https://evil.example", "", "", 403, "https://evil.example"},
		{"evil page checks", "POST", "/v1/check", "https://evil.example", "text/plain", `{"tenant":"acme","checks":[{"policy":{"name":"p","algorithm":"fixed_window","limit":3,"window":"60s"}}]}`, 403, "https://evil.example"},
		{"a hidden origin", "POST", "/v1/tenants", "null", "text/plain", `{"id":"evil"}`, 403, "null"},
		{"an origin on another port", "POST", "/v1/tenants", "http://127.0.0.1:1", "application/json", `{"id":"evil"}`, 403, "http://127.0.0.1:1"},
		{"own page, text/plain", "POST", "/v1/tenants", self, "text/plain", `{"id":"evil"}`, 403, "application/json"},
		{"own page, no content type", "POST", "/v1/tenants", self, "", `{"id":"evil"}`, 403, "application/json"},
		{"allowed page, form", "POST", "/v1/tenants", "https://app.example.com", form, `{"id":"evil"}`, 403, "application/json"},
		{"own page, JSON", "POST", "/v1/tenants", self, "application/json; charset=utf-8", `{"id":"acme"}`, 201, ""},
		{"allowed page, JSON", "POST", "/v1/tenants", "https://app.example.com", "application/json", `{"id":"beta"}`, 201, ""},
		{"own page, no body", "PUT", "/v1/tenants/acme/sessions", self, "", "", 201, ""},
		{"curl -d", "POST", "/v1/check", "", form, `{"tenant":"acme","checks":[{"policy":{"name":"p","algorithm":"fixed_window","limit":3,"window":"60s"}}]}`, 200, ""},
		{"an SDK's text/plain", "POST", "/v1/tenants", "", "text/plain", `{"id":"gamma"}`, 201, ""},
		{"evil page reads", "GET", "/v1/tenants", "https://evil.example", "", "", 200, ""},
	} {
		headers := map[string]string{}
		if tc.origin != "" {
			headers["Origin"] = tc.origin
		}
		if tc.ctype != "" {
			headers["Content-Type"] = tc.ctype
		}
		code, out := request(t, p, tc.method, tc.path, "", headers, tc.body)
		if code != tc.want {
			t.Errorf("%s: %d %v, want %d", tc.name, code, out, tc.want)
			continue
		}
		if msg, _ := out["message"].(string); code == 403 && (out["error"] != "forbidden" || !strings.Contains(msg, tc.why)) {
			t.Errorf("%s: %v, want a forbidden error naming %s", tc.name, out, tc.why)
		}
	}
	// Nothing the refused requests asked for was done.
	if code, out := p.call(t, "", "GET", "/v1/tenants/evil", ""); code != 404 {
		t.Errorf("a refused request created a tenant: %d %v", code, out)
	}
	if code, out := p.call(t, "", "GET", "/v1/tenants/acme/blocks", ""); code != 200 || len(out["blocks"].([]any)) != 0 {
		t.Errorf("a refused request blocked a key: %d %v", code, out)
	}
}

// TestHostNames: a server without an admin key answers only loopback
// names and its allowed hosts, so that a page whose name is pointed at
// 127.0.0.1 (DNS rebinding) reads nothing of it; with an admin key it
// answers any host, unless some are given. The probes (/healthz, /readyz)
// answer any host: kubelets and load balancers send them by address, and
// they tell a page nothing.
func TestHostNames(t *testing.T) {
	p := start(t, "--store", "memory", "--allowed-hosts", "sluice.test,*.corp.example.com")
	_, port, _ := net.SplitHostPort(p.addr)
	for _, host := range []string{"rebind.attacker.example", "rebind.attacker.example:" + port, "0.0.0.0:" + port, "192.168.1.10:" + port, "localhost.attacker.example", "corp.example.com"} {
		for _, path := range []string{"/v1/tenants", "/v1/policies", "/metrics", "/", "/dashboard"} {
			code, out := request(t, p, "GET", path, host, nil, "")
			if msg, _ := out["message"].(string); code != 403 || out["error"] != "forbidden" || !strings.Contains(msg, fmt.Sprintf("%q", host)) {
				t.Errorf("Host %s, GET %s: %d %v, want 403 naming the host", host, path, code, out)
			}
		}
		if code, out := request(t, p, "POST", "/v1/tenants", host, map[string]string{"Content-Type": "application/json"}, `{"id":"rebound"}`); code != 403 {
			t.Errorf("Host %s, POST: %d %v, want 403", host, code, out)
		}
		for _, path := range []string{"/healthz", "/readyz"} {
			if code, out := request(t, p, "GET", path, host, nil, ""); code != 200 {
				t.Errorf("Host %s, GET %s: %d %v, want 200: a probe answers any host", host, path, code, out)
			}
		}
	}
	for _, host := range []string{p.addr, "localhost:" + port, "LocalHost", "[::1]:" + port, "127.0.0.2:" + port, "sluice.test:" + port, "SLUICE.test", "a.corp.example.com:" + port} {
		if code, out := request(t, p, "GET", "/v1/policies", host, nil, ""); code != 200 {
			t.Errorf("Host %s: %d %v, want 200", host, code, out)
		}
	}

	const admin = "an-admin-key-of-16-bytes-or-more"
	keyed := start(t, "--store", "memory", "--admin-key", admin)
	if code, out := request(t, keyed, "GET", "/healthz", "rebind.attacker.example", nil, ""); code != 200 {
		t.Errorf("with an admin key, any host: %d %v", code, out)
	}
	keyedHosts := start(t, "--store", "memory", "--admin-key", admin, "--allowed-hosts", "sluice.test")
	if code, out := request(t, keyedHosts, "GET", "/metrics", "rebind.attacker.example", nil, ""); code != 403 {
		t.Errorf("with an admin key and --allowed-hosts, another host: %d %v, want 403", code, out)
	}
	for _, host := range []string{"sluice.test", keyedHosts.addr} {
		if code, out := request(t, keyedHosts, "GET", "/metrics", host, nil, ""); code != 200 {
			t.Errorf("with an admin key and --allowed-hosts, host %s: %d %v, want 200", host, code, out)
		}
	}
}
