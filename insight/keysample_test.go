package insight

import (
	"context"
	"fmt"
	"hash/maphash"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/store/memstore"
)

type decision struct {
	at   time.Time
	key  string
	hits int64
}

// traffic is a minute of decisions on many keys, Zipf-distributed: a few
// heavy, most light.
func traffic(seed uint64, n int) []decision {
	r := rand.New(rand.NewPCG(seed, 7))
	z := rand.NewZipf(r, 1.1, 1, 20_000)
	t0 := time.Unix(3_000_000, 0)
	out := make([]decision, 0, n)
	for i := range n {
		out = append(out, decision{at: t0.Add(time.Duration(i) * time.Minute / time.Duration(n)), key: fmt.Sprint("u", z.Uint64()), hits: 1 + r.Int64N(2)})
	}
	return out
}

// denialsThroughTheEngine replays ds through a real engine on the memory
// store with p, and counts the denials: what "try a limit" must agree with.
func denialsThroughTheEngine(t *testing.T, ds []decision, p sluice.Policy) int64 {
	t.Helper()
	var now time.Time
	clock := func() time.Time { return now }
	e := engine.New(memstore.New(memstore.Options{Now: clock}), engine.Options{Now: clock})
	var denied int64
	for _, d := range ds {
		now = d.at
		res, err := e.Check(context.Background(), sluice.Request{Tenant: "acme", Hits: d.hits, Checks: []sluice.Check{{Policy: p, Key: d.key}}})
		if err != nil {
			t.Fatal(err)
		}
		if !res.Allowed {
			denied++
		}
	}
	return denied
}

// Trying a limit on the whole traffic (a sample big enough for every
// key) gives exactly the engine's denials; on a sample of the light keys,
// an estimate within three standard errors of them, with the error
// stated, over several seeds.
func TestKeySampleAgreesWithTheEngine(t *testing.T) {
	for _, p := range []sluice.Policy{
		{Name: "api", Algorithm: sluice.FixedWindow, Limit: 5, Window: 10 * time.Second},
		{Name: "api", Algorithm: sluice.SlidingWindow, Limit: 5, Window: 10 * time.Second},
		{Name: "api", Algorithm: sluice.TokenBucket, Limit: 5, Window: 10 * time.Second, Burst: 3},
	} {
		t.Run(p.Algorithm.String(), func(t *testing.T) {
			outside := 0
			for seed := range uint64(5) {
				ds := traffic(seed, 60_000)
				want := denialsThroughTheEngine(t, ds, p)
				if want == 0 {
					t.Fatal("the traffic never passes the limit: a test that cannot fail")
				}
				all, part := NewKeySample(time.Hour, 2*len(ds)), NewKeySample(time.Hour, 40_000)
				for _, d := range ds {
					all.Add(d.at, "acme", d.key, d.hits)
					part.Add(d.at, "acme", d.key, d.hits)
				}
				if whole := all.Try(&p, "", time.Time{}, 5); whole.Rate != 1 || whole.Denied != float64(want) || whole.StdErr != 0 || whole.Events != len(ds) {
					t.Errorf("seed %d, whole sample: %+v, want rate 1 and exactly %d denied", seed, whole, want)
				}
				got := part.Try(&p, "", time.Time{}, 5)
				if got.Rate >= 1 || got.Bytes > got.Bound || got.Coarse != 0 {
					t.Fatalf("seed %d: the small sample kept rate %v, %d of %d bytes, %d coarse: it did not sample, or coarsened", seed, got.Rate, got.Bytes, got.Bound, got.Coarse)
				}
				if diff := math.Abs(got.Denied - float64(want)); diff > 3*got.StdErr+1 {
					outside++
					t.Logf("seed %d: outside 3 standard errors: %.0f ± %.0f, the engine %d", seed, got.Denied, got.StdErr, want)
				}
				t.Logf("seed %d: engine %d denied; sample of %.3f of the light keys and %d heavy (%d keys, %d events): %.0f ± %.0f",
					seed, want, got.Rate, got.Heavy, got.Keys, got.Events, got.Denied, got.StdErr)
			}
			// Three standard errors hold 99.7% of normal estimates: one seed
			// in five outside is already unlikely.
			if outside > 1 {
				t.Errorf("%d of 5 seeds outside three standard errors of the engine", outside)
			}
		})
	}
}

