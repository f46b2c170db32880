package insight

import (
	"math"
	"time"
)

// Store latencies are counted per second in buckets that grow by √2 from
// latencyBase: bucket i holds what took up to latencyBase·√2^i, the last
// one everything slower. A percentile is its bucket's upper bound, so at
// most √2 over the true value, and sums of nodes' buckets are the
// cluster's.
const (
	latencyBuckets = 40
	latencyBase    = 10 * time.Microsecond
)

func latencyBucket(d time.Duration) int {
	if d <= latencyBase {
		return 0
	}
	i := int(math.Ceil(2 * math.Log2(float64(d)/float64(latencyBase))))
	return min(i, latencyBuckets-1)
}

// bucketUpper is bucket i's upper bound, in milliseconds.
func bucketUpper(i int) float64 {
	return float64(latencyBase) * math.Pow(math.Sqrt2, float64(i)) / float64(time.Millisecond)
}

// LatencyPoint is one second's store latencies: the calls made and their
// percentiles, in milliseconds (0 in a second without calls). A
// percentile is not an exact figure: it is the upper bound of the √2
// bucket it falls in (at most √2 over the true value), hence its name on
// the wire, p99AtMost: "p99 ≤ 1.81 ms".
type LatencyPoint struct {
	Second int64   `json:"t"`
	N      int64   `json:"n"`
	P50    float64 `json:"p50AtMost"`
	P90    float64 `json:"p90AtMost"`
	P99    float64 `json:"p99AtMost"`
	// Buckets are the counts the percentiles come from, for summing
	// nodes (LatencyOf).
	Buckets []int32 `json:"buckets,omitempty"`
}

// LatencyOf returns the point of one second's bucket counts.
func LatencyOf(second int64, buckets []int32) LatencyPoint {
	p := LatencyPoint{Second: second, Buckets: buckets}
	for _, c := range buckets {
		p.N += int64(c)
	}
	if p.N == 0 {
		return p
	}
	pct := func(q float64) float64 {
		want := int64(math.Ceil(q * float64(p.N)))
		var seen int64
		for i, c := range buckets {
			if seen += int64(c); seen >= want {
				return math.Ceil(bucketUpper(i)*1000-1e-9) / 1000 // to the µs above: still a bound
			}
		}
		return bucketUpper(len(buckets) - 1)
	}
	p.P50, p.P90, p.P99 = pct(0.5), pct(0.9), pct(0.99)
	return p
}

// StoreLatency returns the store's latencies per second from from to to.
func (r *Recorder) StoreLatency(from, to int64) []LatencyPoint {
	pts := r.store.Range("store", from, to)
	out := make([]LatencyPoint, len(pts))
	for i, p := range pts {
		out[i] = LatencyOf(p.Second, p.Counts)
	}
	return out
}
