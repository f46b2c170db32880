package pebblestore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/sluicehq/sluice"
)

// TestOpenTwice: a data dir in use says so, and names its lock file,
// rather than "resource temporarily unavailable": held by another process
// (a copy of this test binary, holding it until its stdin closes), and by
// another store of this one.
func TestOpenTwice(t *testing.T) {
	if dir := os.Getenv("PEBBLESTORE_HOLD"); dir != "" {
		s, err := Open(dir, Options{})
		if err != nil {
			t.Fatal(err)
		}
		fmt.Println("held")
		io.Copy(io.Discard, os.Stdin)
		s.Close()
		return
	}
	check := func(dir, want string) {
		t.Helper()
		s, err := Open(dir, Options{})
		if err == nil {
			s.Close()
			t.Fatal("opened a data dir in use")
		}
		for _, want := range []string{want, filepath.Join(dir, "LOCK")} {
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("%v: does not say %q", err, want)
			}
		}
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestOpenTwice$")
	cmd.Env = append(os.Environ(), "PEBBLESTORE_HOLD="+dir)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	if line != "held\n" {
		stdin.Close()
		cmd.Wait()
		t.Fatalf("the other process did not hold the dir: %q", line)
	}
	check(dir, "in use by another sluice process")
	stdin.Close()
	cmd.Wait()

	dir = t.TempDir()
	open(t, dir)
	check(dir, "in use by another store of this process")
}

// gatedFS holds every sync of the write-ahead log while its gate is
// closed, and reports the first held one.
type gatedFS struct {
	vfs.FS
	mu     sync.Mutex
	gate   chan struct{} // nil: open
	held   chan struct{}
	signal sync.Once
}

func (fs *gatedFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return &gatedFile{File: f, fs: fs}, nil
}

func (fs *gatedFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname, c)
	if err != nil || !strings.HasSuffix(newname, ".log") {
		return f, err
	}
	return &gatedFile{File: f, fs: fs}, nil
}

func (fs *gatedFS) wait() {
	fs.mu.Lock()
	gate := fs.gate
	fs.mu.Unlock()
	if gate != nil {
		fs.signal.Do(func() { close(fs.held) })
		<-gate
	}
}

type gatedFile struct {
	vfs.File
	fs *gatedFS
}

func (f *gatedFile) Sync() error     { f.fs.wait(); return f.File.Sync() }
func (f *gatedFile) SyncData() error { f.fs.wait(); return f.File.SyncData() }
func (f *gatedFile) SyncTo(n int64) (bool, error) {
	f.fs.wait()
	return f.File.SyncTo(n)
}

// TestNoSyncUnderTenantLock: while a tenant write waits for its sync, the
// next tenant write still gets through its check and write (its tenant is
// visible); neither returns before its sync. The tenant mutex is never held
// across an fsync.
func TestNoSyncUnderTenantLock(t *testing.T) {
	fs := &gatedFS{FS: vfs.Default, held: make(chan struct{})}
	s, err := Open(t.TempDir(), Options{fs: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	gate := make(chan struct{})
	fs.mu.Lock()
	fs.gate = gate
	fs.mu.Unlock()

	done := make(chan error, 2)
	go func() { done <- s.CreateTenant(ctx, sluice.Tenant{ID: "a"}) }()
	<-fs.held // a's sync is held
	go func() {
		done <- s.CreateSession(ctx, sluice.Session{Tenant: "a", ID: "s", ExpiresAt: time.Now().Add(time.Hour)})
	}()
	go func() { done <- s.CreateTenant(ctx, sluice.Tenant{ID: "b"}) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := s.GetTenant(ctx, "b"); err == nil {
			break
		} else if !errors.Is(err, sluice.ErrTenantNotFound) {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			close(gate)
			t.Fatal("the second tenant write is stuck behind the first one's sync")
		}
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case err := <-done:
		t.Fatalf("a write returned (%v) before its sync", err)
	default:
	}
	fs.mu.Lock()
	fs.gate = nil
	fs.mu.Unlock()
	close(gate)
	for range 3 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}
