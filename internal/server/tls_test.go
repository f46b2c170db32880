package server

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
