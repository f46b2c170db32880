package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coder/websocket"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluicehq/sluice/internal/testcert"
)

// servedSerial returns the serial of the certificate addr serves on a new
// connection, offering proto by ALPN.
func servedSerial(t *testing.T, ca *testcert.CA, addr, proto string) int64 {
	t.Helper()
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: patience}, Config: &tls.Config{RootCAs: ca.Pool, NextProtos: []string{proto}}}
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		t.Fatalf("TLS to %s: %v", addr, err)
	}
	defer c.Close()
	return c.(*tls.Conn).ConnectionState().PeerCertificates[0].SerialNumber.Int64()
}

// TestTLS: with --tls-cert and --tls-key, the HTTP API (health, decisions,
// the gateway's wss) and the rate limit service over gRPC answer over TLS
// with a certificate the client verifies; a certificate replaced on disk
// is served once read again, on both listeners; a bad pair keeps the one
// in force, logged naming the file.
func TestTLS(t *testing.T) {
	ca := testcert.NewCA(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	ca.Issue(t, 1, certFile, keyFile)
	grpcAddr := freeAddr(t)
	p := start(t, "--store", "memory", "--config", "../../examples/sluice.yaml", "--tls-cert", certFile, "--tls-key", keyFile,
		"--grpc-addr", grpcAddr, "--envoy-config", "testdata/envoy")

	c := newHTTPSClient(t, ca)
	do := func(method, path, body string) (int, map[string]any) {
		t.Helper()
		return c.call(t, p, method, path, body)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, _ := do("GET", path, ""); code != 200 {
			t.Fatalf("GET %s over TLS: %d", path, code)
		}
	}
	if code, out := do("POST", "/v1/check", `{"tenant":"acme","checks":[{"key":"u","policy":{"name":"p","algorithm":"fixed_window","limit":5,"window":"1h"}}]}`); code != 200 || out["allowed"] != true {
		t.Fatalf("a check over TLS: %d %v", code, out)
	}
	// Plain HTTP is refused; a flood of it logs a line, not one each.
	for range 20 {
		if resp, err := http.Get("http://" + p.addr + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode != 400 {
				t.Fatalf("plain HTTP on a TLS listener: %s, want 400", resp.Status)
			}
		}
	}
	handshakeErrors := func() int { return strings.Count(p.log(), "TLS handshake error") }
	waitFor(t, "a failed handshake in the log", func() bool { return handshakeErrors() > 0 })
	defer func() {
		if n := handshakeErrors(); n != 1 {
			t.Errorf("%d failed handshakes logged of 20, want 1 a minute", n)
		}
	}()

	// The gateway over wss.
	code, out := do("PUT", "/v1/tenants/demo/sessions", "")
	if code != 201 {
		t.Fatalf("session over TLS: %d %v", code, out)
	}
	ws := c.dialWSS(t, p, "demo", out["id"].(string))
	defer ws.CloseNow()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()

	// The rate limit service over TLS.
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: ca.Pool})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("gRPC health over TLS: %v %v", h, err)
	}
	r := &rls{t: t, conn: conn, c: rlspb.NewRateLimitServiceClient(conn)}
	if got := r.ask("mongo_cps", desc("database", "users")); got.OverallCode != ok {
		t.Fatalf("a decision over TLS: %v", got)
	}

	// Replaced on disk: served on both listeners once read again.
	if s := servedSerial(t, ca, p.addr, "http/1.1"); s != 1 {
		t.Fatalf("serial %d served, want 1", s)
	}
	ca.Issue(t, 2, certFile, keyFile)
	waitFor(t, "the new certificate on the HTTP listener", func() bool { return servedSerial(t, ca, p.addr, "http/1.1") == 2 })
	waitFor(t, "the new certificate on the gRPC listener", func() bool { return servedSerial(t, ca, grpcAddr, "h2") == 2 })

	// A bad key: rejected, logged naming the file, the old pair served.
	testcert.Replace(t, keyFile, []byte("-----BEGIN NOTHING-----\n-----END NOTHING-----\n"))
	waitFor(t, "the bad key's rejection in the log", func() bool {
		return strings.Contains(p.log(), "--tls-key "+keyFile+": no PEM PRIVATE KEY block")
	})
	if s := servedSerial(t, ca, p.addr, "http/1.1"); s != 2 {
		t.Fatalf("serial %d served after a bad key, want 2", s)
	}
	if code, _ := do("GET", "/healthz", ""); code != 200 {
		t.Fatalf("health after a bad key: %d", code)
	}
}

// httpsClient reaches servers whose certificates a test CA signed.
type httpsClient struct{ *http.Client }