// Events older than the span are dropped, and a tenant's try sees its
// own keys only.
func TestKeySampleSpanAndTenants(t *testing.T) {
	s := NewKeySample(10*time.Second, 1000)
	t0 := time.Unix(5_000_000, 0)
	for i := range 5 {
		s.Add(t0.Add(time.Duration(i)*time.Second), "acme", "k", 1)
	}
	s.Add(t0.Add(20*time.Second), "acme", "k", 1)
	s.Add(t0.Add(20*time.Second), "beta", "b", 1)
	p := &sluice.Policy{Name: "api", Algorithm: sluice.FixedWindow, Limit: 1, Window: time.Hour}
	if got := s.Try(p, "acme", time.Time{}, 5); got.Events != 1 || got.Keys != 1 {
		t.Errorf("acme after the span: %+v, want 1 event of 1 key", got)
	}
	if got := s.Try(p, "", time.Time{}, 5); got.Keys != 2 {
		t.Errorf("all: %+v", got)
	}
}

// heapInUse returns the live heap after a full collection. (What other
// tests leave running may free memory meanwhile: measure a structure as
// the heap with it less the heap just after dropping it.)
func heapInUse() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// hotKey is one key's decisions, evenly spaced, n of them over an hour
// from t0 (10 million: about 2,800 a second).
func hotKey(n int) (t0 time.Time, step time.Duration) {
	return time.Unix(3_000_000, 0), time.Hour / time.Duration(n)
}

// Ten million decisions on one key over an hour (a million under the race
// detector) leave the sample within its bound all along, in bytes as it
// counts them and in the heap; and Try still replays every decision.
// (Before the sample coarsened heavy keys, it kept every event: 17 bytes
// a decision, 35 MB for two million.)
func TestKeySampleHotKeyStaysInItsBound(t *testing.T) {
	n := 10_000_000
	if raceOn {
		n = 500_000
	}
	s := NewKeySample(time.Hour, 20_000)
	t0, step := hotKey(n)
	most := 0
	for i := range n {
		s.Add(t0.Add(time.Duration(i)*step), "acme", "hot", 1)
		if i%4096 == 0 {
			if b := s.Bytes(); b > most {
				most = b
			}
		}
	}
	if most = max(most, s.Bytes()); most > s.Bound() {
		t.Errorf("the sample took %d bytes, over its bound of %d", most, s.Bound())
	}
	p := &sluice.Policy{Name: "api", Algorithm: sluice.FixedWindow, Limit: 1000, Window: 10 * time.Second}
	got := s.Try(p, "", time.Time{}, 1)
	if got.Events != n || got.Keys != 1 || got.Heavy != 1 || got.Coarse != n {
		t.Errorf("try: %+v, want all %d decisions of the one heavy key, from buckets", got, n)
	}
	// The sample is what the heap holds, within 10%.
	with := heapInUse()
	runtime.KeepAlive(s)
	s = nil
	heap := with - heapInUse()
	if heap > int64(got.Bound)*11/10 {
		t.Errorf("the sample takes %d bytes of heap, its bound %d", heap, got.Bound)
	}
	t.Logf("%d decisions: at most %d bytes of %d (the heap holds %d); buckets of %.3gs", n, most, got.Bound, heap, got.Interval)
}

