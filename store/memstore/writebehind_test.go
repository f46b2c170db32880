package memstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
)

// disk is a Backing that keeps the states it is given, as a durable store
// would, and can fail or hold its writes.
type disk struct {
	mu       sync.Mutex
	states   map[sluice.Key]algo.State
	saves    int           // calls of Save
	written  int           // states written
	fail     error         // Save's error, while set
	failSync error         // the wait's error, while set
	hold     chan struct{} // if set, Save waits for it to close
	erased   []sluice.Key
	order    []string // "save k", "erase k" and "forget k", in order
	biggest  int      // the most states one Save held
}

func newDisk() *disk { return &disk{states: map[sluice.Key]algo.State{}} }

func (d *disk) Durable(p *sluice.Policy) bool { return p.Window >= time.Minute }

func (d *disk) Load(k *sluice.Key, _ *sluice.Policy) (algo.State, bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	st, ok := d.states[*k]
	return st, ok, nil
}

func (d *disk) Save(items []Saved) (func() error, error) {
	d.mu.Lock()
	hold := d.hold
	d.mu.Unlock()
	if hold != nil {
		<-hold
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.saves++
	if d.fail != nil {
		return nil, d.fail
	}
	failSync := d.failSync
	d.biggest = max(d.biggest, len(items))
	for _, it := range items {
		if failSync == nil {
			d.states[*it.Key] = *it.State
			d.written++
		}
		d.order = append(d.order, "save "+it.Key.Value)
	}
	return func() error { return failSync }, nil
}

func (d *disk) Forget(keys []sluice.Key) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, k := range keys {
		delete(d.states, k)
		d.order = append(d.order, "forget "+k.Value)
	}
}

func (d *disk) Find(tenant, value string) ([]sluice.Key, error) { return nil, nil }

func (d *disk) Erase(keys []sluice.Key) (func() error, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, k := range keys {
		delete(d.states, k)
		d.erased = append(d.erased, k)
		d.order = append(d.order, "erase "+k.Value)
	}
	return func() error { return nil }, nil
}

func (d *disk) count(k sluice.Key) int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.states[k].Count
}

var hourly = sluice.Policy{Name: "hourly", Algorithm: sluice.FixedWindow, Limit: 1000, Window: time.Hour}
var perSecond = sluice.Policy{Name: "second", Algorithm: sluice.FixedWindow, Limit: 1000, Window: time.Second}

func hourlyKey(v string) sluice.Key {
	return sluice.Key{Tenant: "acme", Space: sluice.SpaceInline, Algorithm: sluice.FixedWindow, Policy: "hourly", Value: v}
}

// admit decides one hit on k under p, and fails the test unless admitted.
func admit(t *testing.T, s *Store, now time.Time, k sluice.Key, p *sluice.Policy) {
	t.Helper()
	if d, err := s.ApplyOne(context.Background(), now, sluice.Op{Key: k, Policy: p, Hits: 1}); err != nil || !d.Allowed {
		t.Fatalf("hit on %s: %+v %v", k.Value, d, err)
	}
}

