package reload

import (
	"context"
	"crypto/sha256"
	"errors"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// source is a configuration held in memory: an int, written as text.
type source struct {
	mu      sync.Mutex
	text    string
	readErr error
}

func (s *source) set(text string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.text, s.readErr = text, err
}

func (s *source) src() Source[string, int] {
	return Source[string, int]{
		What: "test configuration",
		Read: func() (string, [sha256.Size]byte, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			return s.text, sha256.Sum256([]byte(s.text)), s.readErr
		},
		Parse: func(text string) (*int, error) {
			n, err := strconv.Atoi(text)
			return &n, err
		},
		Attrs: func(c *int) []any { return []any{"value", *c} },
	}
}

func newWatcher(t *testing.T, s *source) (*Watcher[string, int], *[]bool) {
	t.Helper()
	var loads []bool
	w, err := New(s.src(), slog.New(slog.DiscardHandler), func(ok bool) { loads = append(loads, ok) })
	if err != nil {
		t.Fatal(err)
	}
	return w, &loads
}

func TestNewRefusesABadSource(t *testing.T) {
	for _, s := range []*source{{text: "x"}, {text: "1", readErr: errors.New("gone")}} {
		if _, err := New(s.src(), slog.New(slog.DiscardHandler), nil); err == nil {
			t.Errorf("New(%q, %v) loaded", s.text, s.readErr)
		}
	}
}

// TestPollLoadsASettledChange: a change loads once two polls in a row read
// it; a bad change is rejected once, the configuration in force stays, and
// is not tried again until the content changes.
func TestPollLoadsASettledChange(t *testing.T) {
	s := &source{text: "1"}
	w, loads := newWatcher(t, s)
	s.set("2", nil)
	w.Poll()
	if *w.Config() != 1 || len(*loads) != 0 {
		t.Fatalf("one poll of a change: config %d, loads %v; want 1, none", *w.Config(), *loads)
	}
	w.Poll()
	if *w.Config() != 2 || len(*loads) != 1 || !(*loads)[0] {
		t.Fatalf("two polls of a change: config %d, loads %v; want 2, [true]", *w.Config(), *loads)
	}
	s.set("bad", nil)
	w.Poll()
	w.Poll()
	w.Poll()
	if *w.Config() != 2 || len(*loads) != 2 || (*loads)[1] {
		t.Fatalf("a bad change polled three times: config %d, loads %v; want 2, [true false]", *w.Config(), *loads)
	}
	s.set("3", errors.New("being replaced"))
	w.Poll()
	w.Poll()
	if *w.Config() != 2 || len(*loads) != 2 {
		t.Fatalf("a source failing to read was loaded: config %d, loads %v", *w.Config(), *loads)
	}
}

// TestReload: Reload loads at once, and a failed one keeps what is in force.
func TestReload(t *testing.T) {
	s := &source{text: "1"}
	w, _ := newWatcher(t, s)
	s.set("5", nil)
	if err := w.Reload(); err != nil || *w.Config() != 5 {
		t.Fatalf("Reload: %v, config %d; want 5", err, *w.Config())
	}
	s.set("5", errors.New("unreadable"))
	if err := w.Reload(); err == nil || *w.Config() != 5 {
		t.Fatalf("Reload of an unreadable source: %v, config %d; want an error, 5", err, *w.Config())
	}
}

// TestRunReloadsOnHupAndStops: Run reloads on a hang-up and returns when
// its context ends (goleak checks nothing is left).
func TestRunReloadsOnHupAndStops(t *testing.T) {
	s := &source{text: "1"}
	w, err := New(s.src(), slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	hup := make(chan os.Signal)
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx, hup, time.Hour) }()
	s.set("7", nil)
	hup <- nil // taken by Run's loop, which reloads before it takes another
	hup <- nil
	if *w.Config() != 7 {
		t.Fatalf("after a hang-up: config %d, want 7", *w.Config())
	}
	cancel()
	<-done
}
