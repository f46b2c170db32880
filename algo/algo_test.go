package algo

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// base is aligned to every window used below (it is a midnight UTC).
var base = time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC).UnixNano()

// at returns base + d.
func at(d time.Duration) int64 { return base + int64(d) }

// tick is one time-stepped request and what its decision must say.
type tick struct {
	at         time.Duration // since base
	hits       int64
	allowed    bool
	remaining  int64
	retryAfter time.Duration
	resetIn    time.Duration // ResetAt - now
}

func runTicks(t *testing.T, p sluice.Policy, ticks []tick) {
	t.Helper()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	var s State
	for i, tk := range ticks {
		now := at(tk.at)
		ns, d := Decide(&p, s, now, tk.hits)
		got := tick{tk.at, tk.hits, d.Allowed, d.Remaining, d.RetryAfter, d.ResetAt.Sub(time.Unix(0, now))}
		if got != tk {
			t.Fatalf("tick %d: got  %+v\n          want %+v", i, got, tk)
		}
		if d.Allowed {
			s = ns
		} else if !statesEqual(ns, s) {
			t.Fatalf("tick %d: a denial changed the state", i)
		}
	}
}

func TestFixedWindow(t *testing.T) {
	p := sluice.Policy{Name: "f", Algorithm: sluice.FixedWindow, Limit: 3, Window: time.Second}
	runTicks(t, p, []tick{
		{0, 0, true, 3, 0, 0}, // a peek of a fresh key: nothing used
		{100 * time.Millisecond, 1, true, 2, 0, 900 * time.Millisecond},
		{200 * time.Millisecond, 2, true, 0, 0, 800 * time.Millisecond},
		{300 * time.Millisecond, 1, false, 0, 700 * time.Millisecond, 700 * time.Millisecond},
		{999 * time.Millisecond, 1, false, 0, time.Millisecond, time.Millisecond},
		// The window is aligned to the epoch: a new one starts at 1s.
		{time.Second, 3, true, 0, 0, time.Second},
		{1500 * time.Millisecond, 4, false, 0, 0, 500 * time.Millisecond}, // more than the limit: never
		{2 * time.Second, 2, true, 1, 0, time.Second},
	})
}

func TestSlidingWindow(t *testing.T) {
	p := sluice.Policy{Name: "s", Algorithm: sluice.SlidingWindow, Limit: 10, Window: 10 * time.Second}
	runTicks(t, p, []tick{
		// The weighted count rounds down: 10 hits of window [0s, 10s) weigh
		// floor(10*(20s-t)/10s), which is 0 from 19s plus a nanosecond.
		{5 * time.Second, 10, true, 0, 0, 14*time.Second + 1},
		// Half of the previous window overlaps: 10*5/10 = 5 still count,
		// and 4 a nanosecond later.
		{15 * time.Second, 6, false, 5, 1, 4*time.Second + 1},
		{15 * time.Second, 5, true, 0, 0, 13*time.Second + 1},
		// 5 current + floor(10*4/10) = 9: one left.
		{16 * time.Second, 2, false, 1, 1, 12*time.Second + 1},
		{16 * time.Second, 1, true, 0, 0, 12_333_333_334}, // 6 current weigh 0 after 28.33s
	})
}

func TestSlidingLog(t *testing.T) {
	p := sluice.Policy{Name: "l", Algorithm: sluice.SlidingLog, Limit: 3, Window: 10 * time.Second}
	runTicks(t, p, []tick{
		{1 * time.Second, 1, true, 2, 0, 10 * time.Second},
		{2 * time.Second, 2, true, 0, 0, 10 * time.Second},
		// Exact: the hit at 1s leaves at 11s, the two at 2s at 12s.
		{9 * time.Second, 1, false, 0, 2 * time.Second, 3 * time.Second},
		{9 * time.Second, 2, false, 0, 3 * time.Second, 3 * time.Second},
		{11 * time.Second, 1, true, 0, 0, 10 * time.Second},
		{12 * time.Second, 2, true, 0, 0, 10 * time.Second},
	})
}