// TestWriteBehind: with WriteBehind, a decision writes nothing; a write
// writes each changed durable key once, with its latest state, and
// nothing of the counters that are not durable; what is pending counts
// down to zero as the write completes.
func TestWriteBehind(t *testing.T) {
	d := newDisk()
	s := New(Options{Backing: d, WriteBehind: time.Hour, Shards: 4})
	defer s.Close()
	now := time.Now()
	for i := range 100 {
		admit(t, s, now, hourlyKey("hot"), &hourly)
		admit(t, s, now, hourlyKey(fmt.Sprint("k", i%10)), &hourly)
		admit(t, s, now, sluice.Key{Tenant: "acme", Algorithm: sluice.FixedWindow, Policy: "second", Value: "fast"}, &perSecond)
	}
	// Several policies at once take the other path.
	dst := make([]sluice.Decision, 2)
	if err := s.Apply(context.Background(), now, []sluice.Op{{Key: hourlyKey("hot"), Policy: &hourly, Hits: 1}, {Key: hourlyKey("pair"), Policy: &hourly, Hits: 2}}, dst); err != nil || !dst[0].Allowed {
		t.Fatal(dst, err)
	}
	if d.saves != 0 {
		t.Fatalf("%d saves before any write behind", d.saves)
	}
	if st, ok := s.WriteBehindStats(); !ok || st.Pending != 12 {
		t.Fatalf("stats before the write: %+v %v, want 12 pending (hot, pair, k0..k9)", st, ok)
	}
	if err := s.WriteBehind(); err != nil {
		t.Fatal(err)
	}
	if d.written != 12 {
		t.Errorf("wrote %d states, want 12: each changed durable key once", d.written)
	}
	if c := d.count(hourlyKey("hot")); c != 101 {
		t.Errorf("hot's count on disk %d, want 101", c)
	}
	if c := d.count(hourlyKey("pair")); c != 2 {
		t.Errorf("pair's count on disk %d, want 2", c)
	}
	for i := range 10 {
		if c := d.count(hourlyKey(fmt.Sprint("k", i))); c != 10 {
			t.Errorf("k%d's count on disk %d, want 10", i, c)
		}
	}
	if st, _ := s.WriteBehindStats(); st.Pending != 0 || st.Written != 12 || st.LastDone.IsZero() {
		t.Errorf("stats after the write: %+v", st)
	}
	// Nothing changed: nothing written.
	if err := s.WriteBehind(); err != nil || d.written != 12 {
		t.Errorf("a write with nothing changed: %v, %d written", err, d.written)
	}
	admit(t, s, now, hourlyKey("hot"), &hourly)
	if err := s.WriteBehind(); err != nil || d.written != 13 || d.count(hourlyKey("hot")) != 102 {
		t.Errorf("one more hit: %v, %d written, hot %d", err, d.written, d.count(hourlyKey("hot")))
	}
}