// A million keys of a decision or two leave the sample within its bound:
// each key's overhead counts against it, and p halves.
func TestKeySampleManyKeysStayInTheBound(t *testing.T) {
	n := 1_000_000
	if raceOn {
		n = 200_000
	}
	s := NewKeySample(time.Hour, 20_000)
	t0 := time.Unix(3_000_000, 0)
	for i := range n {
		s.Add(t0.Add(time.Duration(i)*time.Millisecond), "acme", fmt.Sprint("user-", i%(n/2)), 1)
		if i%4096 == 0 && s.Bytes() > s.Bound() {
			t.Fatalf("after %d decisions: %d bytes, over the bound of %d", i, s.Bytes(), s.Bound())
		}
	}
	got := s.Try(&sluice.Policy{Name: "api", Algorithm: sluice.FixedWindow, Limit: 1, Window: time.Hour}, "", time.Time{}, 1)
	if got.Rate >= 1.0/16 || got.Bytes > got.Bound {
		t.Errorf("try: %+v: want a sample of a sixteenth or less within its bound", got)
	}
	// Every key was denied once: the estimate is n/2 within its error.
	if diff := math.Abs(got.Denied - float64(n/2)); diff > 4*got.StdErr {
		t.Errorf("estimated %.0f ± %.0f denied, want %d", got.Denied, got.StdErr, n/2)
	}
	t.Logf("%d keys: rate %v, %d keys of which %d heavy, %d bytes of %d; %.0f ± %.0f denied", n/2, got.Rate, got.Keys, got.Heavy, got.Bytes, got.Bound, got.Denied, got.StdErr)
}

// Bytes is honest: it agrees with the heap the sample holds, within 10%,
// for a sample of many light keys and a few hot coarsened ones, and for
// one that holds every key exact.
func TestKeySampleBytesIsTheHeap(t *testing.T) {
	for _, tc := range []struct {
		name         string
		events, keys int
	}{
		{"sampled and coarsened", 50_000, 300_000},
		{"whole", 1_000_000, 20_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewKeySample(time.Hour, tc.events)
			t0 := time.Unix(3_000_000, 0)
			r := rand.New(rand.NewPCG(1, 2))
			n := 1_000_000
			if raceOn {
				n = 150_000
			}
			for i := range n {
				key := fmt.Sprint("hot-", i%4) // four keys with two thirds of the decisions
				if i%3 == 0 {
					key = fmt.Sprint("user-", r.IntN(tc.keys))
				}
				s.Add(t0.Add(time.Duration(i)*time.Hour/time.Duration(n)), "acme", key, 1)
			}
			tr := s.Try(&sluice.Policy{Name: "api", Algorithm: sluice.FixedWindow, Limit: 1, Window: time.Hour}, "", time.Time{}, 1)
			b, with := s.Bytes(), heapInUse()
			runtime.KeepAlive(s)
			s = nil
			heap := with - heapInUse()
			if b > tr.Bound {
				t.Errorf("%d bytes, over the bound of %d", b, tr.Bound)
			}
			if ratio := float64(b) / float64(heap); ratio < 0.9 || ratio > 1.1 {
				t.Errorf("Bytes says %d, the heap holds %d for it (%.2f)", b, heap, ratio)
			}
			t.Logf("Bytes %d, heap %d, bound %d; %d keys (rate %v), %d events, %d of them coarse", b, heap, tr.Bound, tr.Keys, tr.Rate, tr.Events, tr.Coarse)
		})
	}
}

// allocSize agrees with the allocator: a slice grown by append takes the
// capacity allocSize says, for objects with and without pointers.
func TestAllocSizeIsTheAllocators(t *testing.T) {
	for n := 1; n < 70_000; n += 1 + n/64 {
		if got, want := allocSize(n, false), cap(slices.Grow([]byte(nil), n)); got != want {
			t.Fatalf("allocSize(%d, false) = %d, the allocator %d", n, got, want)
		}
		// The allocator's 8-byte header of pointerful objects past 512
		// bytes is part of what they take, and not of their capacity.
		c := cap(slices.Grow([]*int(nil), n)) * 8
		if n*8 > 512 && n*8 <= 32768-8 {
			c += 8
		}
		if got := allocSize(n*8, true); got != c {
			t.Fatalf("allocSize(%d, true) = %d, the allocator %d", n*8, got, c)
		}
	}
}