// TestTokenBucketBurst pins the meaning of Burst: a full bucket admits Burst
// hits at once, then one per Window/Limit.
func TestTokenBucketBurst(t *testing.T) {
	p := sluice.Policy{Name: "tb", Algorithm: sluice.TokenBucket, Limit: 10, Window: time.Second, Burst: 5}
	runTicks(t, p, []tick{
		{0, 5, true, 0, 0, 500 * time.Millisecond},
		{0, 1, false, 0, 100 * time.Millisecond, 500 * time.Millisecond},
		{100 * time.Millisecond, 1, true, 0, 0, 500 * time.Millisecond},
		{150 * time.Millisecond, 2, false, 0, 150 * time.Millisecond, 450 * time.Millisecond},
		// Idle for the bucket's depth: full again, and never fuller.
		{10 * time.Second, 6, false, 5, 0, 0},
		{10 * time.Second, 5, true, 0, 0, 500 * time.Millisecond},
	})

	// Burst zero means Limit.
	p = sluice.Policy{Name: "tb", Algorithm: sluice.TokenBucket, Limit: 4, Window: time.Second}
	runTicks(t, p, []tick{
		{0, 4, true, 0, 0, time.Second},
		{0, 1, false, 0, 250 * time.Millisecond, time.Second},
		{750 * time.Millisecond, 3, true, 0, 0, time.Second},
	})

	// Burst one: a strict rate with no burst at all.
	p = sluice.Policy{Name: "tb", Algorithm: sluice.TokenBucket, Limit: 2, Window: time.Second, Burst: 1}
	runTicks(t, p, []tick{
		{0, 1, true, 0, 0, 500 * time.Millisecond},
		{499 * time.Millisecond, 1, false, 0, time.Millisecond, time.Millisecond},
		{500 * time.Millisecond, 1, true, 0, 0, 500 * time.Millisecond},
	})
}

// TestTokenBucketRateNeverExceeded: the emission interval rounds up, so a
// limit that does not divide the window never admits more than Limit per
// Window in the long run.
func TestTokenBucketRateNeverExceeded(t *testing.T) {
	p := sluice.Policy{Name: "tb", Algorithm: sluice.TokenBucket, Limit: 3, Window: time.Second, Burst: 1}
	var s State
	admitted := 0
	for now := at(0); now < at(100*time.Second); now += int64(time.Millisecond) {
		ns, d := Decide(&p, s, now, 1)
		if d.Allowed {
			s = ns
			admitted++
		}
	}
	if admitted > 300 || admitted < 299 {
		t.Fatalf("admitted %d in 100s at 3/s", admitted)
	}
}

func TestConcurrency(t *testing.T) {
	p := sluice.Policy{Name: "c", Algorithm: sluice.Concurrency, Limit: 3, LeaseTTL: 10 * time.Second}
	var s State
	acquire := func(now int64, hits int64, want bool) sluice.Decision {
		t.Helper()
		ns, d := Acquire(&p, s, now, hits)
		if d.Allowed != want {
			t.Fatalf("acquire %d at %v: allowed=%v, want %v (%+v)", hits, time.Duration(now-base), d.Allowed, want, d)
		}
		if d.Allowed {
			s = ns
		}
		return d
	}
	a := acquire(at(0), 2, true)
	if a.Lease.ID == 0 || !a.Lease.ExpiresAt.Equal(time.Unix(0, at(10*time.Second))) || a.Remaining != 1 {
		t.Fatalf("lease %+v", a)
	}
	b := acquire(at(time.Second), 1, true)
	if b.Lease.ID <= a.Lease.ID {
		t.Fatalf("lease ids do not increase: %d then %d", a.Lease.ID, b.Lease.ID)
	}
	d := acquire(at(2*time.Second), 1, false)
	if d.RetryAfter != 8*time.Second { // a's two units come back at 10s
		t.Fatalf("retry after %v, want 8s", d.RetryAfter)
	}

	// Release returns the units at once; a second release finds nothing.
	ns, rd, ok := Release(&p, s, at(3*time.Second), a.Lease.ID)
	if !ok || rd.Remaining != 2 {
		t.Fatalf("release: ok=%v %+v", ok, rd)
	}
	s = ns
	if _, _, ok := Release(&p, s, at(3*time.Second), a.Lease.ID); ok {
		t.Fatal("released a lease twice")
	}

	// Renew keeps b alive past its first expiry.
	ns, rd, ok = Renew(&p, s, at(9*time.Second), b.Lease.ID)
	if !ok || !rd.Lease.ExpiresAt.Equal(time.Unix(0, at(19*time.Second))) {
		t.Fatalf("renew: ok=%v %+v", ok, rd)
	}
	s = ns
	acquire(at(15*time.Second), 3, false)
	// Unrenewed, b expires and its unit comes back by itself.
	acquire(at(19*time.Second), 3, true)
	if _, _, ok := Renew(&p, s, at(40*time.Second), b.Lease.ID); ok {
		t.Fatal("renewed an expired lease")
	}
}

