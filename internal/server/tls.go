package server

import (
	"context"
	"crypto/tls"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// TLSConfig is the TLS of the HTTP API and of Envoy's rate limit service:
// both files or neither (cmd/sluice checks).
type TLSConfig struct {
	CertFile string // --tls-cert: PEM, the leaf first, then its chain
	KeyFile  string // --tls-key: PEM
}

// tlsRecheck is the least time between two looks at the files of a
// certificate for a change.
const tlsRecheck = time.Second

// certLoader serves a certificate read from a pair of PEM files, read
// again when either file changes: looked at on a handshake at most every
// tlsRecheck, and at once on reload. A pair that fails to load is logged,
// naming the file, and the certificate in force stays. Safe for
// concurrent use.
type certLoader struct {
	certFile, keyFile string
	log               *slog.Logger
	now               func() time.Time

	mu         sync.Mutex
	cert       *tls.Certificate
	certStamp  os.FileInfo // of the pair last read, loaded or not
	keyStamp   os.FileInfo
	lastLooked time.Time
}

// newCertLoader loads the pair of c; an error names the file at fault.
func newCertLoader(c TLSConfig, log *slog.Logger) (*certLoader, error) {
	l := &certLoader{certFile: c.CertFile, keyFile: c.KeyFile, log: log, now: time.Now}
	if err := l.load(); err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	l.lastLooked = l.now()
	return l, nil
}

// config returns a server TLS configuration serving l's certificate,
// offering protos by ALPN.
func (l *certLoader) config(protos ...string) *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		NextProtos:     protos,
		GetCertificate: l.getCertificate,
	}
}

func (l *certLoader) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now := l.now(); now.Sub(l.lastLooked) >= tlsRecheck || now.Before(l.lastLooked) {
		l.lastLooked = now
		l.reloadLocked()
	}
	return l.cert, nil
}

// reload reads the pair again if either file changed.
func (l *certLoader) reload() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lastLooked = l.now()
	l.reloadLocked()
}

func (l *certLoader) reloadLocked() {
	cs, err1 := os.Stat(l.certFile)
	ks, err2 := os.Stat(l.keyFile)
	if err := errors.Join(err1, err2); err != nil {
		if l.certStamp != nil { // logged once, until the files are back
			l.log.Error("TLS certificate: the files cannot be read; the certificate in force stays", "err", err)
			l.certStamp, l.keyStamp = nil, nil
		}
		return
	}
	if same(l.certStamp, cs) && same(l.keyStamp, ks) {
		return
	}
	if err := l.loadLocked(); err != nil {
		l.log.Error("TLS certificate rejected; the certificate in force stays", "err", err)
		return
	}
	l.log.Info("TLS certificate reloaded", "cert", l.certFile, "not_after", l.cert.Leaf.NotAfter)
}

// same reports whether a file is unchanged since it was stated as a.
func same(a, b os.FileInfo) bool {
	return a != nil && os.SameFile(a, b) && a.ModTime().Equal(b.ModTime()) && a.Size() == b.Size()
}

func (l *certLoader) load() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.loadLocked()
}

// loadLocked reads the pair, recording what it read even if it fails, so
// that a bad pair is logged once, not at every look.
func (l *certLoader) loadLocked() error {
	cs, err := os.Stat(l.certFile)
	if err != nil {
		return fmt.Errorf("--tls-cert: %w", err)
	}
	ks, err := os.Stat(l.keyFile)
	if err != nil {
		return fmt.Errorf("--tls-key: %w", err)
	}
	l.certStamp, l.keyStamp = cs, ks
	certPEM, err := os.ReadFile(l.certFile)
	if err != nil {
		return fmt.Errorf("--tls-cert: %w", err)
	}
	keyPEM, err := os.ReadFile(l.keyFile)
	if err != nil {
		return fmt.Errorf("--tls-key: %w", err)
	}
	if !hasBlock(certPEM, "CERTIFICATE") {
		return fmt.Errorf("--tls-cert %s: no PEM CERTIFICATE block", l.certFile)
	}
	if !hasBlock(keyPEM, "PRIVATE KEY") {
		return fmt.Errorf("--tls-key %s: no PEM PRIVATE KEY block", l.keyFile)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("--tls-cert %s and --tls-key %s: %w", l.certFile, l.keyFile, err)
	}
	l.cert = &cert // Leaf is parsed by X509KeyPair
	return nil
}

// hasBlock reports whether data holds a PEM block whose type ends with
// suffix ("PRIVATE KEY" matches "EC PRIVATE KEY").
func hasBlock(data []byte, suffix string) bool {
	for {
		var b *pem.Block
		if b, data = pem.Decode(data); b == nil {
			return false
		}
		if len(b.Type) >= len(suffix) && b.Type[len(b.Type)-len(suffix):] == suffix {
			return true
		}
	}
}

// watch reloads the certificate at each value of hup until ctx is
// done.
func (l *certLoader) watch(ctx context.Context, hup <-chan os.Signal) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			l.reload()
		}
	}
}

// loadTLS loads the certificate of the configuration, if any.
func (s *Server) loadTLS() error {
	if s.c.TLS.CertFile == "" {
		return nil
	}
	var err error
	if s.tls, err = newCertLoader(s.c.TLS, s.log); err != nil {
		return err
	}
	s.tlsHup = make(chan os.Signal, 1)
	return nil
}

// tlsListener returns ln, serving TLS if configured. HTTP/1.1 only, so
// that the gateway's WebSocket connections, which take the connection
// over, work through it as over plain HTTP.
func (s *Server) tlsListener(ln net.Listener) net.Listener {
	if s.tls == nil {
		return ln
	}
	return tls.NewListener(ln, s.tls.config("http/1.1"))
}

// grpcTLS returns the rate limit service's TLS option, if configured.
func (s *Server) grpcTLS() []grpc.ServerOption {
	if s.tls == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.Creds(credentials.NewTLS(s.tls.config("h2")))}
}