// exactDenials replays decisions on one key through the algorithm, as the
// sample would if it kept every one.
func exactDenials(p *sluice.Policy, ts []int64, hits []int64) int64 {
	var st algo.State
	var d sluice.Decision
	var denied int64
	for i, t := range ts {
		if algo.Update(p, &st, t, hits[i], &d); !d.Allowed {
			denied++
		}
	}
	return denied
}

// Try on a coarsened hot key estimates the denials of an exact replay of
// all its decisions, within the error KeySample states. For a steady key
// and windows: within 0.5%; a fixed window of 10 seconds, a multiple of
// the buckets' width, exactly. For a bursty key (1.5-second bursts every
// 10 seconds, not aligned to the buckets): windows within 0.5%, and a
// token bucket refilling at r within r times the width a burst, the
// refill over each burst's smoothed edges.
func TestKeySampleCoarseTry(t *testing.T) {
	n := 1_000_000
	if raceOn {
		n = 150_000 // still past the bound, coarsened
	}
	const bursts = 360
	steady := func() ([]int64, []int64) {
		t0, step := hotKey(n)
		ts, hits := make([]int64, n), make([]int64, n)
		for i := range n {
			ts[i], hits[i] = t0.Add(time.Duration(i)*step).UnixNano(), 1
		}
		return ts, hits
	}
	bursty := func() ([]int64, []int64) {
		t0 := time.Unix(3_000_000, 0).Add(3300 * time.Millisecond)
		per := n / bursts
		var ts, hits []int64
		for b := range bursts {
			for i := range per {
				ts = append(ts, t0.Add(time.Duration(b)*10*time.Second+time.Duration(i)*1500*time.Millisecond/time.Duration(per)).UnixNano())
				hits = append(hits, 1)
			}
		}
		return ts, hits
	}
	rate := int64(n / 3600) // the steady key's decisions a second
	relative := func(r float64) func(want int64, _ Tried) float64 {
		return func(want int64, _ Tried) float64 { return r * float64(want) }
	}
	perBurst := func(p sluice.Policy) func(int64, Tried) float64 {
		return func(_ int64, got Tried) float64 {
			return bursts * float64(p.Limit) / p.Window.Seconds() * got.Interval
		}
	}
	bucket := sluice.Policy{Algorithm: sluice.TokenBucket, Limit: 5 * rate, Window: time.Second, Burst: 2 * rate}
	for _, tc := range []struct {
		name    string
		traffic func() ([]int64, []int64)
		p       sluice.Policy
		within  func(want int64, got Tried) float64
	}{
		{"steady/fixed", steady, sluice.Policy{Algorithm: sluice.FixedWindow, Limit: 7 * rate, Window: 10 * time.Second}, relative(0)},
		{"steady/sliding", steady, sluice.Policy{Algorithm: sluice.SlidingWindow, Limit: 7 * rate, Window: 10 * time.Second}, relative(0.005)},
		{"steady/bucket", steady, sluice.Policy{Algorithm: sluice.TokenBucket, Limit: rate * 7 / 10, Window: time.Second, Burst: rate}, relative(0.005)},
		{"bursty/fixed", bursty, sluice.Policy{Algorithm: sluice.FixedWindow, Limit: 7 * rate, Window: 10 * time.Second}, relative(0)},
		{"bursty/sliding", bursty, sluice.Policy{Algorithm: sluice.SlidingWindow, Limit: 7 * rate, Window: 10 * time.Second}, relative(0.005)},
		{"bursty/bucket", bursty, bucket, perBurst(bucket)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.p.Name = "api"
			ts, hits := tc.traffic()
			s := NewKeySample(time.Hour, 20_000)
			for i, at := range ts {
				s.Add(time.Unix(0, at), "acme", "hot", hits[i])
			}
			want := exactDenials(&tc.p, ts, hits)
			got := s.Try(&tc.p, "", time.Time{}, 1)
			if want == 0 || want == int64(len(ts)) {
				t.Fatalf("the exact replay denies %d of %d: a test that cannot fail", want, len(ts))
			}
			if got.Coarse != len(ts) || got.Events != len(ts) || got.Interval == 0 {
				t.Fatalf("try: %+v, want all %d decisions from buckets", got, len(ts))
			}
			off, within := math.Abs(got.Denied-float64(want)), tc.within(want, got)
			if off > within {
				t.Errorf("estimated %.0f denied, the exact replay %d: off by %.0f, more than %.0f", got.Denied, want, off, within)
			}
			t.Logf("%d decisions in buckets of %gs: estimated %.0f denied, exact %d: off by %.0f (%.2f%%), within %.0f",
				len(ts), got.Interval, got.Denied, want, off, 100*off/float64(want), within)
		})
	}
}

