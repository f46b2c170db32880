package buildinfo

import (
	"runtime"
	"strings"
	"testing"
)

// TestRead: a stamped version is kept, an empty one is "dev", the Go
// version is the runtime's, and the line names all three.
func TestRead(t *testing.T) {
	if i := Read("1.2.3", "abc"); i.Version != "1.2.3" || i.Commit != "abc" || i.GoVersion != runtime.Version() {
		t.Fatalf("%+v", i)
	}
	i := Read("", "")
	if i.Version == "" {
		t.Fatalf("no version: %+v", i)
	}
	line := Info{Version: "1.2.3", Commit: "abc", GoVersion: "go1.26.8"}.String()
	if line != "sluice 1.2.3 (commit abc, go1.26.8)" {
		t.Fatalf("line %q", line)
	}
	if line := (Info{Version: "dev", GoVersion: "go1"}).String(); !strings.Contains(line, "commit unknown") {
		t.Fatalf("line %q", line)
	}
}
