package server

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// No goroutine may outlive the tests: a closed server stops all of its own.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// syncBuffer is a log sink safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// testConfig is a server's configuration as `sluice serve`'s defaults
// make it, on a free loopback port, with the memory store.
func testConfig() Config {
	return Config{
		Addr: "127.0.0.1:0", Store: "memory", MaxKeys: 1000, ConfigPoll: time.Second,
		ShutdownTimeout: 5 * time.Second, WSRenew: 10 * time.Second, WSMaxMessage: 128 << 10,
		WSIdle: time.Minute, WSLifetime: time.Hour, Version: "test",
	}
}

// waitLog polls the log for want.
func waitLog(t *testing.T, log *syncBuffer, want string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(log.String(), want); {
		if time.Now().After(deadline) {
			t.Fatalf("the log never said %q:\n%s", want, log)
		}
		time.Sleep(10 * time.Millisecond) // a poll's period
	}
}

// TestRunAndClose: a server built by New answers once Run serves, reloads
// its --config on a value sent to its reload channel, drains and logs
// "stopped" when its context ends, and closes, twice harmlessly.
func TestRunAndClose(t *testing.T) {
	file := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(file, []byte("version: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := testConfig()
	c.ConfigFile = file
	var log syncBuffer
	s, err := New(context.Background(), c, newTextLogger(&log))
	if err != nil {
		t.Fatal(err)
	}
	hups := s.ReloadSignals()
	if len(hups) != 1 {
		t.Fatalf("%d reload channels, want 1, for --config", len(hups))
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	waitLog(t, &log, "sluice serving")
	resp, err := http.Get("http://" + s.Addr().String() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /healthz: %d", resp.StatusCode)
	}
	http.DefaultClient.CloseIdleConnections()
	hups[0] <- syscall.SIGHUP
	waitLog(t, &log, "configuration reloaded")

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !strings.Contains(log.String(), "msg=stopped") {
		t.Errorf("no stopped in the log:\n%s", log.String())
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close again: %v", err)
	}
}

// TestNewFails: off loopback without an admin key, New refuses; failing
// to listen, it closes the store it opened, which opens again.
func TestNewFails(t *testing.T) {
	c := testConfig()
	c.Addr = "0.0.0.0:0"
	if _, err := New(context.Background(), c, newTextLogger(&syncBuffer{})); err == nil || !strings.Contains(err.Error(), "without an admin key") {
		t.Fatalf("off loopback without a key: %v", err)
	}

	taken, err := New(context.Background(), testConfig(), newTextLogger(&syncBuffer{}))
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	c = testConfig()
	c.Store, c.DataDir, c.Addr = "pebble", t.TempDir(), taken.Addr().String()
	for range 2 {
		if _, err := New(context.Background(), c, newTextLogger(&syncBuffer{})); err == nil || !strings.Contains(err.Error(), "address already in use") {
			t.Fatalf("on a port taken: %v, want the listener's error (and the store closed, to open again)", err)
		}
	}
}

// TestCloseWithoutRun: a server closed without running releases what New
// opened.
func TestCloseWithoutRun(t *testing.T) {
	s, err := New(context.Background(), testConfig(), newTextLogger(&syncBuffer{}))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func newTextLogger(w *syncBuffer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }

// reset empties the buffer.
func (s *syncBuffer) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.Reset()
}
