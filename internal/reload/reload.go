// Package reload holds a configuration in force and reloads it from its
// source: on demand (SIGHUP), and when the source's content changes and has
// settled. A source that fails to load is rejected and logged, and the
// configuration in force stays. The YAML configuration file (package
// config) and Envoy's configuration directory (package envoyrls) both
// reload through it.
package reload

import (
	"context"
	"crypto/sha256"
	"log/slog"
	"os"
	"slices"
	"sync/atomic"
	"time"
)

// Source reads a configuration: Read returns its content, a hash of it
// (the change a poll looks for) and the parse of it; an error reading is a
// source being replaced, looked at again at the next poll.
type Source[C, T any] struct {
	// What names the configuration in logs: "configuration", "envoy
	// configuration".
	What string
	// Where names the source in logs: "file", path.
	Where []any
	// Read reads the source whole.
	Read func() (content C, sum [sha256.Size]byte, err error)
	// Parse parses what Read read.
	Parse func(content C) (*T, error)
	// Attrs describe a configuration loaded, for the log.
	Attrs func(c *T) []any
}

// Watcher holds the configuration in force. It is safe for concurrent use;
// reloads happen on Run's goroutine, or Reload's caller.
type Watcher[C, T any] struct {
	src      Source[C, T]
	cur      atomic.Pointer[T]
	log      *slog.Logger
	onReload func(ok bool)
	settled  settled
}

// New loads src; an error there is fatal to the caller. onReload, if not
// nil, is told of every reload, for metrics.
func New[C, T any](src Source[C, T], log *slog.Logger, onReload func(ok bool)) (*Watcher[C, T], error) {
	if onReload == nil {
		onReload = func(bool) {}
	}
	w := &Watcher[C, T]{src: src, log: log, onReload: onReload}
	content, sum, err := src.Read()
	if err != nil {
		return nil, err
	}
	c, err := src.Parse(content)
	if err != nil {
		return nil, err
	}
	w.cur.Store(c)
	w.settled.loaded(sum)
	return w, nil
}

// Config returns the configuration in force.
func (w *Watcher[C, T]) Config() *T { return w.cur.Load() }

// Reload loads the source again. On error the configuration in force
// stays, and the error is returned (and logged).
func (w *Watcher[C, T]) Reload() error {
	content, sum, err := w.src.Read()
	return w.load(content, sum, err)
}

func (w *Watcher[C, T]) load(content C, sum [sha256.Size]byte, err error) error {
	if err == nil {
		w.settled.loaded(sum) // a bad source is not tried again until it changes
		var c *T
		if c, err = w.src.Parse(content); err == nil {
			w.cur.Store(c)
			w.onReload(true)
			w.log.Info(w.src.What+" reloaded", slices.Concat(w.src.Where, w.src.Attrs(c))...)
			return nil
		}
	}
	w.onReload(false)
	w.log.Error(w.src.What+" rejected; the previous one stays in force", slices.Concat(w.src.Where, []any{"err", err})...)
	return err
}

// Poll reads the source and loads it if its content changed and has stayed
// the same since the previous poll. Run polls; tests call it to step.
func (w *Watcher[C, T]) Poll() {
	content, sum, err := w.src.Read()
	if err != nil {
		return // being replaced; look again next time
	}
	if w.settled.poll(sum) {
		w.load(content, sum, nil)
	}
}

// Run reloads on every value from hup (SIGHUP) and when the source
// changes, polling it every poll (a change applies once two polls in a row
// read it), until ctx is done.
func (w *Watcher[C, T]) Run(ctx context.Context, hup <-chan os.Signal, poll time.Duration) {
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			w.Reload()
		case <-t.C:
			w.Poll()
		}
	}
}

// settled tells a poller when a source's content, read by each poll, has
// changed and settled: a change is loaded once two polls in a row read the
// same new content, so that a file being written in place is not loaded
// half written. A change is found by content, never by size and
// modification time, which a file replaced within one tick of the clock may
// keep. The zero settled has loaded nothing.
type settled struct {
	// sum is the hash of the content last loaded, in force or rejected;
	// seen, of a change the last poll read, not yet loaded.
	sum     [sha256.Size]byte
	seen    [sha256.Size]byte
	hasSeen bool
}

// loaded records that the content of hash sum was loaded (in force or
// rejected): it is not loaded again until it changes.
func (s *settled) loaded(sum [sha256.Size]byte) { s.sum, s.hasSeen = sum, false }

// poll is told the hash of the content a poll read, and reports whether to
// load it now.
func (s *settled) poll(sum [sha256.Size]byte) bool {
	switch {
	case sum == s.sum:
		s.hasSeen = false
	case !s.hasSeen || sum != s.seen:
		s.seen, s.hasSeen = sum, true // look again next poll: it may be half written
	default:
		return true
	}
	return false
}
