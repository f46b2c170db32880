package insight

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// hotStep is the time between a hot key's decisions: 10 million an hour,
// about 2,800 a second.
const hotStep = time.Hour / 10_000_000

// BenchmarkKeySampleHotKey is a hot key's decision added to a policy's
// sample, as the recorder adds it (the key's id made once), on a fake
// clock stepping hotStep a decision: from a fresh sample, and after a
// simulated hour of the key (10 million decisions), when each add expires
// the key's oldest decisions and the key is coarsened into buckets. The
// two should be level. It reports the sample's bytes at the end, and its
// bound.
func BenchmarkKeySampleHotKey(b *testing.B) {
	for _, warm := range []struct {
		name string
		d    time.Duration
	}{{"start", 0}, {"hour", time.Hour}} {
		b.Run(warm.name, func(b *testing.B) {
			s := NewKeySample(time.Hour, 20_000)
			id := []byte(keyID("acme", "hot"))
			now := time.Unix(3_000_000, 0)
			for range int(warm.d / hotStep) {
				s.add(now, id, len("acme"), 1)
				now = now.Add(hotStep)
			}
			b.ReportAllocs()
			for b.Loop() {
				s.add(now, id, len("acme"), 1)
				now = now.Add(hotStep)
			}
			b.ReportMetric(float64(s.Bytes()), "bytes")
			b.ReportMetric(float64(s.Bound()), "bound")
		})
	}
}

// BenchmarkKeySampleManyKeys is a decision on one of a million keys, in a
// random order, added to a sample that keeps a few thousand of them
// (after a simulated hour of them): most adds find their key left out.
// The ids are made in the order they are used, as a caller makes each
// decision's, so that reading them costs no cache misses of their own.
func BenchmarkKeySampleManyKeys(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	ids := make([][]byte, 1_000_000)
	for i, k := range r.Perm(len(ids)) {
		ids[i] = []byte(keyID("acme", fmt.Sprint("user-", k)))
	}
	s := NewKeySample(time.Hour, 20_000)
	now := time.Unix(3_000_000, 0)
	for i := range 10_000_000 {
		s.add(now, ids[i%len(ids)], len("acme"), 1)
		now = now.Add(hotStep)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		s.add(now, ids[i%len(ids)], len("acme"), 1)
		now = now.Add(hotStep)
		i++
	}
	b.ReportMetric(float64(s.Bytes()), "bytes")
}