func TestQuotaHourInBuckets(t *testing.T) {
	// An hour as 6 buckets of 10 minutes (the default for an hour).
	p := sluice.Policy{Name: "q", Algorithm: sluice.Quota, Limit: 100, Window: time.Hour}
	if got := p.EffectiveBuckets(); got != 6 {
		t.Fatalf("default buckets for an hour = %d, want 6", got)
	}
	runTicks(t, p, []tick{
		{5 * time.Minute, 60, true, 40, 0, 55 * time.Minute},
		{15 * time.Minute, 40, true, 0, 0, 55 * time.Minute},
		// The first bucket [0, 10m) leaves the window at 60m.
		{30 * time.Minute, 1, false, 0, 30 * time.Minute, 40 * time.Minute},
		{59 * time.Minute, 60, false, 0, time.Minute, 11 * time.Minute},
		{60 * time.Minute, 60, true, 0, 0, 60 * time.Minute},
	})
}

func TestQuotaStorageBounded(t *testing.T) {
	// A 30-day quota in daily buckets keeps at most one entry per bucket,
	// however many requests it sees.
	p := sluice.Policy{Name: "q", Algorithm: sluice.Quota, Limit: 1_000_000, Window: 30 * 24 * time.Hour}
	var s State
	for i := range 100_000 {
		now := at(time.Duration(i) * 90 * time.Second) // ~104 days
		ns, d := Decide(&p, s, now, 1)
		if !d.Allowed {
			t.Fatalf("request %d denied", i)
		}
		s = ns
		if n := len(s.Entries); n >= 30 {
			t.Fatalf("request %d: %d entries for 30 buckets", i, n)
		}
	}
}

