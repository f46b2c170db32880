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
	w.Poll()
	w.Poll() // a change loads once two polls read it
	if w.Config().Policies["chat"].Limit != 30 {
		t.Fatalf("a file of the same size and time with other content was taken as unchanged: limit %d", w.Config().Policies["chat"].Limit)
	}
}

// TestWatcherWaitsForAFileToSettle: a poll that reads a changed file loads
// it only once the next poll reads the same content: a file being written
// in place, read empty or half written by one poll, is never loaded as it
// was read then, and the whole file loads once it has stayed.
func TestWatcherWaitsForAFileToSettle(t *testing.T) {
	file := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(file, []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}
	var loads []bool
	w, err := NewWatcher(file, slog.New(slog.DiscardHandler), func(ok bool) { loads = append(loads, ok) })
	if err != nil {
		t.Fatal(err)
	}
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("") // truncated, mid-write: valid YAML with no policies
	w.Poll()
	next := strings.Replace(good, "limit: 20", "limit: 30", 1)
	write(next) // the write completes before the next poll
	w.Poll()
	if len(loads) != 0 || w.Config().Policies["chat"].Limit != 20 {
		t.Fatalf("after a poll of an empty file and one of the new: %d loads, limit %d; want none, 20", len(loads), w.Config().Policies["chat"].Limit)
	}
	w.Poll() // the same content twice: settled
	if len(loads) != 1 || !loads[0] || w.Config().Policies["chat"].Limit != 30 {
		t.Fatalf("after the new content stayed: loads %v, limit %d; want one good load, 30", loads, w.Config().Policies["chat"].Limit)
	}
	w.Poll()
	if len(loads) != 1 {
		t.Fatalf("an unchanged file loaded again: %v", loads)
	}
}
