// Package systemd tests Sluice's systemd unit with systemd-analyze: the
// unit verifies, and its hardening scores at most 2.0 of systemd's 10 for
// exposure.
package systemd

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

const binary = "/usr/local/bin/sluice"

// TestUnit runs `systemd-analyze verify` and `systemd-analyze security` on
// a copy of sluice.service whose binary is the test's own: verify wants
// an executable there.
func TestUnit(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("no systemd-analyze: run make deps (CI=true: a missing tool is a failure)")
		}
		t.Skip("no systemd-analyze: run make deps")
	}
	unit, err := os.ReadFile("sluice.service")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(unit, []byte("ExecStart="+binary+" serve ")) {
		t.Fatalf("ExecStart does not run %s serve", binary)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "sluice.service")
	if err := os.WriteFile(path, bytes.ReplaceAll(unit, []byte(binary), []byte(self)), 0o644); err != nil {
		t.Fatal(err)
	}

	out, err := exec.Command(analyze, "verify", "--man=no", path).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	// The threshold is ten times the exposure shown.
	out, err = exec.Command(analyze, "security", "--offline=yes", "--threshold=20", path).CombinedOutput()
	if err != nil {
		t.Errorf("systemd-analyze security: %v: exposure over 2.0\n%s", err, out)
	}
	if m := regexp.MustCompile(`exposure level for \S+: (\S+)`).FindSubmatch(out); m != nil {
		t.Logf("exposure %s", m[1])
	}
}

// TestStopTimeout checks that systemd waits longer than serve's
// --shutdown-timeout drains before it kills, and stops with SIGTERM.
func TestStopTimeout(t *testing.T) {
	unit, err := os.ReadFile("sluice.service")
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for _, line := range strings.Split(string(unit), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			settings[k] = v
		}
	}
	const shutdownTimeout = 10 * time.Second // serve's default
	stop, err := time.ParseDuration(settings["TimeoutStopSec"])
	if err != nil || stop <= shutdownTimeout {
		t.Errorf("TimeoutStopSec=%s (%v): want more than serve's --shutdown-timeout, %v", settings["TimeoutStopSec"], err, shutdownTimeout)
	}
	if settings["KillSignal"] != "SIGTERM" {
		t.Errorf("KillSignal=%s, want SIGTERM: serve drains on it", settings["KillSignal"])
	}
	if settings["Restart"] != "on-failure" {
		t.Errorf("Restart=%s, want on-failure", settings["Restart"])
	}
}