// TestWriteBehindFails: a write that fails, at Save or at its sync,
// leaves its states pending, and the next write writes them.
func TestWriteBehindFails(t *testing.T) {
	for _, at := range []string{"save", "sync"} {
		t.Run(at, func(t *testing.T) {
			d := newDisk()
			var logs bytes.Buffer
			s := New(Options{Backing: d, WriteBehind: time.Hour, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			defer s.Close()
			now := time.Now()
			for i := range 5 {
				admit(t, s, now, hourlyKey(fmt.Sprint("k", i)), &hourly)
			}
			broken := errors.New("disk on fire")
			if at == "save" {
				d.fail = broken
			} else {
				d.failSync = broken
			}
			if err := s.WriteBehind(); !errors.Is(err, broken) {
				t.Fatalf("write on a failing disk: %v", err)
			}
			if st, _ := s.WriteBehindStats(); st.Pending != 5 || st.Failed != 1 || st.Written != 0 || !st.LastDone.IsZero() {
				t.Fatalf("stats after a failed write: %+v", st)
			}
			// A second failure is counted, not logged again.
			if err := s.WriteBehind(); !errors.Is(err, broken) {
				t.Fatalf("second write on a failing disk: %v", err)
			}
			if n := strings.Count(logs.String(), "writing counters behind failed"); n != 1 {
				t.Fatalf("%d failure lines for two failed writes, want 1:\n%s", n, logs.String())
			}
			admit(t, s, now, hourlyKey("k0"), &hourly) // marked again by a decision too
			d.fail, d.failSync = nil, nil
			if err := s.WriteBehind(); err != nil {
				t.Fatal(err)
			}
			if d.written != 5 || d.count(hourlyKey("k0")) != 2 || d.count(hourlyKey("k4")) != 1 {
				t.Errorf("after the disk healed: %d written, k0 %d, k4 %d", d.written, d.count(hourlyKey("k0")), d.count(hourlyKey("k4")))
			}
			if st, _ := s.WriteBehindStats(); st.Pending != 0 || st.Failed != 2 || st.LastDone.IsZero() {
				t.Errorf("stats after the disk healed: %+v", st)
			}
			if !strings.Contains(logs.String(), "succeeds again") {
				t.Errorf("no recovery in the log:\n%s", logs.String())
			}
		})
	}
}

// TestWriteBehindClose: Close writes what is pending.
func TestWriteBehindClose(t *testing.T) {
	d := newDisk()
	s := New(Options{Backing: d, WriteBehind: time.Hour})
	admit(t, s, time.Now(), hourlyKey("a"), &hourly)
	s.Close()
	if d.count(hourlyKey("a")) != 1 {
		t.Fatal("Close left a change unwritten")
	}
}

// TestWriteBehindTicks: the store writes behind by itself.
func TestWriteBehindTicks(t *testing.T) {
	d := newDisk()
	s := New(Options{Backing: d, WriteBehind: time.Millisecond})
	defer s.Close()
	admit(t, s, time.Now(), hourlyKey("a"), &hourly)
	for d.count(hourlyKey("a")) != 1 {
		time.Sleep(time.Millisecond)
	}
}

// TestWriteBehindErase: an erase waits for a write behind in progress,
// so that a state the write read is not written after the erase deleted
// it; and the erased key is not written again.
func TestWriteBehindErase(t *testing.T) {
	d := newDisk()
	s := New(Options{Backing: d, WriteBehind: time.Hour})
	defer s.Close()
	admit(t, s, time.Now(), hourlyKey("gdpr"), &hourly)
	release, wrote := holdWrite(t, s, d, hourlyKey("gdpr"))
	defer release() // before Close, whose write waits for this one
	erased := make(chan error)
	go func() {
		_, err := s.EraseKey(context.Background(), "acme", "gdpr", nil)
		erased <- err
	}()
	select {
	case err := <-erased:
		t.Fatalf("the erase ran during a write behind: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	release()
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if err := <-erased; err != nil {
		t.Fatal(err)
	}
	if err := s.WriteBehind(); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(d.order); got != "[save gdpr erase gdpr]" {
		t.Fatalf("the disk saw %s, want the save, then the erase", got)
	}
	if st, _ := s.WriteBehindStats(); st.Pending != 0 {
		t.Errorf("pending after the erase: %+v", st)
	}
}

// TestWriteBehindSweep: a changed key that expires before it is written
// is swept, and no longer pending.
func TestWriteBehindSweep(t *testing.T) {
	d := newDisk()
	s := New(Options{Backing: d, WriteBehind: time.Hour})
	defer s.Close()
	now := time.Now()
	admit(t, s, now, hourlyKey("a"), &hourly)
	if n := s.Sweep(now.Add(2 * time.Hour)); n != 1 {
		t.Fatalf("swept %d", n)
	}
	if st, _ := s.WriteBehindStats(); st.Pending != 0 {
		t.Errorf("pending after the sweep: %+v", st)
	}
	if err := s.WriteBehind(); err != nil || d.written != 0 {
		t.Errorf("wrote %d states of a swept key: %v", d.written, err)
	}
}

// TestWriteBehindChunks: a write of more changed keys than one chunk holds
// writes them all, in bounded batches.
func TestWriteBehindChunks(t *testing.T) {
	d := newDisk()
	s := New(Options{Backing: d, WriteBehind: time.Hour, Shards: 1}) // one shard holds them all
	defer s.Close()
	now := time.Now()
	const n = writeChunk*writesInFlight + writeChunk/2
	for i := range n {
		admit(t, s, now, hourlyKey(fmt.Sprint("k", i)), &hourly)
	}
	if err := s.WriteBehind(); err != nil {
		t.Fatal(err)
	}
	if d.written != n || d.biggest > writeChunk {
		t.Fatalf("%d states in %d batches of at most %d, want %d in batches of at most %d", d.written, d.saves, d.biggest, n, writeChunk)
	}
	if st, _ := s.WriteBehindStats(); st.Pending != 0 || st.Written != n {
		t.Fatalf("stats: %+v", st)
	}
}

// TestWriteBehindCloseFails: a Close whose last write fails says so, and
// the store refuses a write behind after Close.
func TestWriteBehindCloseFails(t *testing.T) {
	d := newDisk()
	var logs bytes.Buffer
	s := New(Options{Backing: d, WriteBehind: time.Hour, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	admit(t, s, time.Now(), hourlyKey("a"), &hourly)
	broken := errors.New("disk on fire")
	d.fail = broken
	if err := s.Close(); !errors.Is(err, broken) {
		t.Fatalf("Close over a failing disk: %v, want its error", err)
	}
	if !strings.Contains(logs.String(), "at close failed") {
		t.Errorf("the loss at close is not logged:\n%s", logs.String())
	}
	if err := s.WriteBehind(); !errors.Is(err, sluice.ErrStoreClosed) {
		t.Errorf("a write behind after Close: %v", err)
	}
	if st, _ := s.WriteBehindStats(); !st.Failing || st.Pending != 1 {
		t.Errorf("stats after a failed Close: %+v", st)
	}
}

// TestWriteBehindSweepWaits: a sweep waits for a write behind in progress,
// so that a state the write read is not written after the sweep made the
// backing forget its key.
func TestWriteBehindSweepWaits(t *testing.T) {
	d := newDisk()
	s := New(Options{Backing: d, WriteBehind: time.Hour})
	defer s.Close()
	now := time.Now()
	admit(t, s, now, hourlyKey("a"), &hourly)
	release, wrote := holdWrite(t, s, d, hourlyKey("a"))
	defer release() // before Close, whose write waits for this one
	swept := make(chan int)
	go func() { swept <- s.Sweep(now.Add(2 * time.Hour)) }()
	select {
	case <-swept:
		t.Fatal("the sweep ran during a write behind")
	case <-time.After(50 * time.Millisecond):
	}
	release()
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if n := <-swept; n != 1 {
		t.Fatalf("swept %d", n)
	}
	if got := fmt.Sprint(d.order); got != "[save a forget a]" {
		t.Fatalf("the disk saw %s, want the save, then the forget", got)
	}
}

// TestSweepForgetsDurableKeysOnly: the sweep asks the backing to forget
// the expired keys of durable counters, and not those it never held.
func TestSweepForgetsDurableKeysOnly(t *testing.T) {
	for _, behind := range []time.Duration{0, time.Hour} {
		d := newDisk()
		s := New(Options{Backing: d, WriteBehind: behind})
		now := time.Now()
		admit(t, s, now, hourlyKey("durable"), &hourly)
		admit(t, s, now, sluice.Key{Tenant: "acme", Algorithm: sluice.FixedWindow, Policy: "second", Value: "fast"}, &perSecond)
		if n := s.Sweep(now.Add(2 * time.Hour)); n != 2 {
			t.Fatalf("swept %d", n)
		}
		want := "[save durable forget durable]"
		if behind != 0 {
			want = "[forget durable]"
		}
		if got := fmt.Sprint(d.order); got != want {
			t.Errorf("WriteBehind %v: the disk saw %s, want %s", behind, got, want)
		}
		s.Close()
	}
}

// holdWrite starts a write behind on s that holds in d's Save, once it has
// read k's state (and cleared its flag). release lets it go on; calling
// it again does nothing.
func holdWrite(t *testing.T, s *Store, d *disk, k sluice.Key) (release func(), wrote <-chan error) {
	t.Helper()
	hold := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(hold) }) }
	d.mu.Lock()
	d.hold = hold
	d.mu.Unlock()
	w := make(chan error, 1)
	go func() { w <- s.WriteBehind() }()
	h := s.hash(&k)
	for read := false; !read; time.Sleep(time.Millisecond) {
		sh := &s.shards[h>>s.shift]
		sh.mu.Lock()
		read = sh.t.get(h, &k).flags&flagDirty == 0
		sh.mu.Unlock()
	}
	return release, w
}