func TestQuotaCalendarMonth(t *testing.T) {
	p := sluice.Policy{Name: "m", Algorithm: sluice.Quota, Limit: 20_000, Calendar: sluice.Month}
	jan31 := time.Date(2027, 1, 31, 23, 0, 0, 0, time.UTC)
	var s State
	s, d := Decide(&p, s, jan31.UnixNano(), 20_000)
	if !d.Allowed || !d.ResetAt.Equal(time.Date(2027, 2, 1, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("%+v", d)
	}
	if _, d = Decide(&p, s, jan31.UnixNano(), 1); d.Allowed || d.RetryAfter != time.Hour {
		t.Fatalf("over quota: %+v", d)
	}
	// February is 28 days: the next reset is March 1st.
	_, d = Decide(&p, s, jan31.Add(time.Hour).UnixNano(), 1)
	if !d.Allowed || d.Remaining != 19_999 || !d.ResetAt.Equal(time.Date(2027, 3, 1, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("new month: %+v", d)
	}
}

// TestChangedAlgorithmStartsAfresh: a key's state written by another
// algorithm (the policy was changed) is not misread.
func TestChangedAlgorithmStartsAfresh(t *testing.T) {
	fixed := sluice.Policy{Name: "p", Algorithm: sluice.FixedWindow, Limit: 5, Window: time.Minute}
	s, _ := Decide(&fixed, State{}, at(0), 5)
	for _, alg := range sluice.Algorithms {
		p := sluice.Policy{Name: "p", Algorithm: alg, Limit: 5, Window: time.Minute}
		if alg == sluice.FixedWindow {
			continue
		}
		if _, d := Decide(&p, s, at(time.Second), 5); !d.Allowed {
			t.Errorf("%v misread a fixed window's state: %+v", alg, d)
		}
	}
}

func Example() {
	p := sluice.Policy{Name: "api", Algorithm: sluice.TokenBucket, Limit: 10, Window: time.Second, Burst: 2}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	var s State
	for i := range 3 {
		ns, d := Decide(&p, s, now, 1)
		if d.Allowed {
			s = ns
		}
		fmt.Printf("request %d: allowed=%v remaining=%d retry after %v\n", i, d.Allowed, d.Remaining, d.RetryAfter)
	}
	// Output:
	// request 0: allowed=true remaining=1 retry after 0s
	// request 1: allowed=true remaining=0 retry after 0s
	// request 2: allowed=false remaining=0 retry after 100ms
}

// TestAcquireNamed: a named lease grown frees its old units for the new
// size and keeps its id; grown past the limit it stays as it was; set twice
// to the same units it is unchanged, which is what lets a caller make an
// uncertain write again; shrunk it always fits; released, its name takes a
// new lease; named leases and the store's own live side by side, found by
// id whatever their order.
func TestAcquireNamed(t *testing.T) {
	p := &sluice.Policy{Name: "c", Algorithm: sluice.Concurrency, Limit: 10, LeaseTTL: time.Minute}
	now := int64(1_000_000_000)
	const mine = sluice.NamedLease | 7
	s, d := AcquireNamed(p, State{}, now, 6, mine) // this node's 6
	if !d.Allowed || d.Lease.ID != mine {
		t.Fatalf("take 6: %+v", d)
	}
	s, d = Acquire(p, s, now+1, 3) // another node's 3
	other := d.Lease.ID
	if !d.Allowed || d.Remaining != 1 || other&sluice.NamedLease != 0 {
		t.Fatalf("setup: %+v", d)
	}
	// 6 -> 7 fits (3 + 7 = 10), twice over; 7 -> 8 does not.
	for i := range 2 {
		s, d = AcquireNamed(p, s, now+2, 7, mine)
		if !d.Allowed || d.Remaining != 0 || len(s.Entries) != 2 || d.Lease.ID != mine {
			t.Fatalf("write %d: grow to 7: %+v, %d leases", i+1, d, len(s.Entries))
		}
	}
	before := s
	s, d = AcquireNamed(p, s, now+3, 8, mine)
	if d.Allowed || d.Remaining != 0 {
		t.Fatalf("grow to 8 past the limit: %+v", d)
	}
	if !slices.Equal(s.Entries, before.Entries) {
		t.Fatal("a denied resize changed the leases")
	}
	// 7 -> 2 always fits, and frees 5.
	s, d = AcquireNamed(p, s, now+4, 2, mine)
	if !d.Allowed || d.Remaining != 5 {
		t.Fatalf("shrink to 2: %+v", d)
	}
	// The named lease now comes after the other: both are found by id.
	if s, _, ok := Renew(p, s, now+5, other); !ok || len(s.Entries) != 2 {
		t.Fatal("the other node's lease was lost")
	}
	s, d, ok := Release(p, s, now+5, mine)
	if !ok || d.Remaining != 7 {
		t.Fatalf("release the named lease: %v %+v", ok, d)
	}
	if s, d = AcquireNamed(p, s, now+6, 8, mine); d.Allowed {
		t.Fatalf("8 taken anew beside 3 at 10: %+v", d)
	}
	if s, d = AcquireNamed(p, s, now+6, 7, mine); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("7 taken anew beside 3 at 10: %+v", d)
	}
	// The store's ids keep rising past a named lease.
	if s, _, ok = Release(p, s, now+7, other); !ok {
		t.Fatal("release the other")
	}
	if _, d = Acquire(p, s, now+7, 1); !d.Allowed || d.Lease.ID <= other || d.Lease.ID&sluice.NamedLease != 0 {
		t.Fatalf("a store-named lease after a named one: %+v (other was %d)", d, other)
	}
}

// TestLeasesPerCounterBounded: past MaxLeases live leases, an acquire is
// denied until one ends, whatever units are free: the counter's state
// holds one entry per lease.
func TestLeasesPerCounterBounded(t *testing.T) {
	p := &sluice.Policy{Name: "c", Algorithm: sluice.Concurrency, Limit: 1_000_000, LeaseTTL: time.Minute}
	var s State
	var d sluice.Decision
	now := int64(1_000_000_000)
	const named = sluice.NamedLease | 1
	if s, d = AcquireNamed(p, s, now, 1, named); !d.Allowed {
		t.Fatalf("lease 0: %+v", d)
	}
	for i := 1; i < sluice.MaxLeases; i++ {
		if s, d = Acquire(p, s, now+int64(i), 1); !d.Allowed {
			t.Fatalf("lease %d: %+v", i, d)
		}
	}
	_, d = Acquire(p, s, now+sluice.MaxLeases, 1)
	if d.Allowed || d.RetryAfter <= 0 {
		t.Fatalf("lease %d: %+v, want denied until the first ends", sluice.MaxLeases+1, d)
	}
	// A named lease resized to many units still fits at the cap.
	if _, d = AcquireNamed(p, s, now+sluice.MaxLeases, 500, named); !d.Allowed {
		t.Fatalf("a resize at the cap: %+v", d)
	}
}

// TestDeadOwnersLeasesDropped: the leases of an owner a check names dead
// count as expired, long before their expiry, and the admitting write
// drops them; a denial leaves them; the leases of other owners, and the
// store's own, still count.
func TestDeadOwnersLeasesDropped(t *testing.T) {
	p := &sluice.Policy{Name: "c", Algorithm: sluice.Concurrency, Limit: 10, LeaseTTL: time.Hour}
	now := int64(1_000_000_000)
	a, b := sluice.OwnedLease(1, 42), sluice.OwnedLease(2, 42)
	if o, ok := sluice.LeaseOwner(a); !ok || o != 1 || a == b || a&sluice.NamedLease == 0 {
		t.Fatalf("owned lease %#x: owner %d %v", a, o, ok)
	}
	s, _ := AcquireNamed(p, State{}, now, 6, a) // node 1's 6
	s, _ = AcquireNamed(p, s, now, 3, b)        // node 2's 3
	s, d := Acquire(p, s, now, 1)               // the store's own 1
	if !d.Allowed || d.Remaining != 0 {
		t.Fatalf("setup: %+v", d)
	}
	op := func(hits int64, id uint64, dead ...uint16) sluice.Decision {
		var d sluice.Decision
		UpdateOp(&sluice.Op{Policy: p, Hits: hits, Lease: id, DeadOwners: dead}, &s, now+1, &d)
		return d
	}
	if d := op(4, b, 3); d.Allowed {
		t.Fatalf("node 2 grown to 4 with only an unknown owner dead: %+v", d)
	}
	if len(s.Entries) != 3 {
		t.Fatalf("a denial changed the leases: %+v", s.Entries)
	}
	// Node 1 dead: its 6 count no more, and go with the write.
	if d := op(9, b, 1); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("node 2 grown to 9 with node 1 dead: %+v", d)
	}
	for _, e := range s.Entries {
		if e.ID == a {
			t.Fatalf("node 1's lease kept after an admitting write: %+v", s.Entries)
		}
	}
	if len(s.Entries) != 2 {
		t.Fatalf("leases after the write: %+v, want node 2's and the store's", s.Entries)
	}
}