// A key that stops leaves the sample a span after its last decision, as
// the sweep passes: its bytes come back, and heavy keys make room.
func TestKeySampleForgetsStoppedKeys(t *testing.T) {
	s, alone := NewKeySample(time.Minute, 100_000), NewKeySample(time.Minute, 100_000) // p stays 1
	t0 := time.Unix(3_000_000, 0)
	for i := range 100_000 {
		s.Add(t0.Add(time.Duration(i)*time.Millisecond), "acme", fmt.Sprint("k", i%1000), 1)
	}
	full := s.Bytes()
	later := t0.Add(10 * time.Minute)
	for i := range 10_000 {
		s.Add(later.Add(time.Duration(i)*time.Millisecond), "acme", "last", 1)
		alone.Add(later.Add(time.Duration(i)*time.Millisecond), "acme", "last", 1)
	}
	p := &sluice.Policy{Name: "api", Algorithm: sluice.FixedWindow, Limit: 1, Window: time.Hour}
	got := s.Try(p, "", time.Time{}, 1)
	if got.Keys != 1 || got.Heavy != 1 || got.Events != 10_000 || got.Rate != 1 {
		t.Errorf("try: %+v, want the last key alone, heavy", got)
	}
	// What is left is the last key's, and tables a little larger.
	if b, want := s.Bytes(), alone.Bytes(); b > want+4096 {
		t.Errorf("%d bytes after the keys stopped, %d for the last key alone (%d full)", b, want, full)
	}
}

// The table agrees with a map through random puts and deletes, shrinking
// and growing: deletion shifts back the keys that probed past a slot.
func TestKeySampleTable(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var tb table
	want := map[uint64]*keyLog{}
	for i := range 200_000 {
		h := r.Uint64N(5000) * 0x9E3779B97F4A7C15 // clustered homes, to exercise probing
		if i%7 == 0 {
			h &^= 0xFF
		}
		if l := want[h]; l != nil {
			if r.IntN(3) > 0 {
				tb.del(h)
				delete(want, h)
			}
		} else if r.IntN(2) == 0 || len(want) < 100 {
			l := &keyLog{hash: h}
			tb.put(slot{h: h, l: l})
			want[h] = l
		}
		if i%997 == 0 {
			if tb.n != len(want) {
				t.Fatalf("table holds %d, want %d", tb.n, len(want))
			}
			for h, l := range want {
				if sl := tb.find(h); sl == nil || sl.l != l {
					t.Fatalf("lost the key of hash %x", h)
				}
			}
			if n := len(tb.appendKeys(nil)); n != len(want) {
				t.Fatalf("table lists %d, want %d", n, len(want))
			}
		}
	}
}

