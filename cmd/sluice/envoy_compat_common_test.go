package main

import (
	"encoding/json"
	"os"
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
