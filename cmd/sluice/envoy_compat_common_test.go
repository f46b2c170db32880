package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"
)

// compatDir writes files (name → YAML) into a new directory for
// --envoy-config, and returns it.
func compatDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, yaml := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// startCompat starts sluice serve on the memory store with the rate limit
// service on a free port, the directory of files, and args, and returns
// a client of it.
func startCompat(t *testing.T, files map[string]string, args ...string) (*rls, *process) {
	t.Helper()
	grpcAddr := freeAddr(t)
	args = append([]string{"--store", "memory", "--grpc-addr", grpcAddr, "--envoy-config", compatDir(t, files), "--config-poll", "100ms"}, args...)
	p := start(t, args...)
	return dialRLS(t, grpcAddr), p
}

// sameJSON reports whether JSON a and b hold the same value.
func sameJSON(t *testing.T, a []byte, b string) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal([]byte(b), &y); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return reflect.DeepEqual(x, y)
}

// serveRefused runs sluice serve with args, on the memory store and a
// port of its choosing, expecting it to refuse to start: it returns its
// output and the error it exited with (nil if it exited 0). One still
// running after patience is killed and fails the test.
func serveRefused(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	args = append([]string{"serve", "--store", "memory", "--addr", "127.0.0.1:0", "--data-dir", t.TempDir()}, args...)
	out, err := exec.CommandContext(ctx, binary, args...).CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("sluice %v did not exit within %v:\n%s", args, patience, out)
	}
	return string(out), err
}
