package envoyrls

import (
	"crypto/sha256"
	"encoding/binary"
	"log/slog"
	"sync/atomic"

	"github.com/sluicehq/sluice/internal/reload"
)

// Watcher holds the configuration in force and reloads its directory on
// demand (SIGHUP) and when a file in it changes: is written, added, removed
// or replaced, a symbolic link swapped included (how Kubernetes updates a
// ConfigMap, and how envoyproxy/ratelimit's runtime is updated). A
// directory that fails to load is rejected and logged, and the
// configuration in force stays. It is safe for concurrent use.
type Watcher struct {
	*reload.Watcher[[]File, Config]
}

// NewWatcher loads dir as l says; an error there is fatal to the caller,
// unless l.StartWithoutConfig. onReload, if not nil, is told of every
// reload, for metrics and health.
func NewWatcher(dir string, l Loading, log *slog.Logger, onReload func(ok bool)) (*Watcher, error) {
	src := reload.Source[[]File, Config]{
		What:  "envoy configuration",
		Where: []any{"dir", dir},
		Read: func() ([]File, [sha256.Size]byte, error) {
			files, err := readDir(dir)
			return files, sum(files), err
		},
		Parse: l.Parse,
		Attrs: func(c *Config) []any { return []any{"domains", len(c.domains)} },
	}
	w, err := reload.New(src, log, onReload)
	if err != nil && l.StartWithoutConfig {
		log.Error("envoy configuration not loaded; every call fails until one loads", "dir", dir, "err", err)
		// Start from nothing, as if no content (whose hash no directory
		// has) had loaded as no configuration: the directory's content,
		// read by the polls, is a change, loaded once settled.
		var started atomic.Bool // then the directory
		from := src
		from.Read = func() ([]File, [sha256.Size]byte, error) {
			if !started.Load() {
				return nil, [sha256.Size]byte{}, nil
			}
			return src.Read()
		}
		from.Parse = func(files []File) (*Config, error) {
			if !started.Load() {
				return unloaded, nil
			}
			return src.Parse(files)
		}
		w, err = reload.New(from, log, onReload)
		started.Store(true)
	}
	if err != nil {
		return nil, err
	}
	return &Watcher{w}, nil
}

// unloaded stands, in a Watcher, for no configuration loaded yet.
var unloaded = &Config{}

// Config returns the configuration in force, or nil if none has loaded.
func (w *Watcher) Config() *Config {
	if c := w.Watcher.Config(); c != unloaded {
		return c
	}
	return nil
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
