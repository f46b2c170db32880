// Package dynamotest runs a real DynamoDB-compatible server, dynoxide, for
// tests: one per test package, started by Main from TestMain, on a free
// loopback port, and stopped when the package's tests end. `make deps`
// installs dynoxide (tools/package.json). With CI=true a missing dynoxide
// fails the tests; otherwise the tests that need it skip, saying so.
package dynamotest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// binaryPath is where `make deps` puts dynoxide, from the module root.
const binaryPath = "tools/node_modules/@dynoxide/linux-x64/dynoxide"

// Server is a running dynoxide.
type Server struct {
	Endpoint string // http://127.0.0.1:PORT
	cmd      *exec.Cmd
	bin      string
	port     int
	dbPath   string // SQLite file, so that data outlives a restart; "" in memory
}

var (
	current *Server
	missing string // why there is no server
	tables  atomic.Int64
)

// Main starts dynoxide, runs the package's tests and stops it. Call it from
// TestMain: os.Exit(dynamotest.Main(m)).
func Main(m *testing.M) int {
	bin, err := find()
	if err != nil {
		missing = err.Error()
		if os.Getenv("CI") == "true" {
			fmt.Fprintf(os.Stderr, "dynamotest: %v (CI=true: a missing emulator is a failure; run make deps)\n", err)
			return 1
		}
		return m.Run()
	}
	s, err := Start(bin)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dynamotest: %v\n", err)
		return 1
	}
	current = s
	code := m.Run()
	s.Stop()
	return code
}

// Find locates dynoxide: $SLUICE_DYNOXIDE, or binaryPath under the module
// root, found by walking up from the working directory.
func Find() (string, error) { return find() }

func find() (string, error) {
	if p := os.Getenv("SLUICE_DYNOXIDE"); p != "" {
		return p, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			p := filepath.Join(dir, binaryPath)
			if _, err := os.Stat(p); err != nil {
				return "", fmt.Errorf("dynoxide not found at %s: run make deps", p)
			}
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("dynoxide not found: no go.mod above the working directory")
		}
		dir = parent
	}
}

// StartOwn starts a server of the test's own, with its data in a file so
// that it survives Stop and Restart (for fault tests), and stops it at the
// end of the test.
func StartOwn(t testing.TB) *Server {
	t.Helper()
	Get(t) // skip, or fail, as the package's server would
	bin, err := find()
	if err != nil {
		t.Fatal(err)
	}
	s, err := start(bin, t.TempDir()+"/dynoxide.db")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// Start runs dynoxide from bin on a free loopback port and waits until it
// answers.
func Start(bin string) (*Server, error) { return start(bin, "") }

func start(bin, dbPath string) (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	s := &Server{Endpoint: "http://127.0.0.1:" + strconv.Itoa(port), bin: bin, port: port, dbPath: dbPath}
	return s, s.start()
}

func (s *Server) start() error {
	args := []string{"serve", "--host", "127.0.0.1", "--port", strconv.Itoa(s.port)}
	if s.dbPath != "" {
		args = append(args, "--db-path", s.dbPath)
	}
	s.cmd = exec.Command(s.bin, args...)
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("starting dynoxide: %w", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(s.port), 100*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.Stop()
	return fmt.Errorf("dynoxide did not listen on port %d within 10s", s.port)
}

// Stop kills dynoxide and waits for it. Stopping a stopped server does
// nothing.
func (s *Server) Stop() {
	if s.cmd != nil && s.cmd.Process != nil && s.cmd.ProcessState == nil {
		s.cmd.Process.Kill()
		s.cmd.Wait()
	}
}

// Restart starts dynoxide again on the same port: with its data if it has
// a file (StartOwn), empty otherwise.
func (s *Server) Restart() error { return s.start() }

// Get returns the package's server, skipping the test if there is none
// (never with CI=true: Main has failed then).
func Get(t testing.TB) *Server {
	t.Helper()
	if current == nil {
		t.Skipf("no DynamoDB emulator: %s", missing)
	}
	return current
}

// Client returns a DynamoDB client of the package's server with static
// credentials, as any client of dynoxide needs.
func Client(t testing.TB) *dynamodb.Client {
	t.Helper()
	return NewClient(Get(t).Endpoint)
}

// NewClient returns a client of a DynamoDB endpoint with static test
// credentials.
func NewClient(endpoint string) *dynamodb.Client {
	return dynamodb.New(dynamodb.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
	})
}

// TableName returns a table name unique in the test binary.
func TableName(t testing.TB) string {
	return fmt.Sprintf("sluice_test_%d_%d", os.Getpid(), tables.Add(1))
}

// Context returns a context for setup calls.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
