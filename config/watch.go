package config

import (
	"context"
	"crypto/sha256"
	"log/slog"
	"os"
	"sync/atomic"
	"time"
)

// Watcher holds the configuration in force and reloads it from its file on
// demand (SIGHUP) and when the file changes. A file that fails to load is
// rejected, logged, and the configuration in force stays. It is safe for
// concurrent use.
type Watcher struct {
	file string
	cur  atomic.Pointer[Config]
	log  *slog.Logger
	// OnReload, if set, is told of every reload attempt, for metrics.
	onReload func(ok bool)
	// sum is the hash of the file last read, in force or rejected. A
	// change is found by content, never by size and modification time,
	// which a file replaced within one tick of the clock may keep.
	sum [sha256.Size]byte
}

// NewWatcher loads file; an error there is fatal to the caller.
func NewWatcher(file string, log *slog.Logger, onReload func(ok bool)) (*Watcher, error) {
	if onReload == nil {
		onReload = func(bool) {}
	}
	w := &Watcher{file: file, log: log, onReload: onReload}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	c, err := Parse(file, b)
	if err != nil {
		return nil, err
	}
	w.cur.Store(c)
	w.sum = sha256.Sum256(b)
	return w, nil
}

// Config returns the configuration in force.
func (w *Watcher) Config() *Config { return w.cur.Load() }

// Reload loads the file again. On error the configuration in force stays
// and the error is returned (and logged).
func (w *Watcher) Reload() error {
	b, err := os.ReadFile(w.file)
	if err == nil {
		w.sum = sha256.Sum256(b) // a bad file is not tried again until it changes
		var c *Config
		if c, err = Parse(w.file, b); err == nil {
			w.cur.Store(c)
			w.onReload(true)
			w.log.Info("configuration reloaded", "file", w.file, "policies", len(c.Policies), "endpoints", len(c.Endpoints))
			return nil
		}
	}
	w.onReload(false)
	w.log.Error("configuration rejected; the previous one stays in force", "file", w.file, "err", err)
	return err
}

// changed reports whether the file's content differs from the one last
// read. Reading a configuration file every poll costs next to nothing.
func (w *Watcher) changed() bool {
	b, err := os.ReadFile(w.file)
	if err != nil {
		return false // a file being replaced; look again next time
	}
	return sha256.Sum256(b) != w.sum
}

// Run reloads on every value from hup (SIGHUP) and when the file changes,
// polling it every poll, until ctx is done. Reloads happen on Run's
// goroutine only.
func (w *Watcher) Run(ctx context.Context, hup <-chan os.Signal, poll time.Duration) {
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			w.Reload()
		case <-t.C:
			if w.changed() {
				w.Reload()
			}
		}
	}
}
