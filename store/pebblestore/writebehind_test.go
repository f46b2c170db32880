package pebblestore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/sluicehq/sluice"
)

// TestWriteBehindFailingDisk: written behind, decisions go on from memory
// while the log's writes and syncs fail; the writes behind fail, and the
// store's readiness (Ping) says so, with the counters not durable.
func TestWriteBehindFailingDisk(t *testing.T) {
	var toggle errorfs.Toggle
	toggle.Injector = errorfs.InjectorFunc(func(op errorfs.Op) error {
		if (op.Kind == errorfs.OpFileSync || op.Kind == errorfs.OpFileSyncData || op.Kind == errorfs.OpFileWrite) && strings.HasSuffix(op.Path, ".log") {
			return errorfs.ErrInjected
		}
		return nil
	})
	s, err := Open(t.TempDir(), Options{WriteBehind: time.Hour, fs: errorfs.Wrap(vfs.NewMem(), &toggle)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, now := context.Background(), time.Now()
	hour := sluice.Policy{Name: "hour", Algorithm: sluice.FixedWindow, Limit: 100, Window: time.Hour}
	op := sluice.Op{Key: sluice.Key{Tenant: "acme", Algorithm: sluice.FixedWindow, Policy: "hour", Value: "u"}, Policy: &hour, Hits: 1}
	toggle.On()
	for range 3 {
		if d, err := s.ApplyOne(ctx, now, op); err != nil || !d.Allowed {
			t.Fatalf("a decision while the disk fails: %+v %v", d, err)
		}
	}
	if err := s.WriteBehind(); err == nil {
		t.Fatal("a write behind on a failing disk succeeded")
	}
	if err := s.Ping(ctx); err == nil {
		t.Fatal("Ping well while the writes behind fail")
	}
	if st, _ := s.WriteBehindStats(); !st.Failing || st.Pending != 1 {
		t.Fatalf("stats while failing: %+v", st)
	}
	// Pebble keeps its log's failure (the log writer's error is sticky
	// until the log is rotated): healed, the disk still fails the writes,
	// and a Close says what it could not write.
	toggle.Off()
	if err := s.WriteBehind(); err == nil {
		t.Log("a write behind succeeded once the disk healed") // Pebble may rotate the log
	}
	if err := s.Close(); err != nil && !strings.Contains(err.Error(), "injected") {
		t.Fatalf("Close: %v", err)
	}
}
