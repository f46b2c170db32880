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
	settled  Settled
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
	w.settled.Loaded(sha256.Sum256(b))
	return w, nil
}

// Config returns the configuration in force.
func (w *Watcher) Config() *Config { return w.cur.Load() }

// Reload loads the file again. On error the configuration in force stays
// and the error is returned (and logged).
func (w *Watcher) Reload() error {
	b, err := os.ReadFile(w.file)
	return w.load(b, err)
}

// load makes b, the file's content read with err, the configuration in
// force, or rejects it.
func (w *Watcher) load(b []byte, err error) error {
	if err == nil {
		w.settled.Loaded(sha256.Sum256(b)) // a bad file is not tried again until it changes
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

// poll reads the file and loads it if its content changed and has stayed
// the same since the previous poll. Reading a configuration file every
// poll costs next to nothing.
func (w *Watcher) poll() {
	b, err := os.ReadFile(w.file)
	if err != nil {
		return // a file being replaced; look again next time
	}
	if w.settled.Poll(sha256.Sum256(b)) {
		w.load(b, nil)
	}
}

// Run reloads on every value from hup (SIGHUP) and when the file changes,
// polling it every poll (a change applies once two polls in a row read
// it), until ctx is done. Reloads happen on Run's
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
			w.poll()
		}
	}
}
