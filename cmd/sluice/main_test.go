package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
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

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/store/dynamostore/dynamotest"
)

// binary is the sluice binary the tests that run the real process start:
// $SLUICE_BINARY, which `make test` builds (with -race) before any test's
// clock starts, or else one TestMain builds.
var binary string

func TestMain(m *testing.M) {
	if spec := os.Getenv(holdEnv); spec != "" {
		os.Exit(hold(spec)) // this binary run again as a client (holder_test.go)
	}
	bin, cleanup, err := sluiceBinary()
	if err != nil {
		fmt.Fprintln(os.Stderr, "cmd/sluice tests:", err)
		os.Exit(1)
	}
	binary = bin
	code := dynamotest.Main(m) // a DynamoDB emulator for the multi-node tests
	cleanup()
	// No goroutine may outlive the tests: in-process servers and clients
	// are closed, and the processes' log readers end with them.
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "cmd/sluice tests: %v\n", err)
			code = 1
		}
	}
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

// patience bounds every wait on a real process or a real clock: generous,
// since the machines that run `make test` are shared and a race build on two
// loaded cores is slow, yet bounded, so that a hang fails the test. A wait
// polls a condition; it never sleeps a fixed time in place of a signal.
const patience = 30 * time.Second

// waitFor polls cond until it holds, and fails the test if it does not
// within patience.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", patience, what)
		}
		time.Sleep(20 * time.Millisecond) // the poll's period, not a handshake
	}
}

// process is a running `sluice serve`.
type process struct {
	cmd    *exec.Cmd
	addr   string
	mu     sync.Mutex
	logs   bytes.Buffer
	done   chan error    // the exit, once; a test that takes it puts it back
	exited chan struct{} // closed when the process has exited
}

// start runs `sluice serve` on a free port, with its own data directory
// unless args name one, and waits until it serves.
func start(t *testing.T, args ...string) *process {
	t.Helper()
	return startAt(t, freeAddr(t), args...)
}

