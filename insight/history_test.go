package insight

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/engine"
)

// clock is a settable clock for a Recorder.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func decide(rec *Recorder, tenant, policy string, o engine.Outcome, times int) {
	c := sluice.Check{Policy: sluice.Policy{Name: policy}, Key: "k"}
	for range times {
		rec.DecidedKey(tenant, &c, 1, o)
	}
}

// sumKind adds up kind k over points.
func sumKind(pts []Point, k engine.Outcome) (n int) {
	for _, p := range pts {
		n += int(p.Counts[k])
	}
	return n
}

// The history keeps a fixed number of minutes a label, folded from the
// seconds once they are past the hour the seconds keep.
func TestHistoryKeepsMinutesPastTheHour(t *testing.T) {
	clk := &clock{t: time.Unix(1_800_000_000, 0).Truncate(time.Minute)}
	rec := NewRecorder(RecorderOptions{Now: clk.now, History: HistoryOptions{Minutes: 90}})
	start := clk.t.Unix() / 60
	for i := range 120 { // two hours: minute i has i+1 denials
		decide(rec, "acme", "api", engine.Denied, i+1)
		clk.t = clk.t.Add(time.Minute)
		rec.FoldHistory(clk.t.Add(foldGrace))
	}
	now := clk.t.Unix()/60 - 1 // the last minute ended
	pts := rec.Minutes("acme", false, 0, 0, now)
	if len(pts) != 90 {
		t.Fatalf("%d minutes kept, want the 90 of the bound", len(pts))
	}
	if first := pts[0]; first.Second != (start+30)*60 || first.Counts[engine.Denied] != 31 {
		t.Errorf("the oldest minute kept: %+v (start %d, now %d)", first, start*60, now*60)
	}
	if got := sumKind(pts, engine.Denied); got != (31+120)*90/2 {
		t.Errorf("denials over the minutes kept: %d", got)
	}
	if got := sumKind(rec.Minutes("api", true, 0, 0, now), engine.Denied); got != (31+120)*90/2 {
		t.Errorf("the policy's denials over the minutes kept: %d", got)
	}
}

// Tenants past the bound count under Other; one idle for the whole span
// gives its place up.
func TestHistoryTenantCap(t *testing.T) {
	clk := &clock{t: time.Unix(1_800_000_000, 0).Truncate(time.Minute)}
	rec := NewRecorder(RecorderOptions{Now: clk.now, History: HistoryOptions{Minutes: 10, Tenants: 3}})
	for i := range 5 {
		decide(rec, fmt.Sprint("t", i), "api", engine.Allowed, 1)
	}
	clk.t = clk.t.Add(time.Minute)
	rec.FoldHistory(clk.t.Add(foldGrace))
	if n := len(rec.hist.rows[histTenants]); n != 4 {
		t.Fatalf("%d tenants' rows, want 3 and Other", n)
	}
	now := clk.t.Unix() / 60
	if got := sumKind(rec.Minutes(Other, false, 0, 0, now), engine.Allowed); got != 2 {
		t.Errorf("Other holds %d decisions, want the 2 of the tenants past the bound", got)
	}
	// Eleven minutes later the idle tenants are gone: a new one has a row.
	for range 11 {
		clk.t = clk.t.Add(time.Minute)
		rec.FoldHistory(clk.t.Add(foldGrace))
	}
	decide(rec, "newcomer", "api", engine.Allowed, 7)
	clk.t = clk.t.Add(time.Minute)
	rec.FoldHistory(clk.t.Add(foldGrace))
	if got := sumKind(rec.Minutes("newcomer", false, 0, 0, clk.t.Unix()/60), engine.Allowed); got != 7 {
		t.Errorf("the newcomer's minutes: %d decisions, want 7", got)
	}
	if n := len(rec.hist.rows[histTenants]); n != 1 {
		t.Errorf("%d tenants' rows after the idle ones went, want 1", n)
	}
}

