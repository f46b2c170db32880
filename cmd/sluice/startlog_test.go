package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// runBinary runs sluice with args, its environment the test's and env,
// and returns its standard error (standard output discarded) and how it
// exited.
func runBinary(ctx context.Context, env []string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	return stderr.String(), err
}

// TestStartErrorJSON: with the JSON log format, from the flag or the
// environment, an error at the start (a bad flag value, a bad variable, a
// port in use, a store that cannot open) is one JSON line at level ERROR
// naming the error, and exits 2; in text, it is the plain line it always
// was.
func TestStartErrorJSON(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		env  []string
		args []string
		want string // in the error
	}{
		{nil, []string{"--log-format", "json", "--max-keys", "x"}, "-max-keys"},
		{[]string{"SLUICE_LOG_FORMAT=json"}, []string{"--max-key", "1"}, "did you mean --max-keys?"},
		{[]string{"SLUICE_LOG_FORMAT=json", "SLUICE_MAX_KEYS=x"}, nil, "$SLUICE_MAX_KEYS (--max-keys)"},
		{[]string{"SLUICE_LOG_FORMAT=json"}, []string{"--addr", held.Addr().String()}, "address already in use"},
		{[]string{"SLUICE_LOG_FORMAT=json"}, []string{"--store", "pebble", "--data-dir", notDir}, notDir},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		args := append([]string{"serve", "--store", "memory", "--addr", "127.0.0.1:0"}, tc.args...)
		out, err := runBinary(ctx, tc.env, args...)
		cancel()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
			t.Errorf("%v %v: %v, want exit 2", tc.env, tc.args, err)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		var last struct{ Level, Msg, Err string }
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil || last.Level != "ERROR" || last.Msg == "" || !strings.Contains(last.Err, tc.want) {
			t.Errorf("%v %v: last line %q (%v), want a JSON error line naming %q", tc.env, tc.args, lines[len(lines)-1], err, tc.want)
		}
		for _, l := range lines {
			if !json.Valid([]byte(l)) {
				t.Errorf("%v %v: a line not JSON: %q", tc.env, tc.args, l)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	out, _ := runBinary(ctx, nil, "serve", "--max-keys", "x")
	if !strings.HasPrefix(out, "sluice: invalid value \"x\" for flag -max-keys") {
		t.Errorf("text: %q, want the plain line", out)
	}
}

// TestJSONLogDurations: a duration in the JSON log carries its unit: the
// drain's timeout, logged at SIGTERM, is "10s", not 10000000000.
func TestJSONLogDurations(t *testing.T) {
	p := start(t, "--store", "memory", "--log-format", "json")
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err := <-p.done
	p.done <- err
	if !strings.Contains(p.log(), `"timeout":"10s"`) {
		t.Fatalf("no drain timeout with its unit in the log:\n%s", p.log())
	}
}