// Try runs while decisions arrive, keys are coarsened and expire, and p
// halves: every answer is consistent, and the race detector sees no race.
//
// The two tenants' adders take turns by a token, a decision each, so that
// the sample goes through the same states whatever the scheduler does:
// the clock is virtual, moved by the decisions, and an adder left waiting
// for a span's decisions of the other would be a tenant that stopped for
// a span (its hot key swept, and back under p, never seen again: the
// sample may then hold one hot key or none, and need not coarsen either:
// TestKeySampleMissesHotKeysUnderP).
// Every thousand decisions the adders wait for a try begun after: some
// try sees the sample at each stage, p halved and the hot keys coarsened
// (about 7 s in) included, however slowly the tries run.
func TestKeySampleTryWhileAdding(t *testing.T) {
	const (
		decisions  = 60_000 // a minute: six spans, so that keys expire
		checkpoint = 1_000
	)
	s := NewKeySample(10*time.Second, 2_000)
	t0 := time.Unix(3_000_000, 0)
	var tries atomic.Int64 // tries finished
	turn := [2]chan int{make(chan int, 1), make(chan int, 1)}
	stop := make(chan struct{})  // the test gave up: adders return
	added := make(chan struct{}) // the adders are done
	var wg sync.WaitGroup
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 9))
			for {
				var i int
				select {
				case i = <-turn[g]:
				case <-stop:
					return
				}
				if i == decisions {
					turn[1-g] <- i // the other returns too
					return
				}
				if i%checkpoint == 0 {
					for seen := tries.Load(); tries.Load() < seen+2; { // a try begun after this point finished
						select {
						case <-stop:
							return
						default:
							runtime.Gosched()
						}
					}
				}
				key := "hot" // most decisions: the hot keys outgrow their share and are coarsened
				if r.IntN(4) == 0 {
					key = fmt.Sprint("k", r.IntN(20_000))
				}
				s.Add(t0.Add(time.Duration(i+1)*time.Millisecond), fmt.Sprint("t", g), key, 1+r.Int64N(2))
				turn[1-g] <- i + 1
			}
		}()
	}
	go func() { wg.Wait(); close(added) }()
	defer func() { close(stop); <-added }()
	turn[0] <- 0
	p := &sluice.Policy{Name: "api", Algorithm: sluice.TokenBucket, Limit: 10, Window: time.Second}
	n, halved, coarse := 0, false, false
	for running := true; running; n++ {
		select {
		case <-added:
			running = false // a last try, on the whole minute
		default:
		}
		got := s.Try(p, "", time.Time{}, 3)
		if got.Coarse > got.Events || got.Keys > got.Events || got.Heavy > heavyKeys || got.Bytes > got.Bound || float64(got.DeniedSampled) > float64(got.Events) {
			t.Errorf("try: %+v", got)
		}
		if one := s.Try(p, "t1", time.Time{}, 3); one.Events > got.Events+2*checkpoint || one.Keys > got.Keys+2*checkpoint {
			t.Errorf("one tenant: %+v, both %+v", one, got)
		}
		halved, coarse = halved || got.Rate < 1, coarse || got.Coarse > 0
		tries.Add(1)
	}
	if !halved || !coarse || n < decisions/checkpoint {
		t.Errorf("over %d tries, halved p: %v, coarsened a key: %v; want both seen while tried, a try each %d decisions", n, halved, coarse, checkpoint)
	}
}