// A deleted tenant's minutes are forgotten, in memory and in the file; a
// tenant of the same id starts empty.
func TestHistoryForgetsATenant(t *testing.T) {
	clk := &clock{t: time.Unix(1_800_000_000, 0).Truncate(time.Minute)}
	path := filepath.Join(t.TempDir(), "history")
	rec := NewRecorder(RecorderOptions{Now: clk.now, History: HistoryOptions{Path: path}})
	decide(rec, "acme", "api", engine.Denied, 5)
	decide(rec, "globex", "api", engine.Denied, 2)
	clk.t = clk.t.Add(time.Minute)
	rec.FoldHistory(clk.t.Add(foldGrace))
	if err := rec.SaveHistory(clk.t); err != nil {
		t.Fatal(err)
	}
	rec.Forget("acme")
	decide(rec, "acme", "api", engine.Allowed, 1) // the new acme
	now := clk.t.Unix() / 60
	if pts := rec.Minutes("acme", false, 0, 0, now); sumKind(pts, engine.Denied) != 0 || sumKind(pts, engine.Allowed) != 1 {
		t.Errorf("the new acme's minutes: %+v", pts)
	}
	if err := rec.SaveHistory(clk.t); err != nil {
		t.Fatal(err)
	}
	again := NewRecorder(RecorderOptions{Now: clk.now, History: HistoryOptions{Path: path}})
	if err := again.LoadHistory(); err != nil {
		t.Fatal(err)
	}
	if pts := again.Minutes("acme", false, 0, 0, now); sumKind(pts, engine.Denied) != 0 || sumKind(pts, engine.Allowed) != 1 {
		t.Errorf("the new acme's minutes after a restart: %+v", pts)
	}
	if got := sumKind(again.Minutes("globex", false, 0, 0, now), engine.Denied); got != 2 {
		t.Errorf("globex's denials after a restart: %d, want 2", got)
	}
}

// A restart reads the file: the minutes folded and the one in progress
// when it was written, to which the new process adds its own seconds.
func TestHistoryAcrossARestart(t *testing.T) {
	clk := &clock{t: time.Unix(1_800_000_000, 0).Truncate(time.Minute)}
	path := filepath.Join(t.TempDir(), "history")
	opts := RecorderOptions{Now: clk.now, History: HistoryOptions{Path: path}}
	rec := NewRecorder(opts)
	decide(rec, "acme", "api", engine.Penalised, 4)
	clk.t = clk.t.Add(time.Minute)
	decide(rec, "acme", "api", engine.Denied, 3) // the minute in progress
	clk.t = clk.t.Add(10 * time.Second)
	rec.FoldHistory(clk.t)
	if err := rec.SaveHistory(clk.t); err != nil {
		t.Fatal(err)
	}
	// killed; a new process of the same minute
	rec = NewRecorder(opts)
	if err := rec.LoadHistory(); err != nil {
		t.Fatal(err)
	}
	decide(rec, "acme", "api", engine.Denied, 2)
	check := func(when string) {
		t.Helper()
		pts := rec.Minutes("acme", false, 0, 0, clk.t.Unix()/60)
		if len(pts) != 2 || pts[0].Counts[engine.Penalised] != 4 || pts[1].Counts[engine.Denied] != 5 {
			t.Errorf("%s: %+v, want 4 penalised then 5 denied", when, pts)
		}
	}
	check("before the fold")
	clk.t = clk.t.Add(time.Minute)
	rec.FoldHistory(clk.t)
	check("after the fold")

	// A damaged file is refused whole.
	b, _ := os.ReadFile(path)
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := NewRecorder(opts).LoadHistory(); err == nil {
		t.Error("a damaged file was read")
	}
}

// Every refusal counts as a denial in the top lists: a penalty box's, a
// block's and a failed-closed policy's; shadow and failed-open do not.
func TestRecorderRefusalsAreDenials(t *testing.T) {
	now := time.Unix(2_000_000, 0)
	rec := NewRecorder(RecorderOptions{Now: func() time.Time { return now }})
	for _, o := range []engine.Outcome{engine.Denied, engine.Penalised, engine.FailedClosed, engine.ShadowDenied, engine.FailedOpen, engine.Allowed} {
		decide(rec, "acme", "login", o, 1)
	}
	top := rec.TopKeys("login", "", time.Time{}, 5)
	if len(top.Denials) != 1 || top.Denials[0].Count != 3 {
		t.Errorf("denials: %+v, want the key denied 3 times", top.Denials)
	}
	if got := RefusedKinds(); fmt.Sprint(got) != "[denied penalised failed_closed]" {
		t.Errorf("refused kinds: %v", got)
	}
	if got := AdmittedKinds(); fmt.Sprint(got) != "[allowed shadow_denied failed_open]" {
		t.Errorf("admitted kinds: %v", got)
	}
}

