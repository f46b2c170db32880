package server

import (
	"bytes"
	"crypto/tls"
	"log"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testcert"
)

// TestCertLoader: the certificate is read again once its files have
// changed and settled (two polls in a row read the same), or at once on
// reload; a bad pair is logged once, naming the file, and the certificate
// in force stays.
func TestCertLoader(t *testing.T) {
	ca := testcert.NewCA(t)
	dir := t.TempDir()
	c := TLSConfig{CertFile: filepath.Join(dir, "cert.pem"), KeyFile: filepath.Join(dir, "key.pem")}
	ca.Issue(t, 1, c.CertFile, c.KeyFile)
	var logs bytes.Buffer
	l, err := newCertLoader(c, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	cfg := l.config("http/1.1")
	serial := func() int64 {
		t.Helper()
		cert, err := cfg.GetCertificate(nil)
		if err != nil {
			t.Fatal(err)
		}
		return cert.Leaf.SerialNumber.Int64()
	}
	ca.Issue(t, 2, c.CertFile, c.KeyFile)
	if l.w.Poll(); serial() != 1 {
		t.Fatalf("serial %d after one poll of a change, want 1 until it settles", serial())
	}
	if l.w.Poll(); serial() != 2 {
		t.Fatalf("serial %d after a change settled, want 2", serial())
	}

	// A bad key: the pair in force stays, the error names the file, once.
	testcert.Replace(t, c.KeyFile, []byte("not a key"))
	for range 4 {
		l.w.Poll()
	}
	if got := serial(); got != 2 {
		t.Fatalf("serial %d after a bad key, want 2", got)
	}
	if !strings.Contains(logs.String(), "--tls-key "+c.KeyFile+": no PEM PRIVATE KEY block") {
		t.Fatalf("no error naming the key file:\n%s", &logs)
	}
	if n := strings.Count(logs.String(), "rejected"); n != 1 {
		t.Fatalf("%d rejections logged, want 1:\n%s", n, &logs)
	}

	// A key that is not the certificate's, on reload.
	other := t.TempDir()
	ca.Issue(t, 3, filepath.Join(other, "cert.pem"), filepath.Join(other, "key.pem"))
	key, err := os.ReadFile(filepath.Join(other, "key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	testcert.Replace(t, c.KeyFile, key)
	if err := l.w.Reload(); err == nil || serial() != 2 || !strings.Contains(err.Error(), "--tls-cert "+c.CertFile+" and --tls-key "+c.KeyFile) {
		t.Fatalf("reload of a mismatched pair: %v, serial %d, want an error naming both files and serial 2", err, serial())
	}
	// A good pair on reload, at once.
	ca.Issue(t, 4, c.CertFile, c.KeyFile)
	if err := l.w.Reload(); err != nil || serial() != 4 {
		t.Fatalf("reload: %v, serial %d, want 4", err, serial())
	}
}

// TestCertLoaderBadAtStart: a bad pair at start is an error naming the
// file.
func TestCertLoaderBadAtStart(t *testing.T) {
	dir := t.TempDir()
	testcert.NewCA(t).Issue(t, 1, filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"))
	for _, tc := range []struct {
		c    TLSConfig
		want string
	}{
		{TLSConfig{CertFile: filepath.Join(dir, "key.pem"), KeyFile: filepath.Join(dir, "key.pem")}, "--tls-cert " + filepath.Join(dir, "key.pem")},
		{TLSConfig{CertFile: filepath.Join(dir, "cert.pem"), KeyFile: filepath.Join(dir, "nokey.pem")}, "--tls-key: open " + filepath.Join(dir, "nokey.pem")},
		{TLSConfig{CertFile: filepath.Join(dir, "nocert.pem"), KeyFile: filepath.Join(dir, "key.pem")}, "--tls-cert: open " + filepath.Join(dir, "nocert.pem")},
	} {
		if _, err := newCertLoader(tc.c, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error naming %q", tc.c, err, tc.want)
		}
	}
}

// TestHandshakeLog: failed TLS handshakes are logged at warn once a
// minute, the rest at debug; other lines of the HTTP server at warn.
func TestHandshakeLog(t *testing.T) {
	var logs bytes.Buffer
	now := time.Unix(1e9, 0)
	h := &handshakeLog{log: slog.New(slog.NewTextHandler(&logs, nil)), now: func() time.Time { return now }}
	l := log.New(h, "", 0)
	for range 100 {
		l.Printf("http: TLS handshake error from 127.0.0.1:1234: client sent an HTTP request to an HTTPS server")
	}
	l.Printf("http: Accept error: too many open files")
	now = now.Add(time.Minute)
	l.Printf("http: TLS handshake error from 127.0.0.1:1235: EOF")
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "1234") || !strings.Contains(lines[0], "sampled=") ||
		!strings.Contains(lines[1], "Accept error") || !strings.Contains(lines[2], "1235") {
		t.Fatalf("logged at info and above:\n%s\nwant the first handshake error, the accept error, and the next minute's first", &logs)
	}
}

// TestClientCerts: with a client CA, the gRPC configuration refuses in
// the handshake a client without a certificate, one of another CA and,
// with a SAN, one without it among its DNS names; it accepts one the CA
// signed for the SAN. The CA file is read again on change, as the
// certificate. The HTTP configuration asks for no client certificate.
func TestClientCerts(t *testing.T) {
	ca, clients, other := testcert.NewCA(t), testcert.NewCA(t), testcert.NewCA(t)
	dir := t.TempDir()
	file := func(name string) string { return filepath.Join(dir, name) }
	c := TLSConfig{CertFile: file("cert.pem"), KeyFile: file("key.pem"), ClientCAFile: file("clients.pem"), ClientSAN: "envoy.internal"}
	ca.Issue(t, 1, c.CertFile, c.KeyFile)
	clients.WriteCA(t, c.ClientCAFile)
	clients.IssueClient(t, 10, file("good.pem"), file("good.key"), "envoy.internal")
	clients.IssueClient(t, 11, file("nosan.pem"), file("nosan.key"), "other.internal")
	other.IssueClient(t, 12, file("other.pem"), file("other.key"), "envoy.internal")
	l, err := newCertLoader(c, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	handshake := func(cfg *tls.Config, cert string) error {
		t.Helper()
		client := &tls.Config{RootCAs: ca.Pool, ServerName: "localhost"}
		if cert != "" {
			pair, err := tls.LoadX509KeyPair(file(cert+".pem"), file(cert+".key"))
			if err != nil {
				t.Fatal(err)
			}
			client.Certificates = []tls.Certificate{pair}
		}
		// Over TCP, whose buffers let the server's alert go unread.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		done := make(chan error, 1)
		go func() {
			conn, err := ln.Accept()
			if err != nil {
				done <- err
				return
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(time.Minute))
			done <- tls.Server(conn, cfg).Handshake()
		}()
		conn, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(time.Minute))
		tls.Client(conn, client).Handshake() // the server's verdict is what counts
		return <-done
	}
	grpc := l.grpcConfig(c.ClientSAN, "h2")
	if err := handshake(grpc, "good"); err != nil {
		t.Fatalf("a client certificate of the CA with the SAN: %v", err)
	}
	for _, cert := range []string{"", "other", "nosan"} {
		if err := handshake(grpc, cert); err == nil {
			t.Errorf("client certificate %q: accepted, want refused in the handshake", cert)
		}
	}
	if err := handshake(l.config("http/1.1"), ""); err != nil {
		t.Fatalf("the HTTP configuration without a client certificate: %v", err)
	}

	// Without a SAN, any client certificate of the CA.
	if err := handshake(l.grpcConfig("", "h2"), "nosan"); err != nil {
		t.Fatalf("no SAN asked, a certificate of the CA: %v", err)
	}

	// The CA replaced on disk: read again once settled.
	other.WriteCA(t, c.ClientCAFile)
	l.w.Poll()
	l.w.Poll()
	if err := handshake(grpc, "other"); err != nil {
		t.Fatalf("a certificate of the new CA: %v", err)
	}
	if err := handshake(grpc, "good"); err == nil {
		t.Fatal("a certificate of the replaced CA: accepted")
	}
	// A bad CA file: the one in force stays, the error names the file.
	testcert.Replace(t, c.ClientCAFile, []byte("not a certificate"))
	if err := l.w.Reload(); err == nil || !strings.Contains(err.Error(), "--grpc-client-ca "+c.ClientCAFile) {
		t.Fatalf("reload of a bad CA file: %v, want an error naming it", err)
	}
	if err := handshake(grpc, "other"); err != nil {
		t.Fatalf("after a bad CA file, the one in force: %v", err)
	}
}
