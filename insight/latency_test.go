package insight

import (
	"testing"
	"time"
)

// TestStoreLatency: percentiles per second from the store calls counted,
// each within √2 above the true value.
func TestStoreLatency(t *testing.T) {
	now := time.Unix(1_795_000_000, 0)
	r := NewRecorder(RecorderOptions{Now: func() time.Time { return now }})
	// 100 calls: 1 ms to 100 ms.
	for i := 1; i <= 100; i++ {
		r.StoreDone(time.Duration(i)*time.Millisecond, nil)
	}
	pts := r.StoreLatency(now.Unix()-1, now.Unix())
	if len(pts) != 2 || pts[0].N != 0 || pts[1].N != 100 {
		t.Fatalf("points %+v, want an empty second, then 100 calls", pts)
	}
	p := pts[1]
	for _, c := range []struct {
		name      string
		got, true float64
	}{{"p50", p.P50, 50}, {"p90", p.P90, 90}, {"p99", p.P99, 99}} {
		if c.got < c.true || c.got > c.true*1.4143 {
			t.Errorf("%s = %v ms, want within √2 above %v", c.name, c.got, c.true)
		}
	}
	// Buckets sum across nodes.
	sum := make([]int32, len(p.Buckets))
	for i := range sum {
		sum[i] = 2 * p.Buckets[i]
	}
	if q := LatencyOf(p.Second, sum); q.N != 200 || q.P50 != p.P50 || q.P99 != p.P99 {
		t.Errorf("doubled buckets: %+v, want the same percentiles over 200", q)
	}
	// A bound is shown to the µs, rounded up: 25 µs falls in the bucket
	// up to 10·√2³ µs (28.3 µs), shown as 0.029 ms, never as 0.028; 15 µs
	// in the one up to 20 µs, shown as 0.02 ms, not 0.021.
	now = now.Add(time.Second)
	r.StoreDone(15*time.Microsecond, nil)
	r.StoreDone(25*time.Microsecond, nil)
	if q := r.StoreLatency(now.Unix(), now.Unix())[0]; q.N != 2 || q.P99 != 0.029 || q.P50 != 0.02 {
		t.Errorf("15 µs and 25 µs: p50 %v, p99 %v ms, want 0.02 and 0.029 (bounds rounded up)", q.P50, q.P99)
	}
	if latencyBucket(0) != 0 || latencyBucket(time.Hour) != latencyBuckets-1 {
		t.Error("the buckets' ends")
	}
}
