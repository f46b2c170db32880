package envoyrls

import (
	"crypto/sha256"
	"encoding/binary"
	"log/slog"

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

// NewWatcher loads dir as l says; an error there is fatal to the caller.
// onReload, if not nil, is told of every reload, for metrics.
func NewWatcher(dir string, l Loading, log *slog.Logger, onReload func(ok bool)) (*Watcher, error) {
	w, err := reload.New(reload.Source[[]File, Config]{
		What:  "envoy configuration",
		Where: []any{"dir", dir},
		Read: func() ([]File, [sha256.Size]byte, error) {
			files, err := readDir(dir)
			return files, sum(files), err
		},
		Parse: l.Parse,
		Attrs: func(c *Config) []any { return []any{"domains", len(c.domains)} },
	}, log, onReload)
	if err != nil {
		return nil, err
	}
	return &Watcher{w}, nil
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
