package pebblestore

import (
	"context"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/store/memstore"
)

// benchWriters is how many goroutines decide at once in BenchmarkDurable:
// the 50 workers of docs/benchmarks.md's service benchmark, whose durable
// writes share syncs as a server's do.
const benchWriters = 50

// benchKeyCount is the keys the decisions spread over, as the service
// benchmark's (--keys).
const benchKeyCount = 10_000

// BenchmarkDurable is one allowed decision on a held key of a one-hour fixed
// window (durable: written, and synced before it is answered), from 50
// goroutines at once, beside what bounds it:
//
//   - memory: the same decision on the memory store, no disk at all;
//   - short: a one-second window on this store, held in memory only;
//   - log: no decision, only a durable write of the same size, applied
//     and synced as Save does (a Pebble batch of one key and state,
//     group-committed): the log's write and sync alone;
//   - durable: the decision with its durable write;
//   - behind: the decision written behind (Options.WriteBehind), every
//     10ms, 100ms and 1s: the writer's CPU is in cpu-ns/op.
//
// What durable costs beyond memory and log together is the price of
// joining them: the store's slow path, allocations and waits.
func BenchmarkDurable(b *testing.B) {
	keys := make([]string, benchKeyCount)
	for i := range keys {
		keys[i] = fmt.Sprint("user-", i)
	}
	hour := sluice.Policy{Name: "hour", Algorithm: sluice.FixedWindow, Limit: 1 << 40, Window: time.Hour}
	second := sluice.Policy{Name: "second", Algorithm: sluice.FixedWindow, Limit: 1 << 40, Window: time.Second}
	key := func(p *sluice.Policy, i int) sluice.Key {
		return sluice.Key{Tenant: "acme", Algorithm: p.Algorithm, Policy: p.Name, Value: keys[i%len(keys)]}
	}
	// decide is an allowed decision on a held key of p, by s.
	decide := func(b *testing.B, s sluice.Store, p *sluice.Policy) {
		ctx := context.Background()
		for i := range keys {
			if err := s.Apply(ctx, time.Now(), []sluice.Op{{Key: key(p, i), Policy: p, Hits: 1}}, make([]sluice.Decision, 1)); err != nil {
				b.Fatal(err)
			}
		}
		writers(b, func() func(i int) {
			dst, ops := make([]sluice.Decision, 1), make([]sluice.Op, 1)
			return func(i int) {
				ops[0] = sluice.Op{Key: key(p, i), Policy: p, Hits: 1}
				if err := s.Apply(ctx, time.Now(), ops, dst); err != nil || !dst[0].Allowed {
					b.Fatal(dst[0], err)
				}
			}
		})
	}
	b.Run("store=memory", func(b *testing.B) {
		s := memstore.New(memstore.Options{})
		defer s.Close()
		decide(b, s, &hour)
	})
	b.Run("store=short", func(b *testing.B) { decide(b, openBench(b, Options{}), &second) })
	b.Run("store=log", func(b *testing.B) {
		s := openBench(b, Options{})
		bk := &backing{db: s.db, durableAfter: time.Minute}
		st := algo.State{Algorithm: sluice.FixedWindow, Start: time.Now().UnixNano(), Count: 12345, Expires: time.Now().Add(time.Hour).UnixNano()}
		writers(b, func() func(i int) {
			var buf []byte
			return func(i int) {
				k := key(&hour, i)
				batch := s.db.NewBatch()
				buf, _ = st.AppendBinary(buf[:0])
				if err := batch.Set(counterKey(&k), buf, nil); err != nil {
					b.Fatal(err)
				}
				wait, err := bk.apply(batch)
				if err == nil {
					err = wait()
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("store=durable", func(b *testing.B) { decide(b, openBench(b, Options{}), &hour) })
	for _, every := range []time.Duration{10 * time.Millisecond, 100 * time.Millisecond, time.Second} {
		b.Run(fmt.Sprintf("store=behind/every=%v", every), func(b *testing.B) {
			decide(b, openBench(b, Options{WriteBehind: every}), &hour)
		})
	}
}

// openBench opens a store in a temporary directory, closed at the
// benchmark's end.
func openBench(b *testing.B, opts Options) *Store {
	s, err := Open(b.TempDir(), opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// writers runs b.N calls of the op each goroutine gets from newOp, from
// benchWriters goroutines, each walking the keys from its own offset, and
// reports allocations and the CPU per op (reportCPU).
func writers(b *testing.B, newOp func() func(i int)) {
	var next atomic.Uint64
	b.ReportAllocs()
	b.SetParallelism((benchWriters + 1) / 2)
	defer reportCPU(b)()
	b.RunParallel(func(pb *testing.PB) {
		i, op := int(next.Add(7919)), newOp()
		for pb.Next() {
			i++
			op(i)
		}
	})
}

// reportCPU resets b's timer and returns a func that reports the process's
// CPU time (user and system, the kernel's accounting) per op since: what a
// decision costs the machine, where ns/op is the wall time of 50 writers
// that mostly wait for syncs.
func reportCPU(b *testing.B) func() {
	cpu := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	start := cpu()
	b.ResetTimer()
	return func() {
		b.StopTimer()
		b.ReportMetric(float64(cpu()-start)/float64(b.N), "cpu-ns/op")
	}
}