func newHTTPSClient(t *testing.T, ca *testcert.CA) httpsClient {
	c := &http.Client{Timeout: patience, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool}}}
	t.Cleanup(c.CloseIdleConnections)
	return httpsClient{c}
}

// call makes a request of p over TLS and returns its status and its JSON
// body.
func (c httpsClient) call(t *testing.T, p *process, method, path, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, "https://"+p.addr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s over TLS: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out map[string]any
	json.Unmarshal(b, &out)
	return resp.StatusCode, out
}

// dialWSS connects to a session of tenant on p over wss, and returns once
// p has registered the connection, as dialWSID does: a frame posted to it
// through p's management API is read.
func (c httpsClient) dialWSS(t *testing.T, p *process, tenant, session string) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	ws, resp, err := websocket.Dial(ctx, "wss://"+p.addr+"/v1/ws?tenant="+tenant+"&session="+session, &websocket.DialOptions{HTTPClient: c.Client})
	if err != nil {
		t.Fatalf("wss: %v", err)
	}
	id := resp.Header.Get("Sluice-Connection")
	const ready = `{"over":"wss"}`
	waitFor(t, "the connection's registration", func() bool {
		code, _ := c.call(t, p, "POST", "/v1/tenants/"+tenant+"/connections/"+id, ready)
		return code == 200
	})
	if _, b, err := ws.Read(ctx); err != nil || string(b) != ready {
		t.Fatalf("wss frame: %q %v", b, err)
	}
	return ws
}

// TestTLSAcrossNodes: two nodes on one DynamoDB table, both over TLS with
// certificates of a private CA that SSL_CERT_FILE names: a message sent by
// a session's connection on one node reaches its connection on the other,
// forwarded over https to the default advertised URL.
func TestTLSAcrossNodes(t *testing.T) {
	ca := testcert.NewCA(t)
	dir := t.TempDir()
	certFile, keyFile, caFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"), filepath.Join(dir, "ca.pem")
	ca.Issue(t, 1, certFile, keyFile)
	ca.WriteCA(t, caFile)
	t.Setenv("SSL_CERT_FILE", caFile) // the nodes' roots
	ps := nodes(t, 2, "--tls-cert", certFile, "--tls-key", keyFile)
	a, b := ps[0], ps[1]
	c := newHTTPSClient(t, ca)
	if code, out := c.call(t, a, "POST", "/v1/tenants", `{"id":"acme"}`); code != 201 {
		t.Fatal(code, out)
	}
	_, out := c.call(t, a, "PUT", "/v1/tenants/acme/sessions", "")
	id := out["id"].(string)
	onA := c.dialWSS(t, a, "acme", id)
	defer onA.CloseNow()
	onB := c.dialWSS(t, b, "acme", id)
	defer onB.CloseNow()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	if err := onB.Write(ctx, websocket.MessageText, []byte(`{"action":"pooled","data":"across"}`)); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for len(got) < 2 {
		_, f, err := onA.Read(ctx)
		if err != nil {
			t.Fatalf("A received %v, then: %v", got, err)
		}
		var m map[string]any
		json.Unmarshal(f, &m)
		if m["data"] != "across" {
			t.Fatalf("unexpected frame on A: %s", f)
		}
		got[fmt.Sprint(m["type"])] = true
	}
	if !got["message"] || !got["reply"] {
		t.Fatalf("A received %v, want the message and the reply", got)
	}
}

// TestTLSFlags: --tls-cert and --tls-key go together; a file that is not
// a certificate stops the start with an error naming it.
func TestTLSFlags(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	testcert.NewCA(t).Issue(t, 1, certFile, keyFile)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tls-cert", certFile}, "--tls-cert and --tls-key go together"},
		{[]string{"--tls-key", keyFile}, "--tls-cert and --tls-key go together"},
		{[]string{"--tls-cert", keyFile, "--tls-key", keyFile}, "--tls-cert " + keyFile},
		{[]string{"--tls-cert", certFile, "--tls-key", certFile}, "--tls-key " + certFile},
		// Peers send the admin key to the advertised URL: never in the clear.
		{[]string{"--tls-cert", certFile, "--tls-key", keyFile, "--advertise-url", "http://127.0.0.1:9"}, "--advertise-url \"http://127.0.0.1:9\" must be https://"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		args := append([]string{"serve", "--store", "memory", "--addr", "127.0.0.1:0"}, tc.args...)
		out, err := runBinary(ctx, nil, args...)
		cancel()
		if err == nil || !strings.Contains(out, tc.want) {
			t.Errorf("%v: %v %s, want an error naming %q", tc.args, err, out, tc.want)
		}
	}
}