// A key that p leaves out is not seen again, however heavy it turns (the
// package doc), and a key that stops for a span leaves the sample: a hot
// key that stops for a span and comes back with its hash under p is
// missed, as is one that first decides after p halved. With both hot keys
// missed the sample holds light keys only, within its bound, and coarsens
// nothing. TestKeySampleTryWhileAdding's adders came to this when the
// scheduler ran one alone for a while (its decisions move the virtual
// clock: to the sample the other tenant stopped).
func TestKeySampleMissesHotKeysUnderP(t *testing.T) {
	s := NewKeySample(10*time.Second, 2_000)
	// Keys of level 0, left out once p halves: one name in two.
	hotKey := func(tenant string) string {
		for i := 0; ; i++ {
			if k := fmt.Sprint("hot", i); level(maphash.Bytes(s.seed, []byte(keyID(tenant, k)))) == 0 {
				return k
			}
		}
	}
	hot := [2]string{hotKey("t0"), hotKey("t1")}
	r := [2]*rand.Rand{rand.New(rand.NewPCG(0, 9)), rand.New(rand.NewPCG(1, 9))}
	t0 := time.Unix(3_000_000, 0)
	i := 0
	add := func(g int) {
		key := hot[g]
		if r[g].IntN(4) == 0 {
			key = fmt.Sprint("k", r[g].IntN(20_000))
		}
		i++
		s.Add(t0.Add(time.Duration(i)*time.Millisecond), fmt.Sprint("t", g), key, 1+r[g].Int64N(2))
	}
	p := &sluice.Policy{Name: "api", Algorithm: sluice.TokenBucket, Limit: 10, Window: time.Second}
	for i < 3_000 { // t1 alone for 3 s: its hot key held, heavy; p halves
		add(1)
	}
	if got := s.Try(p, "t1", time.Time{}, 1); got.Rate == 1 || got.Heavy == 0 || got.Events < 2_000 || got.Coarse > 0 {
		t.Fatalf("t1 alone: %+v, want p halved and its hot key held exact", got)
	}
	for i < 14_000 { // then t0 alone for 11 s: its hot key missed, t1's swept
		add(0)
	}
	n := 74_000 // then both by turns, a minute
	if raceOn {
		n = 34_000
	}
	for i < n {
		add(i % 2)
		if i%1000 != 0 {
			continue
		}
		// A tenant's light decisions of a span are about 1,250, its hot
		// key's 3,750.
		all, t0s, t1s := s.Try(p, "", time.Time{}, 1), s.Try(p, "t0", time.Time{}, 1), s.Try(p, "t1", time.Time{}, 1)
		if all.Rate == 1 || all.Coarse > 0 || all.Bytes > all.Bound || t0s.Events > 2_000 || t1s.Events > 2_000 {
			t.Fatalf("at %v: %+v; t0 %+v; t1 %+v: want both hot keys missed, nothing coarse, within the bound", time.Duration(i)*time.Millisecond, all, t0s, t1s)
		}
	}
}

// Forget drops a tenant's keys, light and heavy, and none of another's.
func TestKeySampleForget(t *testing.T) {
	s := NewKeySample(time.Hour, 1000)
	t0 := time.Unix(1_000_000, 0)
	for i := range 200 {
		s.Add(t0.Add(time.Duration(i)*time.Millisecond), "acme", fmt.Sprint("k", i%40), 1)
		s.Add(t0.Add(time.Duration(i)*time.Millisecond), "beta", fmt.Sprint("k", i%7), 1)
	}
	p := &sluice.Policy{Name: "p", Algorithm: sluice.FixedWindow, Limit: 1, Window: time.Hour}
	before := s.Try(p, "beta", time.Time{}, 10)
	s.Forget("acme")
	if got := s.Try(p, "acme", time.Time{}, 10); got.Events != 0 || got.Keys != 0 {
		t.Errorf("acme after Forget: %+v", got)
	}
	if got := s.Try(p, "beta", time.Time{}, 10); got.Events != before.Events || got.Keys != before.Keys {
		t.Errorf("beta after acme's Forget: %+v, before %+v", got, before)
	}
	s.Add(t0.Add(time.Second), "acme", "new", 1)
	if got := s.Try(p, "acme", time.Time{}, 10); got.Events != 1 {
		t.Errorf("acme's new key: %+v", got)
	}
}
