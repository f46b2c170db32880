package logevery

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestGateLetsOneLineAnInterval(t *testing.T) {
	g := &Gate{Interval: time.Second}
	t0 := time.Unix(1_000, 0)
	if ok, n := g.Allow(t0); !ok || n != 0 {
		t.Fatalf("first line: ok=%v suppressed=%d, want true 0", ok, n)
	}
	for i := range 99 {
		if ok, _ := g.Allow(t0.Add(time.Duration(i) * time.Millisecond)); ok {
			t.Fatalf("line %d inside the interval let through", i+2)
		}
	}
	ok, n := g.Allow(t0.Add(time.Second))
	if !ok || n != 99 {
		t.Fatalf("after the interval: ok=%v suppressed=%d, want true 99", ok, n)
	}
	if ok, _ := g.Allow(t0.Add(time.Second + time.Millisecond)); ok {
		t.Fatal("a second line let through in the new interval")
	}
}

func TestGateZeroValueUsesDefault(t *testing.T) {
	var g Gate
	t0 := time.Unix(1_000, 0)
	g.Allow(t0)
	if ok, _ := g.Allow(t0.Add(DefaultInterval - time.Nanosecond)); ok {
		t.Fatal("a line let through before DefaultInterval")
	}
	if ok, n := g.Allow(t0.Add(DefaultInterval)); !ok || n != 1 {
		t.Fatalf("at DefaultInterval: ok=%v suppressed=%d, want true 1", ok, n)
	}
}

// Many goroutines at one instant let exactly one line through, and the
// next line accounts for every other.
func TestGateConcurrent(t *testing.T) {
	g := &Gate{Interval: time.Minute}
	t0 := time.Unix(1_000, 0)
	var wg sync.WaitGroup
	var mu sync.Mutex
	passed := 0
	for range 16 {
		wg.Go(func() {
			for range 100 {
				if ok, _ := g.Allow(t0); ok {
					mu.Lock()
					passed++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if passed != 1 {
		t.Fatalf("%d lines let through at one instant, want 1", passed)
	}
	if ok, n := g.Allow(t0.Add(time.Minute)); !ok || n != 1599 {
		t.Fatalf("next interval: ok=%v suppressed=%d, want true 1599", ok, n)
	}
}

func TestGateLogSaysWhatItHeldBack(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	g := &Gate{Interval: time.Second}
	t0 := time.Unix(1_000, 0)
	for i := range 1_000 {
		g.Log(log, t0.Add(time.Duration(i)*time.Millisecond), slog.LevelWarn, "store failed", "tenant", "acme")
	}
	g.Log(log, t0.Add(time.Second), slog.LevelWarn, "store failed", "tenant", "acme")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines for 1,001 failures over 1s, want 2:\n%s", len(lines), buf.String())
	}
	if strings.Contains(lines[0], "suppressed") || !strings.Contains(lines[1], "suppressed=999") {
		t.Fatalf("lines do not count what was held back:\n%s", buf.String())
	}
}
