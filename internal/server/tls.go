package server

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/pem"
	"fmt"
	"log"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sluicehq/sluice/internal/reload"
)

// TLSConfig is the TLS of the HTTP API and of Envoy's rate limit service:
// both files or neither (cmd/sluice checks).
type TLSConfig struct {
	CertFile string // --tls-cert: PEM, the leaf first, then its chain
	KeyFile  string // --tls-key: PEM
}

// tlsPoll is how often the files of the certificate are read for a
// change.
const tlsPoll = time.Second

// tlsPair is the content of the two files of a certificate.
type tlsPair struct{ cert, key []byte }

// certLoader serves a certificate read from a pair of PEM files, read
// again on reload (SIGHUP) and when their content changes and has settled
// (package reload, as for --config): a pair that fails to load is logged,
// naming the file, and the certificate in force stays. Safe for
// concurrent use.
type certLoader struct {
	w *reload.Watcher[tlsPair, tls.Certificate]
}

// newCertLoader loads the pair of c; an error names the file at fault.
func newCertLoader(c TLSConfig, log *slog.Logger) (*certLoader, error) {
	w, err := reload.New(reload.Source[tlsPair, tls.Certificate]{
		What:  "TLS certificate",
		Where: []any{"cert", c.CertFile, "key", c.KeyFile},
		Read:  func() (tlsPair, [sha256.Size]byte, error) { return readPair(c) },
		Parse: func(p tlsPair) (*tls.Certificate, error) { return parsePair(c, p) },
		Attrs: func(cert *tls.Certificate) []any {
			return []any{"serial", cert.Leaf.SerialNumber.String(), "not_after", cert.Leaf.NotAfter}
		},
	}, log, nil)
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	return &certLoader{w: w}, nil
}

// readPair reads the files of c, and a hash of both.
func readPair(c TLSConfig) (tlsPair, [sha256.Size]byte, error) {
	var p tlsPair
	var err error
	if p.cert, err = os.ReadFile(c.CertFile); err != nil {
		return p, [sha256.Size]byte{}, fmt.Errorf("--tls-cert: %w", err)
	}
	if p.key, err = os.ReadFile(c.KeyFile); err != nil {
		return p, [sha256.Size]byte{}, fmt.Errorf("--tls-key: %w", err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "%d\n", len(p.cert))
	h.Write(p.cert)
	h.Write(p.key)
	return p, [sha256.Size]byte(h.Sum(nil)), nil
}

// parsePair parses the pair read from the files of c, naming the file at
// fault.
func parsePair(c TLSConfig, p tlsPair) (*tls.Certificate, error) {
	if !hasBlock(p.cert, "CERTIFICATE") {
		return nil, fmt.Errorf("--tls-cert %s: no PEM CERTIFICATE block", c.CertFile)
	}
	if !hasBlock(p.key, "PRIVATE KEY") {
		return nil, fmt.Errorf("--tls-key %s: no PEM PRIVATE KEY block", c.KeyFile)
	}
	cert, err := tls.X509KeyPair(p.cert, p.key)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert %s and --tls-key %s: %w", c.CertFile, c.KeyFile, err)
	}
	return &cert, nil // its Leaf parsed by X509KeyPair
}

// config returns a server TLS configuration serving l's certificate,
// offering protos by ALPN.
func (l *certLoader) config(protos ...string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: protos,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return l.w.Config(), nil
		},
	}
}

// hasBlock reports whether data holds a PEM block whose type ends with
// suffix ("PRIVATE KEY" matches "EC PRIVATE KEY").
func hasBlock(data []byte, suffix string) bool {
	for {
		var b *pem.Block
		if b, data = pem.Decode(data); b == nil {
			return false
		}
		if strings.HasSuffix(b.Type, suffix) {
			return true
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

// watchTLS reloads the certificate on each value of s.tlsHup, and when its
// files change, until ctx is done.
func (s *Server) watchTLS(ctx context.Context) { s.tls.w.Run(ctx, s.tlsHup, tlsPoll) }

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

// errorLog returns the HTTP server's error log, at warn. With TLS, a
// failed handshake, which anyone who reaches the port causes at will (a
// scanner, a plain HTTP client, a client that does not trust the
// certificate), is logged at warn the first time each minute and at debug
// the rest, so that a flood of them does not flood the log.
func (s *Server) errorLog() *log.Logger {
	if s.tls == nil {
		return slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)
	}
	return log.New(&handshakeLog{log: s.log, now: time.Now}, "", 0)
}

// handshakeLog writes the lines of the HTTP server's error log to log,
// failed handshakes sampled. Safe for concurrent use.
type handshakeLog struct {
	log *slog.Logger
	now func() time.Time

	mu   sync.Mutex
	next time.Time // before it, a failed handshake is at debug
}

func (h *handshakeLog) Write(p []byte) (int, error) {
	msg := strings.TrimSuffix(string(p), "\n")
	level, attrs := slog.LevelWarn, []any(nil)
	if strings.HasPrefix(msg, "http: TLS handshake error") {
		h.mu.Lock()
		if now := h.now(); now.Before(h.next) {
			level = slog.LevelDebug
		} else {
			h.next = now.Add(time.Minute)
			attrs = []any{"sampled", "first failed TLS handshake this minute; the rest at debug"}
		}
		h.mu.Unlock()
	}
	h.log.Log(context.Background(), level, msg, attrs...)
	return len(p), nil
}
