package main

import (
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// TestVersion: `sluice version` and `sluice --version` print the version,
// the commit and the Go version; /metrics has sluice_build_info of the
// same version, 1.
func TestVersion(t *testing.T) {
	line := regexp.MustCompile(`^sluice (\S+) \(commit (\S+), (go\S+)\)\n$`)
	var version string
	for _, arg := range []string{"version", "--version"} {
		out, err := exec.Command(binary, arg).Output()
		if err != nil {
			t.Fatalf("sluice %s: %v", arg, err)
		}
		m := line.FindStringSubmatch(string(out))
		if m == nil {
			t.Fatalf("sluice %s printed %q, want sluice VERSION (commit COMMIT, goX)", arg, out)
		}
		version = m[1]
	}
	p := start(t)
	resp, err := http.Get("http://" + p.addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for l := range strings.Lines(string(body)) {
		if strings.HasPrefix(l, "sluice_build_info{") {
			if !strings.Contains(l, `version="`+version+`"`) || !strings.HasSuffix(strings.TrimSpace(l), " 1") {
				t.Fatalf("build info %q, want version %q and 1", l, version)
			}
			return
		}
	}
	t.Fatal("no sluice_build_info in /metrics")
}