func startAt(t *testing.T, addr string, args ...string) *process {
	t.Helper()
	if !slices.Contains(args, "--data-dir") {
		args = append(args, "--data-dir", t.TempDir())
	}
	p, err := launch(t, addr, nil, append([]string{"serve", "--addr", addr}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// launch runs the binary with argv and env added to this process's
// environment, and waits until it serves HTTP on addr; an error if it
// exits first.
func launch(t *testing.T, addr string, env []string, argv ...string) (*process, error) {
	t.Helper()
	p := &process{addr: addr, done: make(chan error, 1), exited: make(chan struct{})}
	p.cmd = exec.Command(binary, argv...)
	// Static credentials for the DynamoDB emulator, as any client needs.
	p.cmd.Env = append(append(os.Environ(), "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test", "AWS_REGION=us-east-1"), env...)
	p.launch(t)
	// Ready when /healthz answers; an early exit fails at once.
	client := &http.Client{Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	scheme := "http"
	if slices.Contains(argv, "--tls-cert") { // whose certificate tls_test.go checks
		scheme = "https"
		client.Transport = &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
	}
	deadline := time.Now().Add(patience)
	for {
		resp, err := client.Get(scheme + "://" + p.addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			return p, nil
		}
		select {
		case <-p.exited:
			return p, fmt.Errorf("sluice exited before serving on %s:\n%s", p.addr, p.log())
		case <-time.After(20 * time.Millisecond): // the poll's period
		}
		if time.Now().After(deadline) {
			t.Fatalf("sluice did not serve on %s within %v:\n%s", p.addr, patience, p.log())
		}
	}
}

// launch starts p.cmd, its standard error read into p's logs, and kills
// it at the test's end, logging them if the test failed.
func (p *process) launch(t *testing.T) {
	t.Helper()
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
		io.Copy(io.Discard, stderr) // past an overlong line: never block the process
		p.done <- p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("sluice logs:\n%s", p.log())
		}
	})
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
	before := time.Now()
	resp := p.check(t, body)
	after := time.Now()
	if resp.StatusCode != 429 {
		t.Fatalf("sixth request: %s", resp.Status)
	}
	// The refusal is logged, with the id the response carries; the log
	// line is written as the handler returns, just after the answer.
	id := resp.Header.Get("X-Request-Id")
	if id == "" {
		t.Fatal("no X-Request-Id in the answer")
	}
	waitFor(t, "the refusal in the logs", func() bool {
		return strings.Contains(p.log(), "request_id="+id+" method=POST path=/v1/check status=429 ")
	})
	// The hour window ends on the hour: Retry-After is the rest of it,
	// rounded up, as the server saw it at some moment between before and
	// after, however long the request took on a loaded machine.
	end := before.Truncate(time.Hour).Add(time.Hour)
	if !after.Before(end) {
		t.Skip("the request straddled the hour: the window it was denied in is unknown")
	}
	lo, hi := end.Sub(after), end.Sub(before).Truncate(time.Second)+time.Second
	got, err := time.ParseDuration(resp.Header.Get("Retry-After") + "s")
	if err != nil || got < lo || got > hi {
		t.Fatalf("Retry-After %q, want the rest of the hour rounded up: between %v and %v", resp.Header.Get("Retry-After"), lo, hi)
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
			case <-time.After(patience):
				t.Fatalf("still running %v after %v", patience, sig)
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
	// A slow client: the request's body is held back until the drain has
	// begun, so the request is in flight when the signal arrives. With
	// "Expect: 100-continue" the server says when its handler starts to
	// read the body: the signal that the request is in flight.
	conn, err := net.Dial("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(patience))
	body := `{"tenant":"acme","checks":[{"policy":{"name":"p","algorithm":"token_bucket","limit":5,"window":"1s"}}]}`
	fmt.Fprintf(conn, "POST /v1/check HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n", p.addr, len(body))
	br := bufio.NewReader(conn)
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "HTTP/1.1 100 ") {
		t.Fatalf("no 100 Continue: %q %v", line, err)
	}
	if _, err := br.ReadString('\n'); err != nil { // the blank line after it
		t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The drain has begun when the listener is closed: new connections
	// are refused.
	waitFor(t, "the listener to close", func() bool {
		c, err := net.DialTimeout("tcp", p.addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	fmt.Fprint(conn, body)
	resp, err := http.ReadResponse(br, nil)
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
	case <-time.After(patience):
		t.Fatal("still running after the drain")
	}
	if !strings.Contains(p.log(), "draining in-flight requests") {
		t.Fatalf("no drain in the logs:\n%s", p.log())
	}
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"serve", "--store", "redis"},
		{"serve", "--max-keys", "0"},
		{"serve", "--sync-interval", "1s"},
		{"serve", "--sync-interval", "-1ms"},
		{"serve", "--write-behind", "2m"},
		{"serve", "--write-behind", "100us"},
		{"serve", "--store", "memory", "--write-behind", "1s"},
		{"serve", "--nope"},
		{"serve", "--addr", "0.0.0.0:0"}, // off loopback without an admin key
		{"serve", "--admin-key", "short"},
		{"serve", "--config", "/nonexistent.yaml"},
		{"serve", "--envoy-config", "testdata/envoy"}, // without --grpc-addr
		{"serve", "--grpc-addr", "127.0.0.1:0", "--envoy-config", "/nonexistent"},
		{"serve", "--grpc-addr", "127.0.0.1:0", "--envoy-config", "testdata/envoy-bad"},
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

// TestHelp: every command asked for help prints it, with its flags, to
// stdout and exits 0.
func TestHelp(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--help"}, "-addr"},
		{[]string{"serve", "-h"}, "-shutdown-timeout"},
		{[]string{"serve", "-help"}, "-addr"},
		{[]string{"serve", "--store", "memory", "-h"}, "-addr"},
		{[]string{"bench", "-h"}, "-workers"},
		{[]string{"bench-ws", "--help"}, "-conns"},
		{[]string{"dynamodb", "create-table", "-h"}, "-dynamodb-table"},
		{[]string{"dynamodb", "iam-policy", "-h"}, "-table-arn"},
		{[]string{"dynamodb", "-h"}, "create-table"},
		{[]string{"config", "-h"}, "config check FILE"},
		{[]string{"config", "check", "--help"}, "config check FILE"},
		{[]string{"help"}, "sluice serve"},
		{[]string{"-h"}, "sluice serve"},
	} {
		// In parallel: a race-enabled binary sleeps a second at a
		// clean exit, to catch late races.
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), patience)
			defer cancel()
			var stdout, stderr bytes.Buffer
			cmd := exec.CommandContext(ctx, binary, tc.args...)
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("%v, want exit 0\nstdout:\n%s\nstderr:\n%s", err, &stdout, &stderr)
			}
			if !strings.Contains(stdout.String(), tc.want) {
				t.Fatalf("stdout lacks %q:\n%s", tc.want, &stdout)
			}
		})
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
