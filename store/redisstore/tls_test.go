package redisstore_test

import (
	"context"
	"net"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testcert"
	"github.com/sluicehq/sluice/store/redisstore"
	"github.com/sluicehq/sluice/store/redisstore/redistest"
)

// TestTLSURL: a store reaches a Redis over TLS through a rediss:// URL,
// the server's certificate checked against its CA.
func TestTLSURL(t *testing.T) {
	dir := t.TempDir()
	ca := testcert.NewCA(t)
	caFile, certFile, keyFile := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	ca.WriteCA(t, caFile)
	ca.Issue(t, 2, certFile, keyFile)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	redistest.StartOwn(t, "--tls-port", strconv.Itoa(port), "--tls-cert-file", certFile, "--tls-key-file", keyFile,
		"--tls-ca-cert-file", caFile, "--tls-auth-clients", "no")
	url := "rediss://127.0.0.1:" + strconv.Itoa(port) + "/0"
	plain, err := redisstore.Dial(url) // the system's CAs
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if err := plain.Ping(context.Background()).Err(); err == nil {
		t.Fatal("a server certificate of an unknown CA was accepted")
	}
	c, err := redisstore.DialWith(url, redisstore.DialOptions{RootCAs: ca.Pool}) // --redis-ca
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := redisstore.New(c, redisstore.Options{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	p := sluice.Policy{Name: "p", Algorithm: sluice.FixedWindow, Limit: 1, Window: time.Minute}
	ops := []sluice.Op{{Key: sluice.Key{Tenant: "a", Policy: "p"}, Policy: &p, Hits: 1}}
	dst := make([]sluice.Decision, 1)
	if err := s.Apply(context.Background(), t0, ops, dst); err != nil || !dst[0].Allowed {
		t.Fatalf("Apply over TLS: %+v %v", dst[0], err)
	}
	if err := s.Apply(context.Background(), t0, ops, dst); err != nil || dst[0].Allowed {
		t.Fatalf("the second hit over TLS: %+v %v, want a denial", dst[0], err)
	}
}
