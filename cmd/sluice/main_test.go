package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/store/dynamostore/dynamotest"
)

// binary is the sluice binary the tests that run the real process start:
// $SLUICE_BINARY, which `make test` builds (with -race) before any test's
// clock starts, or else one TestMain builds.
var binary string

func TestMain(m *testing.M) {
	bin, cleanup, err := sluiceBinary()
	if err != nil {
		fmt.Fprintln(os.Stderr, "cmd/sluice tests:", err)
		os.Exit(1)
	}
	binary = bin
	code := dynamotest.Main(m) // a DynamoDB emulator for the multi-node tests
	cleanup()
	os.Exit(code)
}

// sluiceBinary returns the path of the binary under test: $SLUICE_BINARY
// if set, else one built here into a temporary directory, which cleanup
// removes. TestMain builds before m.Run, but cmd/go's kill timer (-timeout
// plus a minute) already runs: on a loaded machine a race build can take
// minutes, so `make test` builds the binary first and names it.
func sluiceBinary() (bin string, cleanup func(), err error) {
	if bin := os.Getenv("SLUICE_BINARY"); bin != "" {
		abs, err := filepath.Abs(bin)
		if err != nil {
			return "", nil, err
		}
		if fi, err := os.Stat(abs); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return "", nil, fmt.Errorf("$SLUICE_BINARY=%s is not an executable file (%v): run make test, or unset it to build one here", bin, err)
		}
		return abs, func() {}, nil
	}
	dir, err := os.MkdirTemp("", "sluice-test-")
	if err != nil {
		return "", nil, err
	}
	bin = filepath.Join(dir, "sluice")
	fmt.Fprintln(os.Stderr, "cmd/sluice tests: $SLUICE_BINARY is unset: building sluice with -race first (make test builds it beforehand)")
	start := time.Now()
	out, err := exec.Command("go", "build", "-race", "-o", bin, ".").CombinedOutput()
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("building sluice: %v\n%s", err, out)
	}
	fmt.Fprintf(os.Stderr, "cmd/sluice tests: built %s in %v\n", bin, time.Since(start).Round(time.Millisecond))
	return bin, func() { os.RemoveAll(dir) }, nil
}

// freeAddr returns a loopback address with a port free at the time of the
// call.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// process is a running `sluice serve`.
type process struct {
	cmd  *exec.Cmd
	addr string
	mu   sync.Mutex
	logs bytes.Buffer
	done chan error
}

// start runs `sluice serve` on a free port, with its own data directory
// unless args name one, and waits until it serves.
func start(t *testing.T, args ...string) *process {
	t.Helper()
	return startAt(t, freeAddr(t), args...)
}

func startAt(t *testing.T, addr string, args ...string) *process {
	t.Helper()
	p := &process{addr: addr, done: make(chan error, 1)}
	if !slices.Contains(args, "--data-dir") {
		args = append(args, "--data-dir", t.TempDir())
	}
	p.cmd = exec.Command(binary, append([]string{"serve", "--addr", p.addr}, args...)...)
	// Static credentials for the DynamoDB emulator, as any client needs.
	p.cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test", "AWS_REGION=us-east-1")
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.mu.Lock()
			p.logs.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
		}
		p.done <- p.cmd.Wait()
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("sluice logs:\n%s", p.log())
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + p.addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			return p
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("sluice did not serve on %s within 10s:\n%s", p.addr, p.log())
	return nil
}

func (p *process) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

func (p *process) check(t *testing.T, body string) *http.Response {
	t.Helper()
	resp, err := http.Post("http://"+p.addr+"/v1/check", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

func TestServeLimits(t *testing.T) {
	p := start(t)
	body := `{"tenant":"acme","checks":[{"key":"u1","policy":{"name":"chat","algorithm":"fixed_window","limit":5,"window":"1h"}}]}`
	for i := range 5 {
		if resp := p.check(t, body); resp.StatusCode != 200 {
			t.Fatalf("request %d: %s", i, resp.Status)
		}
	}
	resp := p.check(t, body)
	if resp.StatusCode != 429 {
		t.Fatalf("sixth request: %s", resp.Status)
	}
	// The hour window ends on the hour: Retry-After is the rest of it.
	now := time.Now()
	wait := now.Truncate(time.Hour).Add(time.Hour).Sub(now)
	got, err := time.ParseDuration(resp.Header.Get("Retry-After") + "s")
	if err != nil || got < wait || got > wait+2*time.Second {
		t.Fatalf("Retry-After %q, want about %v rounded up", resp.Header.Get("Retry-After"), wait)
	}
}

// TestGracefulShutdown: SIGTERM and SIGINT stop the server cleanly, exit 0.
func TestGracefulShutdown(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			p := start(t)
			if err := p.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-p.done:
				p.done <- err // for the cleanup
				if err != nil {
					t.Fatalf("exit after %v: %v\n%s", sig, err, p.log())
				}
			case <-time.After(15 * time.Second):
				t.Fatalf("still running 15s after %v", sig)
			}
			if !strings.Contains(p.log(), "msg=stopped") {
				t.Fatalf("no clean stop in the logs:\n%s", p.log())
			}
		})
	}
}

// TestGracefulDrain: a request in flight when SIGTERM arrives is answered.
func TestGracefulDrain(t *testing.T) {
	p := start(t)
	// A slow client: the request's body trickles in, so the request is
	// in flight when the signal arrives.
	conn, err := net.Dial("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"tenant":"acme","checks":[{"policy":{"name":"p","algorithm":"token_bucket","limit":5,"window":"1s"}}]}`
	fmt.Fprintf(conn, "POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body[:10])
	time.Sleep(200 * time.Millisecond) // let the server start reading the request
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	fmt.Fprint(conn, body[10:])
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("in-flight request lost on SIGTERM: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("in-flight request: %s", resp.Status)
	}
	select {
	case err := <-p.done:
		p.done <- err
		if err != nil {
			t.Fatalf("exit: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("still running after the drain")
	}
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"serve", "--store", "redis"},
		{"serve", "--max-keys", "0"},
		{"serve", "--nope"},
		{"serve", "--addr", "0.0.0.0:0"}, // off loopback without an admin key
		{"serve", "--admin-key", "short"},
		{"serve", "--config", "/nonexistent.yaml"},
		{"config", "check", "/nonexistent.yaml"},
		{"frobnicate"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		out, err := exec.CommandContext(ctx, binary, args...).CombinedOutput()
		cancel()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
			t.Errorf("%v: %v, want exit 2\n%s", args, err, out)
		}
		if len(out) == 0 {
			t.Errorf("%v: no message", args)
		}
	}
}

func httpGet(url string) (string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}
