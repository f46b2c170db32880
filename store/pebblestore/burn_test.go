package pebblestore

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// burnChild, set in the environment, makes TestBurntCountSurvivesKill the
// child that burns and waits to be killed, in the directory it names.
const burnChild = "SLUICE_PEBBLE_BURN_CHILD"

var (
	// A window as long as may be: the store forgets a state its wall
	// clock finds expired, so the test runs at the wall clock's time,
	// which this window's turn is most unlikely to fall in.
	burnLong = sluice.Policy{Name: "long", Algorithm: sluice.FixedWindow, Limit: 10, Window: sluice.MaxWindow}
	burnKey  = sluice.Key{Tenant: "acme", Algorithm: sluice.FixedWindow, Policy: "long", Value: "u"}
)

// TestBurntCountSurvivesKill: a count burnt past its limit
// (sluice.Op.Burn) is on disk when Apply returns: a process killed with
// SIGKILL right after leaves it to the next.
func TestBurntCountSurvivesKill(t *testing.T) {
	burnAt := time.Now()
	if dir := os.Getenv(burnChild); dir != "" {
		s, err := Open(dir, Options{})
		if err != nil {
			t.Fatal(err)
		}
		dst := make([]sluice.Decision, 1)
		for _, hits := range []int64{8, 5} {
			if err := s.Apply(context.Background(), burnAt, []sluice.Op{{Key: burnKey, Policy: &burnLong, Hits: hits, Burn: true}}, dst); err != nil {
				t.Fatal(err)
			}
		}
		os.Stdout.WriteString("burnt " + strconv.FormatInt(burnAt.UnixNano(), 10) + "\n")
		select {} // until killed
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestBurntCountSurvivesKill$")
	cmd.Env = append(os.Environ(), burnChild+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	at, ok := strings.CutPrefix(strings.TrimSpace(line), "burnt ")
	ns, perr := strconv.ParseInt(at, 10, 64)
	if !ok || perr != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child said %q, %v", line, err)
	}
	burnAt = time.Unix(0, ns)
	if err := cmd.Process.Kill(); err != nil { // SIGKILL: no Close
		t.Fatal(err)
	}
	cmd.Wait()

	s := open(t, dir)
	dst := make([]sluice.Decision, 1)
	if err := s.Apply(context.Background(), burnAt, []sluice.Op{{Key: burnKey, Policy: &burnLong, Burn: true}}, dst); err != nil {
		t.Fatal(err)
	}
	if dst[0].Remaining != -3 {
		t.Fatalf("after SIGKILL: %+v, want the count of 13 burnt (remaining -3)", dst[0])
	}
	if err := s.Apply(context.Background(), burnAt, []sluice.Op{{Key: burnKey, Policy: &burnLong}}, dst); err != nil || dst[0].Allowed {
		t.Fatalf("plain read at 13 of 10 after SIGKILL: %+v %v, want denied", dst[0], err)
	}
}
