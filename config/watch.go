package config

import (
	"crypto/sha256"
	"log/slog"
	"os"

	"github.com/sluicehq/sluice/internal/reload"
)

// Watcher holds the configuration in force and reloads it from its file on
// demand (SIGHUP) and when the file changes and has settled (Run; a change
// applies once two polls in a row read it). A file that fails to load is
// rejected, logged, and the configuration in force stays. It is safe for
// concurrent use.
type Watcher struct {
	*reload.Watcher[[]byte, Config]
}

// NewWatcher loads file; an error there is fatal to the caller. onReload,
// if not nil, is told of every reload attempt, for metrics.
func NewWatcher(file string, log *slog.Logger, onReload func(ok bool)) (*Watcher, error) {
	w, err := reload.New(reload.Source[[]byte, Config]{
		What:  "configuration",
		Where: []any{"file", file},
		Read: func() ([]byte, [sha256.Size]byte, error) {
			b, err := os.ReadFile(file)
			return b, sha256.Sum256(b), err
		},
		Parse: func(b []byte) (*Config, error) { return Parse(file, b) },
		Attrs: func(c *Config) []any {
			return []any{"policies", len(c.Policies), "endpoints", len(c.Endpoints)}
		},
	}, log, onReload)
	if err != nil {
		return nil, err
	}
	return &Watcher{w}, nil
}
