package config

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
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
	// A changed file is picked up by polling. Its size differs: file
	// times tick every few milliseconds, and the watcher takes a file of
	// the same size and time as unchanged.
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