// BenchmarkFoldHistory is the cost of one minute's fold, off the
// decisions' path: 500 tenants and 50 policies, each with a decision
// every second.
func BenchmarkFoldHistory(b *testing.B) {
	clk := &clock{t: time.Unix(1_800_000_000, 0).Truncate(time.Minute)}
	rec := NewRecorder(RecorderOptions{Now: clk.now})
	for s := range 60 {
		clk.t = clk.t.Add(time.Second)
		for i := range 500 {
			decide(rec, fmt.Sprint("t", i), fmt.Sprint("p", (i+s)%50), engine.Allowed, 1)
		}
	}
	at := clk.t.Add(foldGrace)
	for b.Loop() {
		rec.hist.mu.Lock()
		rec.hist.folded = at.Add(-foldGrace).Unix()/60 - 2 // one minute to fold
		rec.hist.rows = [2]map[string]*minutes{{}, {}}
		rec.hist.inv, rec.hist.charged = map[string][]string{}, map[string]int{}
		rec.hist.mu.Unlock()
		rec.FoldHistory(at)
	}
}

// A node not told of a deletion reads a tenant created again from its
// creation on: never a count of the tenant before it, in the minute in
// progress or once folded.
func TestHistoryTenantCreatedAgainUntold(t *testing.T) {
	clk := &clock{t: time.Unix(1_800_000_000, 0).Truncate(time.Minute)}
	rec := NewRecorder(RecorderOptions{Now: clk.now})
	decide(rec, "acme", "api", engine.Denied, 3) // the old acme, minute 0
	clk.t = clk.t.Add(2 * time.Minute)
	decide(rec, "acme", "api", engine.Denied, 4) // the old acme, minute 2
	clk.t = clk.t.Add(20 * time.Second)
	since := clk.t.Unix() // the new acme
	decide(rec, "acme", "api", engine.Allowed, 5)
	now := clk.t.Unix() / 60
	if pts := rec.Minutes("acme", false, since, 0, now); len(pts) != 1 || sumKind(pts, engine.Denied) != 0 || sumKind(pts, engine.Allowed) != 5 {
		t.Errorf("the new acme, its minute in progress: %+v", pts)
	}
	clk.t = clk.t.Add(time.Minute)
	rec.FoldHistory(clk.t)
	decide(rec, "acme", "api", engine.Allowed, 6)
	if pts := rec.Minutes("acme", false, since, 0, clk.t.Unix()/60); sumKind(pts, engine.Denied) != 0 || sumKind(pts, engine.Allowed) != 6 {
		t.Errorf("the new acme, its first minute folded (left out whole): %+v", pts)
	}
	if pts := rec.Minutes("acme", false, 0, 0, clk.t.Unix()/60); sumKind(pts, engine.Denied) != 7 || sumKind(pts, engine.Allowed) != 11 {
		t.Errorf("the admin's acme: %+v", pts)
	}
}

// KeepHistory writes the file every SaveEvery, the minute in progress
// included, so a crash forgets at most SaveEvery of it; without
// SaveEvery, only once a minute.
func TestKeepHistorySavesEvery(t *testing.T) {
	for _, every := range []time.Duration{5 * time.Second, 0} {
		synctest.Test(t, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "history")
			opts := RecorderOptions{History: HistoryOptions{Path: path, SaveEvery: every}}
			rec := NewRecorder(opts)
			// 10 s into a minute: its fold is 52 s away.
			time.Sleep(time.Until(time.Now().Truncate(time.Minute).Add(time.Minute + 10*time.Second)))
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan struct{})
			go func() { defer close(done); rec.KeepHistory(ctx, nil) }()
			decide(rec, "acme", "api", engine.Denied, 3)
			time.Sleep(6 * time.Second)
			synctest.Wait()
			_, err := os.Stat(path)
			if saved := err == nil; saved != (every > 0) {
				t.Errorf("SaveEvery %v: the file written 6 s in: %v, want %v", every, saved, every > 0)
			}
			if every > 0 {
				// killed here: a new process finds the minute in progress
				got := NewRecorder(opts)
				if err := got.LoadHistory(); err != nil {
					t.Fatal(err)
				}
				now := time.Now().Unix() / 60
				if pts := got.Minutes("acme", false, 0, 0, now); len(pts) != 1 || pts[0].Counts[engine.Denied] != 3 {
					t.Errorf("after a crash 6 s in: %+v, want the minute in progress's 3 denied", pts)
				}
			}
			cancel()
			<-done
		})
	}
}

