package server

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
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
// both files or neither (cmd/sluice checks). With ClientCAFile, the rate
// limit service alone (--grpc-addr) requires a client certificate; the
// HTTP API asks for none, whose callers carry keys.
type TLSConfig struct {
	CertFile string // --tls-cert: PEM, the leaf first, then its chain
	KeyFile  string // --tls-key: PEM
	// ClientCAFile (--grpc-client-ca) holds in PEM the CAs a client
	// certificate of --grpc-addr must chain to; empty: none asked.
	ClientCAFile string
	// ClientSAN (--grpc-client-san), with ClientCAFile, is a name the
	// client certificate must hold, compared as envoyproxy/ratelimit's
	// GRPC_CLIENT_TLS_SAN is: x509's VerifyHostname, against its DNS
	// names (wildcards as a host name matches them) or, for an IP
	// address, its IP addresses; never its URIs or common name.
	ClientSAN string
}

// tlsPoll is how often the files of the certificate are read for a
// change.
const tlsPoll = time.Second

// tlsPair is the content of the two files of a certificate, and of the
// client CA file if any.
type tlsPair struct{ cert, key, clientCA []byte }

// tlsFiles is what the files of a tlsPair hold.
type tlsFiles struct {
	cert    tls.Certificate
	clients *x509.CertPool // nil without a client CA file
}

// certLoader serves a certificate read from a pair of PEM files, and the
// pool of client CAs of a third if any (the three one source, read
// together), read
// again on reload (SIGHUP) and when their content changes and has settled
// (package reload, as for --config): a pair that fails to load is logged,
// naming the file, and the certificate in force stays. Safe for
// concurrent use.
type certLoader struct {
	w *reload.Watcher[tlsPair, tlsFiles]
}

// newCertLoader loads the pair of c; an error names the file at fault.
func newCertLoader(c TLSConfig, log *slog.Logger) (*certLoader, error) {
	where := []any{"cert", c.CertFile, "key", c.KeyFile}
	if c.ClientCAFile != "" {
		where = append(where, "client_ca", c.ClientCAFile)
	}
	w, err := reload.New(reload.Source[tlsPair, tlsFiles]{
		What:  "TLS certificate",
		Where: where,
		Read:  func() (tlsPair, [sha256.Size]byte, error) { return readPair(c) },
		Parse: func(p tlsPair) (*tlsFiles, error) { return parsePair(c, p) },
		Attrs: func(f *tlsFiles) []any {
			return []any{"serial", f.cert.Leaf.SerialNumber.String(), "not_after", f.cert.Leaf.NotAfter}
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
	if c.ClientCAFile != "" {
		if p.clientCA, err = os.ReadFile(c.ClientCAFile); err != nil {
			return p, [sha256.Size]byte{}, fmt.Errorf("--grpc-client-ca: %w", err)
		}
	}
	h := sha256.New()
	fmt.Fprintf(h, "%d %d\n", len(p.cert), len(p.key))
	h.Write(p.cert)
	h.Write(p.key)
	h.Write(p.clientCA)
	return p, [sha256.Size]byte(h.Sum(nil)), nil
}

// parsePair parses the pair, and the client CAs, read from the files of c,
// naming the file at fault. The client CAs are those of the file alone,
// not the system's: envoyproxy/ratelimit adds them to the system's, which
// lets in a client certificate of any public CA.
func parsePair(c TLSConfig, p tlsPair) (*tlsFiles, error) {
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
	f := &tlsFiles{cert: cert} // its Leaf parsed by X509KeyPair
	if c.ClientCAFile != "" {
		f.clients = x509.NewCertPool()
		if !hasBlock(p.clientCA, "CERTIFICATE") || !f.clients.AppendCertsFromPEM(p.clientCA) {
			return nil, fmt.Errorf("--grpc-client-ca %s: no PEM CERTIFICATE block that parses", c.ClientCAFile)
		}
	}
	return f, nil
}

// config returns a server TLS configuration serving l's certificate,
// offering protos by ALPN.
func (l *certLoader) config(protos ...string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: protos,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return &l.w.Config().cert, nil
		},
	}
}

// grpcConfig returns config(protos), requiring of each client, with a
// client CA file, a certificate that chains to its CAs, for client
// authentication, and, if san is not empty, holds san (see
// TLSConfig.ClientSAN): a client without is refused in the handshake.
// The CAs in force, read again as the certificate, are those of each
// handshake.
func (l *certLoader) grpcConfig(san string, protos ...string) *tls.Config {
	c := l.config(protos...)
	if l.w.Config().clients == nil {
		return c
	}
	c.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		f := l.w.Config()
		cc := l.config(protos...)
		cc.ClientAuth = tls.RequireAndVerifyClientCert
		cc.ClientCAs = f.clients
		// A resumed session is not verified again: a client of a CA
		// since removed from the file could resume one for days.
		cc.SessionTicketsDisabled = true
		if san != "" {
			cc.VerifyPeerCertificate = func(_ [][]byte, chains [][]*x509.Certificate) error {
				// Verified by then: every chain starts at the leaf.
				if len(chains) == 0 || len(chains[0]) == 0 {
					return fmt.Errorf("no verified client certificate")
				}
				if err := chains[0][0].VerifyHostname(san); err != nil {
					return fmt.Errorf("the client certificate is not for %q (--grpc-client-san): %w", san, err)
				}
				return nil
			}
		}
		return cc, nil
	}
	return c
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

// grpcTLS returns the rate limit service's TLS option, if configured:
// with a client CA file, it requires client certificates, of every call,
// health checks included, as envoyproxy/ratelimit does on its gRPC port.
func (s *Server) grpcTLS() []grpc.ServerOption {
	if s.tls == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.Creds(credentials.NewTLS(s.tls.grpcConfig(s.c.TLS.ClientSAN, "h2")))}
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
