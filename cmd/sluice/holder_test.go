package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// A holder is this test binary run again as a client that opens many
// WebSocket connections and holds them until its stdin closes: a process
// holds at most 20,000 files on the machines that run the tests, and a
// test of 20,000 connections needs their ends spread over processes, as
// real clients are.

// holdEnv names the environment variable that makes the test binary a
// holder; its value is a holdSpec in JSON.
const holdEnv = "SLUICE_TEST_HOLD"

// holdSpec is what a holder opens: n connections to url (a node's
// address), connection i to sessions[i % len(sessions)] of tenant.
type holdSpec struct {
	Addr     string   `json:"addr"`
	Tenant   string   `json:"tenant"`
	Sessions []string `json:"sessions"`
	N        int      `json:"n"`
}

// hold is a holder's main: it opens the connections, 64 at a time, making
// again a connect answered 503 (the store could not decide in time),
// printing "progress N" each 500 connections held, and prints "held N", or
// "failed: why" and exits 1; then it holds them until stdin closes.
func hold(spec string) int {
	var s holdSpec
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		fmt.Println("failed:", err)
		return 1
	}
	conns := make([]*websocket.Conn, s.N)
	var failed atomic.Value
	var opened atomic.Int64
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for i := range s.N {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			u := "ws://" + s.Addr + "/v1/ws?tenant=" + s.Tenant + "&session=" + s.Sessions[i%len(s.Sessions)]
			for try := 0; try < 100 && failed.Load() == nil; try++ {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				ws, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: &http.Client{}})
				cancel()
				switch {
				case err == nil:
					conns[i] = ws
					if n := opened.Add(1); n%500 == 0 && n < int64(s.N) {
						fmt.Println("progress", n)
					}
					return
				case resp != nil && resp.StatusCode == http.StatusServiceUnavailable:
					time.Sleep(50 * time.Millisecond) // a client's pause before trying again
				default:
					failed.CompareAndSwap(nil, fmt.Errorf("connect %d: %v", i, err))
					return
				}
			}
			failed.CompareAndSwap(nil, fmt.Errorf("connect %d: still 503 after 100 tries", i))
		})
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		fmt.Println("failed:", err)
		return 1
	}
	fmt.Println("held", s.N)
	io.Copy(io.Discard, os.Stdin)
	for _, ws := range conns {
		ws.CloseNow()
	}
	return 0
}

// holder is a running holder process.
type holder struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string // its stdout, by line
}

// startHolder starts a holder of spec; it ends with the test.
func startHolder(t *testing.T, spec holdSpec) *holder {
	t.Helper()
	b, _ := json.Marshal(spec)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), holdEnv+"="+string(b))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &holder{cmd: cmd, stdin: stdin, lines: make(chan string, 64)}
	go func() {
		defer close(h.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			h.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() { h.stop(t) })
	return h
}

// held waits for the holder to say it holds its connections, as long as
// it says it opened more within each stall: a loaded machine (another make
// test beside this one) slows the connects, and only a holder that stops
// making progress fails.
func (h *holder) held(t *testing.T, stall time.Duration) {
	t.Helper()
	for {
		select {
		case line, ok := <-h.lines:
			switch {
			case ok && strings.HasPrefix(line, "progress "):
				continue
			case !ok || !strings.HasPrefix(line, "held "):
				t.Fatalf("holder: %q", line)
			}
			return
		case <-time.After(stall):
			t.Fatalf("holder: no word within %v", stall)
		}
	}
}

// stop closes the holder's stdin, so that it closes its connections and
// exits, and waits for it.
func (h *holder) stop(t *testing.T) {
	if h.stdin == nil {
		return
	}
	h.stdin.Close()
	h.stdin = nil
	done := make(chan error, 1)
	go func() { done <- h.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("holder: %v", err)
		}
	case <-time.After(patience):
		h.cmd.Process.Kill()
		<-done
		t.Errorf("holder did not exit within %v of its stdin's close", patience)
	}
	for range h.lines {
	}
}