// inline counts n decisions of an inline check (a policy the tenant
// invents) named policy.
func inline(rec *Recorder, tenant, policy string, o engine.Outcome, n int) {
	c := sluice.Check{Policy: sluice.Policy{Name: policy}, Key: "k", Space: sluice.SpaceInline}
	for range n {
		rec.DecidedKey(tenant, &c, 1, o)
	}
}

// hours advances clk by h hours, a fold every ten minutes.
func hours(rec *Recorder, clk *clock, h int) {
	for range h * 6 {
		clk.t = clk.t.Add(10 * time.Minute)
		rec.FoldHistory(clk.t.Add(foldGrace))
	}
}

// One tenant inventing 16 inline policies an hour (the Recorder recycles
// them hourly) for 20 hours takes neither a configured policy's row nor
// another tenant's: it holds its 16 rows, the rest of it counts under
// Other.
func TestHistoryInventedPoliciesTakeNoOthersRows(t *testing.T) {
	clk := &clock{t: time.Unix(1_800_000_000, 0).Truncate(time.Hour)}
	rec := NewRecorder(RecorderOptions{Now: clk.now, Configured: func(p string) bool { return p == "chat" }})
	for h := range 20 {
		for j := range 16 {
			inline(rec, "evil", fmt.Sprintf("evil-%d-%d", h, j), engine.Denied, 1)
		}
		hours(rec, clk, 1)
	}
	decide(rec, "acme", "chat", engine.Denied, 5)
	for j := range 3 {
		inline(rec, "globex", fmt.Sprint("globex-", j), engine.Denied, j+1)
	}
	clk.t = clk.t.Add(time.Minute)
	rec.FoldHistory(clk.t.Add(foldGrace))
	now := clk.t.Unix() / 60
	if got := sumKind(rec.Minutes("chat", true, 0, 0, now), engine.Denied); got != 5 {
		t.Errorf("the configured policy's row holds %d denials, want acme's 5 (Other holds %d)",
			got, sumKind(rec.Minutes(Other, true, 0, 0, now), engine.Denied))
	}
	for j := range 3 {
		if got := sumKind(rec.Minutes(fmt.Sprint("globex-", j), true, 0, 0, now), engine.Denied); got != j+1 {
			t.Errorf("globex's inline policy %d: %d denials in its row, want %d", j, got, j+1)
		}
	}
	evil := 0
	for l := range rec.hist.rows[histPolicies] {
		if strings.HasPrefix(l, "evil-") {
			evil++
		}
	}
	if evil != 16 {
		t.Errorf("evil holds %d rows, want the 16 of its bound", evil)
	}
	if got := sumKind(rec.Minutes(Other, true, 0, 0, now), engine.Denied); got != 20*16-16 {
		t.Errorf("Other holds %d denials, want evil's %d past its bound", got, 20*16-16)
	}
}

// A configured policy has its row past the bound on invented ones, and
// one configured by a reload too.
func TestHistoryConfiguredPoliciesPastTheBound(t *testing.T) {
	clk := &clock{t: time.Unix(1_800_000_000, 0).Truncate(time.Minute)}
	configured := map[string]bool{"a": true}
	rec := NewRecorder(RecorderOptions{Now: clk.now, Configured: func(p string) bool { return configured[p] },
		History: HistoryOptions{Policies: 2}})
	for j := range 3 {
		inline(rec, fmt.Sprint("t", j), fmt.Sprint("inv", j), engine.Allowed, 1)
	}
	decide(rec, "acme", "a", engine.Allowed, 1)
	configured["b"] = true // a reload
	decide(rec, "acme", "b", engine.Allowed, 2)
	clk.t = clk.t.Add(time.Minute)
	rec.FoldHistory(clk.t.Add(foldGrace))
	now := clk.t.Unix() / 60
	for p, want := range map[string]int{"a": 1, "b": 2, Other: 1} {
		if got := sumKind(rec.Minutes(p, true, 0, 0, now), engine.Allowed); got != want {
			t.Errorf("%s: %d, want %d", p, got, want)
		}
	}
}

