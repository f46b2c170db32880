package main

import (
	"context"
	"crypto/tls"
	"flag"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/internal/testcert"
)

// mtlsFiles are the files of a test of client certificates: the server's
// pair (of ca), the client CA file (of clients), and clients' pairs:
// "good" of clients for envoy.internal, "nosan" of clients for another
// name, "other" of another CA for envoy.internal.
type mtlsFiles struct {
	ca, clients         *testcert.CA
	dir                 string
	cert, key, clientCA string
}

func newMTLSFiles(t *testing.T) *mtlsFiles {
	t.Helper()
	f := &mtlsFiles{ca: testcert.NewCA(t), clients: testcert.NewCA(t), dir: t.TempDir()}
	f.cert, f.key, f.clientCA = f.file("cert.pem"), f.file("key.pem"), f.file("clients.pem")
	f.ca.Issue(t, 1, f.cert, f.key)
	f.clients.WriteCA(t, f.clientCA)
	f.clients.IssueClient(t, 10, f.file("good.pem"), f.file("good.key"), "envoy.internal")
	f.clients.IssueClient(t, 11, f.file("nosan.pem"), f.file("nosan.key"), "other.internal")
	testcert.NewCA(t).IssueClient(t, 12, f.file("other.pem"), f.file("other.key"), "envoy.internal")
	return f
}

func (f *mtlsFiles) file(name string) string { return filepath.Join(f.dir, name) }

// dial returns a client of the rate limit service at addr over TLS,
// presenting the client certificate named (none if "").
func (f *mtlsFiles) dial(t *testing.T, addr, cert string) *rls {
	t.Helper()
	c := &tls.Config{RootCAs: f.ca.Pool}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(f.file(cert+".pem"), f.file(cert+".key"))
		if err != nil {
			t.Fatal(err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(c)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &rls{t: t, conn: conn, c: rlspb.NewRateLimitServiceClient(conn)}
}

// refused asserts that r's calls, a decision and a health check, fail
// for want of a connection: refused in the handshake.
func refused(t *testing.T, r *rls, who string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	_, err := r.c.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "compat", Descriptors: nil})
	if status.Code(err) != codes.Unavailable {
		t.Errorf("%s: ShouldRateLimit: %v, want Unavailable (refused in the handshake)", who, err)
	}
	_, err = healthpb.NewHealthClient(r.conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if status.Code(err) != codes.Unavailable {
		t.Errorf("%s: health check: %v, want Unavailable (refused in the handshake)", who, err)
	}
}

// checkClientCerts asserts the rate limit service at grpcAddr accepts the
// good certificate, and refuses no certificate, one of another CA and one
// without the SAN; it returns the good client.
func (f *mtlsFiles) checkClientCerts(t *testing.T, grpcAddr string) *rls {
	t.Helper()
	good := f.dial(t, grpcAddr, "good")
	if resp := good.ask("compat", desc("k", "a")); resp.OverallCode != ok {
		t.Fatalf("a client certificate of the CA with the SAN: %v, want OK", resp.OverallCode)
	}
	if st := grpcHealth(t, good, "ratelimit"); st != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health with a good client certificate: %v", st)
	}
	for _, cert := range []string{"", "other", "nosan"} {
		refused(t, f.dial(t, grpcAddr, cert), "client certificate "+strings.TrimPrefix(cert+" ", " "))
	}
	return good
}

