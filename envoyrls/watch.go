package envoyrls

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/config"
)

// Watcher holds the configuration in force and reloads its directory on
// demand (SIGHUP) and when a file in it changes: is written, added, removed
// or replaced, a symbolic link swapped included (how Kubernetes updates a
// ConfigMap, and how envoyproxy/ratelimit's runtime is updated). A
// directory that fails to load is rejected and logged, and the
// configuration in force stays. It is safe for concurrent use.
type Watcher struct {
	dir      string
	cur      atomic.Pointer[Config]
	log      *slog.Logger
	onReload func(ok bool)
	settled  config.Settled
}

// NewWatcher loads dir; an error there is fatal to the caller. onReload,
// if not nil, is told of every reload, for metrics.
func NewWatcher(dir string, log *slog.Logger, onReload func(ok bool)) (*Watcher, error) {
	if onReload == nil {
		onReload = func(bool) {}
	}
	w := &Watcher{dir: dir, log: log, onReload: onReload}
	files, err := readDir(dir)
	if err != nil {
		return nil, err
	}
	c, err := Parse(files)
	if err != nil {
		return nil, err
	}
	w.cur.Store(c)
	w.settled.Loaded(sum(files))
	return w, nil
}

// Config returns the configuration in force.
func (w *Watcher) Config() *Config { return w.cur.Load() }

// Reload loads the directory again. On error the configuration in force
// stays, and the error is returned (and logged).
func (w *Watcher) Reload() error {
	files, err := readDir(w.dir)
	return w.load(files, err)
}

func (w *Watcher) load(files []File, err error) error {
	if err == nil {
		w.settled.Loaded(sum(files)) // a bad directory is not tried again until it changes
		var c *Config
		if c, err = Parse(files); err == nil {
			w.cur.Store(c)
			w.onReload(true)
			w.log.Info("envoy configuration reloaded", "dir", w.dir, "files", len(files), "domains", len(c.domains))
			return nil
		}
	}
	w.onReload(false)
	w.log.Error("envoy configuration rejected; the previous one stays in force", "dir", w.dir, "err", err)
	return err
}

func (w *Watcher) poll() {
	files, err := readDir(w.dir)
	if err != nil {
		return // being replaced; look again next time
	}
	if w.settled.Poll(sum(files)) {
		w.load(files, nil)
	}
}

// Run reloads on every value from hup and when the directory changes,
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
			w.poll()
		}
	}
}

// sum hashes files' names and contents.
func sum(files []File) [sha256.Size]byte {
	h := sha256.New()
	for _, f := range files {
		h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(f.Name))))
		h.Write([]byte(f.Name))
		h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(f.Data))))
		h.Write(f.Data)
	}
	var s [sha256.Size]byte
	h.Sum(s[:0])
	return s
}
