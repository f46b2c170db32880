package config

import (
	"bytes"
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
	sum      [sha256.Size]byte // of the file in force
	stat     fileStat
}

type fileStat struct {
	mod  time.Time
	size int64
}

// NewWatcher loads file; an error there is fatal to the caller.
func NewWatcher(file string, log *slog.Logger, onReload func(ok bool)) (*Watcher, error) {
	if onReload == nil {
		onReload = func(bool) {}
	}
	w := &Watcher{file: file, log: log, onReload: onReload}
	b, st, err := w.read()
	if err != nil {
		return nil, err
	}
	c, err := Parse(file, b)
	if err != nil {
		return nil, err
	}
	w.cur.Store(c)
	w.sum, w.stat = sha256.Sum256(b), st
	return w, nil
}

// Config returns the configuration in force.
func (w *Watcher) Config() *Config { return w.cur.Load() }

func (w *Watcher) read() ([]byte, fileStat, error) {
	fi, err := os.Stat(w.file)
	if err != nil {
		return nil, fileStat{}, err
	}
	b, err := os.ReadFile(w.file)
	return b, fileStat{fi.ModTime(), fi.Size()}, err
}

// Reload loads the file again. On error the configuration in force stays
// and the error is returned (and logged).
func (w *Watcher) Reload() error {
	b, st, err := w.read()
	if err == nil {
		var c *Config
		if c, err = Parse(w.file, b); err == nil {
			w.cur.Store(c)
			w.sum, w.stat = sha256.Sum256(b), st
			w.onReload(true)
			w.log.Info("configuration reloaded", "file", w.file, "policies", len(c.Policies), "endpoints", len(c.Endpoints))
			return nil
		}
	}
	w.stat = st // do not retry the same bad file every poll
	w.onReload(false)
	w.log.Error("configuration rejected; the previous one stays in force", "file", w.file, "err", err)
	return err
}

// changed reports whether the file differs from the one last read.
func (w *Watcher) changed() bool {
	fi, err := os.Stat(w.file)
	if err != nil {
		return false // a file being replaced; look again next time
	}
	if (fileStat{fi.ModTime(), fi.Size()}) == w.stat {
		return false
	}
	b, err := os.ReadFile(w.file)
	if err != nil {
		return false
	}
	sum := sha256.Sum256(b)
	if bytes.Equal(sum[:], w.sum[:]) {
		w.stat = fileStat{fi.ModTime(), fi.Size()}
		return false
	}
	return true
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