// A deleted tenant's invented policies are forgotten with it, in memory
// and in the file; the tenant created again starts empty.
func TestHistoryForgetsATenantsInventedPolicies(t *testing.T) {
	clk := &clock{t: time.Unix(1_800_000_000, 0).Truncate(time.Minute)}
	path := filepath.Join(t.TempDir(), "history")
	opts := RecorderOptions{Now: clk.now, History: HistoryOptions{Path: path}}
	rec := NewRecorder(opts)
	inline(rec, "evil", "mine", engine.Denied, 4)
	inline(rec, "globex", "theirs", engine.Denied, 2)
	decide(rec, "acme", "api", engine.Denied, 1)
	clk.t = clk.t.Add(time.Minute)
	rec.FoldHistory(clk.t.Add(foldGrace))
	if err := rec.SaveHistory(clk.t); err != nil {
		t.Fatal(err)
	}
	// The file keeps whose the invented policies are: a restart forgets
	// them too.
	restarted := NewRecorder(opts)
	if err := restarted.LoadHistory(); err != nil {
		t.Fatal(err)
	}
	restarted.Forget("evil")
	rec.Forget("evil")
	now := clk.t.Unix() / 60
	check := func(rec *Recorder, when string) {
		t.Helper()
		if got := rec.HistoryLabels(true); slices.Contains(got, "mine") {
			t.Errorf("%s: the deleted tenant's policy is still there: %v", when, got)
		}
		if pts := rec.Minutes("mine", true, 0, 0, now); len(pts) != 0 {
			t.Errorf("%s: the deleted tenant's policy's minutes: %+v", when, pts)
		}
		if got := sumKind(rec.Minutes("theirs", true, 0, 0, now), engine.Denied); got != 2 {
			t.Errorf("%s: globex's policy: %d denials, want 2", when, got)
		}
	}
	check(rec, "in memory")
	check(restarted, "forgotten after a restart")
	if err := rec.SaveHistory(clk.t); err != nil {
		t.Fatal(err)
	}
	again := NewRecorder(opts)
	if err := again.LoadHistory(); err != nil {
		t.Fatal(err)
	}
	check(again, "after a restart")
	// evil created again, inventing the same name: it starts empty.
	inline(rec, "evil", "mine", engine.Allowed, 1)
	if pts := rec.Minutes("mine", true, 0, 0, now); sumKind(pts, engine.Denied) != 0 || sumKind(pts, engine.Allowed) != 1 {
		t.Errorf("the new evil's policy: %+v", pts)
	}
}

// A file of the version before invented policies had tenants is read:
// its policies' rows as configured ones.
func TestHistoryReadsAVersion1File(t *testing.T) {
	clk := &clock{t: time.Unix(1_800_000_000, 0).Truncate(time.Minute)}
	minute := clk.t.Unix() / 60
	b := []byte(historyMagicV1)
	for _, v := range []uint64{uint64(Kinds), uint64(minute), 0, 1, 3} { // kinds, folded, no tenants, a policy
		b = binary.AppendUvarint(b, v)
	}
	b = append(b, "api"...)
	b = binary.AppendUvarint(b, 1) // a minute
	b = binary.AppendUvarint(b, uint64(minute))
	for k := range Kinds {
		b = binary.AppendUvarint(b, uint64(b2i(k == int(engine.Denied))*7))
	}
	b = binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(b))
	path := filepath.Join(t.TempDir(), "history")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	rec := NewRecorder(RecorderOptions{Now: clk.now, History: HistoryOptions{Path: path}})
	if err := rec.LoadHistory(); err != nil {
		t.Fatal(err)
	}
	if got := sumKind(rec.Minutes("api", true, 0, 0, minute), engine.Denied); got != 7 {
		t.Errorf("the policy's denials read: %d, want 7", got)
	}
	if _, ok := rec.hist.inv["api"]; ok {
		t.Error("a version 1 policy row is counted as invented")
	}
}
