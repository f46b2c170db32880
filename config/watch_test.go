package config

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

const good = "policies:\n  chat: {algorithm: fixed_window, limit: 20, window: 60s}\nendpoints:\n  chat: [chat]\n"

func TestWatcherReloadsAndRejects(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(file, []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var results []bool
	w, err := NewWatcher(file, slog.New(slog.DiscardHandler), func(ok bool) {
		mu.Lock()
		results = append(results, ok)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	hup := make(chan os.Signal, 1)
	go func() { w.Run(ctx, hup, 10*time.Millisecond); close(done) }()
	defer func() { cancel(); <-done }()

	waitFor := func(what string, cond func() bool) {
		t.Helper()
		const patience = 30 * time.Second // generous: the machines are shared
		deadline := time.Now().Add(patience)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out after %v waiting for %s", patience, what)
			}
			time.Sleep(5 * time.Millisecond) // the poll's period, not a handshake
		}
	}
	// Each file is written whole, by a rename, as a deployment should:
	// a poll in the middle of an os.WriteFile would read a torn file.
	replace := func(content string) {
		t.Helper()
		tmp := file + ".tmp"
		if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, file); err != nil {
			t.Fatal(err)
		}
	}
	// A changed file is picked up by polling.
	replace(good[:len("policies:\n  chat: {algorithm: fixed_window, limit: ")] + "300, window: 60s}\nendpoints:\n  chat: [chat]\n")
	waitFor("the new limit", func() bool { return w.Config().Policies["chat"].Limit == 300 })

	// A bad file is rejected and the old configuration stays.
	replace("policies:\n  chat: {algorithm: fixed_window, limit: 0, window: 60s}\n")
	waitFor("the rejection", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(results) > 0 && !results[len(results)-1]
	})
	if got := w.Config().Policies["chat"].Limit; got != 300 {
		t.Fatalf("after a bad file the limit is %d, want 300", got)
	}

	// SIGHUP reloads (here, the good file written back).
	replace(good)
	hup <- os.Interrupt
	waitFor("the reload", func() bool { return w.Config().Policies["chat"].Limit == 20 })
}

// TestWatcherSeesSameSizeAndTime: a file replaced by one of the same size
// and modification time is still a change: the watcher compares content.
func TestWatcherSeesSameSizeAndTime(t *testing.T) {
	file := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(file, []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWatcher(file, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	same := strings.Replace(good, "limit: 20", "limit: 30", 1) // same length
	if err := os.WriteFile(file, []byte(same), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(file, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if !w.changed() {
		t.Fatal("a file of the same size and time with other content was taken as unchanged")
	}
	if err := w.Reload(); err != nil || w.Config().Policies["chat"].Limit != 30 {
		t.Fatalf("reload: %v, limit %d", err, w.Config().Policies["chat"].Limit)
	}
	if w.changed() {
		t.Fatal("the file in force reads as changed")
	}
}
