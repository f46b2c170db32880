package server

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writePair writes a self-signed certificate of serial for localhost and
// its key to dir's cert.pem and key.pem, each replaced whole by a rename.
func writePair(t *testing.T, dir string, serial int64) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: "localhost"},
		DNSNames:     []string{"localhost"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	replace(t, filepath.Join(dir, "cert.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	replace(t, filepath.Join(dir, "key.pem"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}))
}

func replace(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

// TestCertLoader: the certificate is read again once its files change, at
// the first handshake a second after the last look, or at once on reload;
// a bad pair is logged, naming the file, and the old certificate stays.
func TestCertLoader(t *testing.T) {
	dir := t.TempDir()
	writePair(t, dir, 1)
	var logs bytes.Buffer
	c := TLSConfig{CertFile: filepath.Join(dir, "cert.pem"), KeyFile: filepath.Join(dir, "key.pem")}
	l, err := newCertLoader(c, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1e9, 0)
	l.now = func() time.Time { return now }
	l.lastLooked = now
	serial := func() int64 {
		t.Helper()
		cert, err := l.getCertificate(nil)
		if err != nil {
			t.Fatal(err)
		}
		return cert.Leaf.SerialNumber.Int64()
	}
	writePair(t, dir, 2)
	if got := serial(); got != 1 {
		t.Fatalf("serial %d before a second has passed, want 1", got)
	}
	now = now.Add(tlsRecheck)
	if got := serial(); got != 2 {
		t.Fatalf("serial %d a second after a change, want 2", got)
	}

	// A bad key: the pair in force stays, the error names the file.
	replace(t, c.KeyFile, []byte("not a key"))
	now = now.Add(tlsRecheck)
	if got := serial(); got != 2 {
		t.Fatalf("serial %d after a bad key, want 2", got)
	}
	if !strings.Contains(logs.String(), "--tls-key "+c.KeyFile) {
		t.Fatalf("no error naming the key file:\n%s", &logs)
	}
	// Logged once per change, not at each look.
	now = now.Add(tlsRecheck)
	serial()
	if n := strings.Count(logs.String(), "rejected"); n != 1 {
		t.Fatalf("%d rejections logged, want 1:\n%s", n, &logs)
	}

	// A key that is not the certificate's.
	other := t.TempDir()
	writePair(t, other, 3)
	key, err := os.ReadFile(filepath.Join(other, "key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	replace(t, c.KeyFile, key)
	l.reload()
	if got := serial(); got != 2 || !strings.Contains(logs.String(), "--tls-cert "+c.CertFile+" and --tls-key "+c.KeyFile) {
		t.Fatalf("serial %d after a mismatched pair, want 2; logs:\n%s", got, &logs)
	}
	// A good pair on reload, before a second has passed.
	writePair(t, dir, 4)
	l.reload()
	if got := serial(); got != 4 {
		t.Fatalf("serial %d after a reload, want 4", got)
	}
}

// TestCertLoaderBadAtStart: a bad pair at start is an error naming the
// file.
func TestCertLoaderBadAtStart(t *testing.T) {
	dir := t.TempDir()
	writePair(t, dir, 1)
	c := TLSConfig{CertFile: filepath.Join(dir, "key.pem"), KeyFile: filepath.Join(dir, "key.pem")}
	if _, err := newCertLoader(c, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "--tls-cert "+c.CertFile) {
		t.Fatalf("%v, want an error naming --tls-cert", err)
	}
	c = TLSConfig{CertFile: filepath.Join(dir, "cert.pem"), KeyFile: filepath.Join(dir, "nokey.pem")}
	if _, err := newCertLoader(c, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "--tls-key") {
		t.Fatalf("%v, want an error naming --tls-key", err)
	}
}