// httpsDo makes a request of addr over TLS, with the token as a bearer if
// any, and returns the status and the body.
func (f *mtlsFiles) httpsDo(t *testing.T, method, addr, path, token, body string) (int, string) {
	t.Helper()
	c := newHTTPSClient(t, f.ca)
	req, err := http.NewRequest(method, "https://"+addr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestEnvoyClientCerts: with --grpc-client-ca and --grpc-client-san, the
// rate limit service answers a client whose certificate the CA signed for
// the SAN, decisions and health checks; it refuses in the handshake one
// without a certificate, one of another CA and one without the SAN. The
// HTTP port asks for no client certificate.
func TestEnvoyClientCerts(t *testing.T) {
	f := newMTLSFiles(t)
	grpcAddr := freeAddr(t)
	p := start(t, "--store", "memory", "--tls-cert", f.cert, "--tls-key", f.key,
		"--grpc-addr", grpcAddr, "--envoy-config", compatDir(t, map[string]string{"compat.yaml": compatYAML}),
		"--grpc-client-ca", f.clientCA, "--grpc-client-san", "envoy.internal")
	f.checkClientCerts(t, grpcAddr)
	if code, _ := f.httpsDo(t, "GET", p.addr, "/healthz", "", ""); code != 200 {
		t.Errorf("GET /healthz over TLS without a client certificate: %d, want 200", code)
	}
}

// TestEnvoyClientCertsFlags: --grpc-client-ca needs --tls-cert and
// --grpc-addr; --grpc-client-san needs --grpc-client-ca; a CA file
// without a certificate stops the start, naming it.
func TestEnvoyClientCertsFlags(t *testing.T) {
	f := newMTLSFiles(t)
	envoy := compatDir(t, map[string]string{"compat.yaml": compatYAML})
	bad := f.file("bad.pem")
	if err := os.WriteFile(bad, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--grpc-addr", "127.0.0.1:0", "--envoy-config", envoy, "--grpc-client-ca", f.clientCA}, "--tls-cert"},
		{[]string{"--tls-cert", f.cert, "--tls-key", f.key, "--grpc-client-ca", f.clientCA}, "--grpc-addr"},
		{[]string{"--grpc-addr", "127.0.0.1:0", "--envoy-config", envoy, "--tls-cert", f.cert, "--tls-key", f.key, "--grpc-client-san", "x"}, "--grpc-client-ca"},
		{[]string{"--grpc-addr", "127.0.0.1:0", "--envoy-config", envoy, "--tls-cert", f.cert, "--tls-key", f.key, "--grpc-client-ca", bad}, "--grpc-client-ca " + bad},
	} {
		out, err := serveRefused(t, tc.args...)
		if err == nil || !strings.Contains(out, tc.want) {
			t.Errorf("%q: %v\n%s\nwant a refusal naming %q", tc.args, err, out, tc.want)
		}
	}
}

// TestEnvoyCompatClientCerts: run as ratelimit with the reference's
// GRPC_SERVER_USE_TLS, GRPC_SERVER_TLS_CERT and _KEY, GRPC_CLIENT_TLS_CACERT
// and GRPC_CLIENT_TLS_SAN, the rate limit service requires the client
// certificate as the reference does; the HTTP port serves TLS too. /json,
// on the HTTP port where no client certificate is asked, is refused
// unless the service has a token, which it then needs: it is no way
// around the client certificate.
func TestEnvoyCompatClientCerts(t *testing.T) {
	f := newMTLSFiles(t)
	httpAddr, env := hostPortEnv(t, "")
	grpcAddr, grpcEnv := hostPortEnv(t, "GRPC_")
	env = append(env, grpcEnv...)
	env = append(env, "RUNTIME_ROOT="+compatRuntime(t), "RUNTIME_SUBDIRECTORY=ratelimit", "SLUICE_STORE=memory",
		"GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_TLS_CERT="+f.cert, "GRPC_SERVER_TLS_KEY="+f.key,
		"GRPC_CLIENT_TLS_CACERT="+f.clientCA, "GRPC_CLIENT_TLS_SAN=envoy.internal")
	const req = `{"domain": "compat", "descriptors": [{"entries": [{"key": "k", "value": "j"}]}]}`

	t.Run("no token", func(t *testing.T) {
		startProgram(t, ratelimitLink(t), httpAddr, compatEnv(env...))
		f.checkClientCerts(t, grpcAddr)
		if code, body := f.httpsDo(t, "GET", httpAddr, "/healthcheck", "", ""); code != 200 || body != "OK" {
			t.Errorf("/healthcheck over TLS: %d %q, want 200 OK", code, body)
		}
		if code, body := f.httpsDo(t, "POST", httpAddr, "/json", "", req); code != http.StatusForbidden || !strings.Contains(body, "--grpc-token-file") {
			t.Errorf("/json with client certificates and no token: %d %q, want 403 naming --grpc-token-file", code, body)
		}
	})
	t.Run("token", func(t *testing.T) {
		const token = "a-token-of-the-service-0123456789"
		tokenFile := f.file("token")
		if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
			t.Fatal(err)
		}
		startProgram(t, ratelimitLink(t), httpAddr, compatEnv(env...), "--grpc-token-file", tokenFile)
		if code, _ := f.httpsDo(t, "POST", httpAddr, "/json", "", req); code != http.StatusUnauthorized {
			t.Errorf("/json without the token: %d, want 401", code)
		}
		if code, body := f.httpsDo(t, "POST", httpAddr, "/json", token, req); code != http.StatusOK || overallCode(t, body) != "OK" {
			t.Errorf("/json with the token: %d %q, want 200 OK", code, body)
		}
	})
}

// tlsCompatFlags is compatFlags with the flags of TLS.
func tlsCompatFlags() *flag.FlagSet {
	fs := compatFlags()
	for _, name := range []string{"tls-cert", "tls-key", "grpc-client-ca", "grpc-client-san"} {
		fs.String(name, "", "")
	}
	return fs
}

// TestCompatEnvClientCerts: the reference's GRPC_* variables of TLS read
// into --tls-cert, --tls-key, --grpc-client-ca and --grpc-client-san, and
// only with GRPC_SERVER_USE_TLS=true, as the reference reads them;
// GRPC_SERVER_USE_TLS=true without a certificate, or a SAN without a CA,
// is refused naming the variables.
func TestCompatEnvClientCerts(t *testing.T) {
	fs := tlsCompatFlags()
	all := []string{"GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_TLS_CERT=/c.pem", "GRPC_SERVER_TLS_KEY=/k.pem",
		"GRPC_CLIENT_TLS_CACERT=/ca.pem", "GRPC_CLIENT_TLS_SAN=envoy.internal"}
	if _, err := applyCompat(fs, all); err != nil {
		t.Fatal(err)
	}
	got := flagValues(fs)
	for flag, want := range map[string]string{"tls-cert": "/c.pem", "tls-key": "/k.pem", "grpc-client-ca": "/ca.pem", "grpc-client-san": "envoy.internal"} {
		if got[flag] != want {
			t.Errorf("--%s = %q, want %q", flag, got[flag], want)
		}
	}

	// Without GRPC_SERVER_USE_TLS=true, the reference reads none of them.
	fs = tlsCompatFlags()
	if _, err := applyCompat(fs, append([]string{"GRPC_SERVER_USE_TLS=false"}, all[1:]...)); err != nil {
		t.Fatal(err)
	}
	if got := flagValues(fs); got["tls-cert"] != "" || got["grpc-client-ca"] != "" {
		t.Errorf("GRPC_SERVER_USE_TLS=false: --tls-cert %q, --grpc-client-ca %q, want neither", got["tls-cert"], got["grpc-client-ca"])
	}

	for _, tc := range []struct {
		env  []string
		want []string
	}{
		{[]string{"GRPC_SERVER_USE_TLS=true"}, []string{"$GRPC_SERVER_USE_TLS", "$GRPC_SERVER_TLS_CERT", "$GRPC_SERVER_TLS_KEY"}},
		{[]string{"GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_TLS_CERT=/c.pem"}, []string{"$GRPC_SERVER_TLS_KEY"}},
		{[]string{"GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_TLS_CERT=/c.pem", "GRPC_SERVER_TLS_KEY=/k.pem", "GRPC_CLIENT_TLS_SAN=x"}, []string{"$GRPC_CLIENT_TLS_SAN", "$GRPC_CLIENT_TLS_CACERT"}},
	} {
		_, err := applyCompat(tlsCompatFlags(), tc.env)
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%q: %v, want an error naming %s", tc.env, err, w)
			}
		}
	}
}
