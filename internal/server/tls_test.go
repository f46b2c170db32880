package server

import (
	"bytes"
	"log"
	"log/slog"
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
