// Package redistest runs a real redis-server for tests: one per test
// package, started by Main from TestMain on a free loopback port, with no
// persistence, and killed when the package's tests end. Debian's
// redis-server package provides it (apt-get install redis-server). With
// CI=true a missing redis-server fails the tests; otherwise the tests that
// need it skip, saying so.
package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is a running redis-server.
type Server struct {
	Addr string // 127.0.0.1:PORT
	cmd  *exec.Cmd
	bin  string
	args []string
}

var (
	current  *Server
	missing  string // why there is no server
	prefixes atomic.Int64
)

// Main starts redis-server, runs the package's tests and stops it. Call it
// from TestMain: os.Exit(redistest.Main(m)).
func Main(m *testing.M) int {
	bin, err := find()
	if err != nil {
		missing = err.Error()
		if os.Getenv("CI") == "true" {
			fmt.Fprintf(os.Stderr, "redistest: %v (CI=true: a missing redis-server is a failure)\n", err)
			return 1
		}
		return m.Run()
	}
	s, err := Start(bin)
	if err != nil {
		fmt.Fprintf(os.Stderr, "redistest: %v\n", err)
		return 1
	}
	current = s
	code := m.Run()
	s.Stop()
	return code
}

// find locates redis-server: $SLUICE_REDIS_SERVER, or redis-server on PATH
// (Debian installs it in /usr/bin).
func find() (string, error) {
	if p := os.Getenv("SLUICE_REDIS_SERVER"); p != "" {
		return p, nil
	}
	p, err := exec.LookPath("redis-server")
	if err != nil {
		return "", fmt.Errorf("redis-server not found: apt-get install redis-server")
	}
	return p, nil
}

// Start runs redis-server from bin on a free loopback port, without
// snapshots or an append-only file, with args added, and waits until it
// answers PING (NOAUTH counts).
func Start(bin string, args ...string) (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), bin: bin}
	s.args = append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", os.TempDir(), "--protected-mode", "no"}, args...)
	if err := s.run(); err != nil {
		return nil, err
	}
	return s, nil
}

// run starts the server's process and waits until it answers PING.
func (s *Server) run() error {
	s.cmd = exec.Command(s.bin, s.args...)
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("starting redis-server: %w", err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		var answer redis.Error // NOAUTH, with --requirepass: it answers
		if err == nil || errors.As(err, &answer) {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.Stop()
	return fmt.Errorf("redis-server did not answer on %s within 10s", s.Addr)
}

// Signal sends sig to the server's process (syscall.SIGSTOP to make it
// hang, SIGCONT to resume it).
func (s *Server) Signal(sig os.Signal) error { return s.cmd.Process.Signal(sig) }

// Pid is the server's process id.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Restart starts the server again, on its address with its arguments
// (its --dir, and so its append-only file, included), once Stop or a
// signal has ended it.
func (s *Server) Restart() error {
	s.Stop()
	return s.run()
}

// Stop kills redis-server (SIGKILL, which ends a stopped process too)
// and waits for it. Stopping a stopped server does nothing.
func (s *Server) Stop() {
	if s.cmd != nil && s.cmd.Process != nil && s.cmd.ProcessState == nil {
		s.cmd.Process.Kill()
		s.cmd.Wait()
	}
}

// StartOwn starts a redis-server of the test's own, with extra arguments
// (such as --requirepass), and stops it at the end of the test.
// It needs no Main: without one, a missing redis-server skips the test
// (fails it with CI=true).
func StartOwn(t testing.TB, args ...string) *Server {
	t.Helper()
	bin, err := find()
	switch {
	case err != nil && os.Getenv("CI") == "true":
		t.Fatalf("%v (CI=true: a missing redis-server is a failure)", err)
	case err != nil:
		t.Skipf("no redis-server: %v", err)
	}
	s, err := Start(bin, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// StartCluster starts a Redis Cluster of one node, of the test's own,
// holding every slot, and stops it at the end of the test. One node is
// enough to check a store's keys: Cluster refuses a script or command
// whose keys are in different slots (CROSSSLOT) whatever node holds them.
func StartCluster(t testing.TB) *Server {
	t.Helper()
	dir := t.TempDir()
	s := StartOwn(t, "--cluster-enabled", "yes", "--cluster-config-file", dir+"/nodes.conf", "--dir", dir)
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err(); err != nil {
		t.Fatalf("CLUSTER ADDSLOTSRANGE: %v", err)
	}
	for {
		info, err := c.ClusterInfo(ctx).Result()
		if err != nil {
			t.Fatalf("CLUSTER INFO: %v", err)
		}
		if strings.Contains(info, "cluster_state:ok") {
			return s
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the cluster is not ok within 30s: %s", info)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Get returns the package's server, skipping the test if there is none
// (never with CI=true: Main has failed then).
func Get(t testing.TB) *Server {
	t.Helper()
	if current == nil {
		t.Skipf("no redis-server: %s", missing)
	}
	return current
}

// Client returns a client of the package's server, closed at the end of
// the test.
func Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: Get(t).Addr})
	t.Cleanup(func() { c.Close() })
	return c
}

// Prefix returns a key prefix unique in the test binary, so that the
// stores of a package's tests share the server and not their keys.
func Prefix(t testing.TB) string {
	return fmt.Sprintf("t%d.%d:", os.Getpid(), prefixes.Add(1))
}