// TestBurn: a burn op adds its hits whatever the count, up to
// sluice.MaxBurnCount, and is decided as an admission whose Remaining is
// the limit less the count, negative past the limit; the algorithms that
// Burnable refuses ignore it.
func TestBurn(t *testing.T) {
	fixed := sluice.Policy{Name: "f", Algorithm: sluice.FixedWindow, Limit: 10, Window: time.Minute}
	month := sluice.Policy{Name: "m", Algorithm: sluice.Quota, Limit: 10, Calendar: sluice.Month}
	monthEnd := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).UnixNano() - base
	for _, tc := range []struct {
		p   sluice.Policy
		end int64 // of base's window, since base
	}{{fixed, int64(time.Minute)}, {month, monthEnd}} {
		now := at(time.Second)
		var s State
		for i, step := range []struct{ hits, remaining int64 }{{8, 2}, {5, -3}, {0, -3}, {1, -4}} {
			op := sluice.Op{Policy: &tc.p, Hits: step.hits, Burn: true}
			var d sluice.Decision
			UpdateOp(&op, &s, now, &d)
			wantRetry := time.Duration(0)
			if step.remaining < 0 {
				wantRetry = time.Duration(base + tc.end - now)
			}
			if !d.Allowed || d.Remaining != step.remaining || d.RetryAfter != wantRetry || d.ResetAt.UnixNano() != base+tc.end {
				t.Fatalf("%s step %d: %+v, want admitted, remaining %d, retry %v", tc.p.Name, i, d, step.remaining, wantRetry)
			}
		}
		if s.Count != 14 || s.Algorithm != tc.p.Algorithm || s.Expires != base+tc.end {
			t.Fatalf("%s: state %+v, want 14 counted until the window's end", tc.p.Name, s)
		}
		// A plain decision on the burnt state denies, a read too.
		if _, d := Decide(&tc.p, s, now, 0); d.Allowed || d.Remaining != 0 {
			t.Fatalf("%s: plain read at 14 of 10: %+v, want denied", tc.p.Name, d)
		}
		// The next window starts afresh.
		op := sluice.Op{Policy: &tc.p, Hits: 1, Burn: true}
		var d sluice.Decision
		UpdateOp(&op, &s, base+tc.end, &d)
		if !d.Allowed || d.Remaining != 9 {
			t.Fatalf("%s: next window: %+v, want 9 left", tc.p.Name, d)
		}
	}

	// Saturation.
	big := sluice.Policy{Name: "b", Algorithm: sluice.FixedWindow, Limit: sluice.MaxLimit, Window: time.Minute}
	s := State{Algorithm: sluice.FixedWindow, Start: base, Count: sluice.MaxBurnCount - 1, Expires: base + int64(time.Minute)}
	op := sluice.Op{Policy: &big, Hits: sluice.MaxHits, Burn: true}
	var d sluice.Decision
	UpdateOp(&op, &s, base, &d)
	if s.Count != sluice.MaxBurnCount || d.Remaining != sluice.MaxLimit-sluice.MaxBurnCount {
		t.Fatalf("saturation: count %d, %+v", s.Count, d)
	}

	// Only fixed windows burn.
	for _, p := range []sluice.Policy{
		{Algorithm: sluice.FixedWindow, Limit: 1, Window: time.Second},
		{Algorithm: sluice.Quota, Limit: 1, Calendar: sluice.Month},
	} {
		if !Burnable(&p) {
			t.Errorf("%s %s: not burnable", p.Algorithm, p.Calendar)
		}
	}
	for _, a := range sluice.Algorithms {
		p := sluice.Policy{Name: "x", Algorithm: a, Limit: 2, Window: time.Hour, LeaseTTL: time.Minute}
		if a == sluice.FixedWindow {
			continue
		}
		if Burnable(&p) {
			t.Errorf("%s (rolling): burnable", a)
		}
		// Burn is ignored: the decision is the plain one.
		st, want := Decide(&p, State{}, base, 2)
		_, want2 := Decide(&p, st, base, 1)
		s, d := State{}, sluice.Decision{}
		op := sluice.Op{Policy: &p, Hits: 2, Burn: true}
		UpdateOp(&op, &s, base, &d)
		op.Hits = 1
		UpdateOp(&op, &s, base, &d)
		if d.Allowed != want2.Allowed || d.Remaining != want2.Remaining || !want.Allowed {
			t.Errorf("%s: burn op %+v, want the plain %+v", a, d, want2)
		}
	}
}
