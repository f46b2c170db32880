package algo

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// Each Fuzz target drives one algorithm with a sequence of requests decoded
// from the fuzzer's bytes and holds every decision to the algorithm's naive
// reference model (model_test.go). The seed corpus runs in `go test`; `make
// fuzz` explores further.

// t0 is an arbitrary instant, not aligned to anything; runs stop at tEnd,
// about 60 years later.
const (
	t0   = int64(1_763_700_000_123_456_789)
	tEnd = t0 + 2e18
)

// run decodes ops two bytes at a time: the first moves the clock, the
// second is the request's hits (or, for leases, an action).
func run(t *testing.T, p *sluice.Policy, ops []byte) {
	if len(ops) > 2000 {
		ops = ops[:2000]
	}
	c := newChecker(t, p, t0)
	now := t0
	span := int64(p.Window)
	if p.Algorithm == sluice.Concurrency {
		span = int64(p.EffectiveLeaseTTL())
	}
	if p.Calendar == sluice.Month {
		span = int64(24 * time.Hour)
	}
	for i := 0; i+1 < len(ops); i += 2 {
		a, b := ops[i], ops[i+1]
		if now += step(a, span); now > tEnd {
			return // year-long windows: stop before the clock nears int64's end
		}
		if p.Algorithm == sluice.Concurrency && b >= 200 {
			c.lease(now, int(b), b%2 == 0)
			continue
		}
		c.decide(now, hits(b, Capacity(p)))
	}
}

// step turns a byte into a clock step: a few nanoseconds (to probe exact
// boundaries), or a fraction of span from 0 to about 2.5 spans.
func step(a byte, span int64) int64 {
	if a&0x80 != 0 {
		return int64(a & 0x7f)
	}
	return int64(a) * span / 50
}

// hits turns a byte into a request's hits: mostly small, sometimes the whole
// capacity or one more than it.
func hits(b byte, capacity int64) int64 {
	switch {
	case b == 199:
		return capacity + 1
	case b == 198:
		return capacity
	case capacity < 20:
		return int64(b) % (capacity + 1)
	}
	return int64(b) % 8
}

// policyFrom makes a policy from fuzz input: mostly small limits and
// windows, where the algorithms' arithmetic is easy to follow, and, when
// limit's or window's top bits say so, the extremes Policy.Validate allows
// (limits up to MaxLimit, windows up to MaxWindow, the deepest buckets),
// where it overflows if anywhere. A policy Validate refuses is nil.
func policyFrom(alg sluice.Algorithm, limit uint16, window uint32, extra uint8) *sluice.Policy {
	p := &sluice.Policy{
		Name:      "fuzz",
		Algorithm: alg,
		Limit:     1 + int64(limit)%50,
		Window:    time.Millisecond + time.Duration(window%100_000)*time.Millisecond,
	}
	if limit >= 0xF000 {
		p.Limit = sluice.MaxLimit - int64(limit&0xFF)
	}
	if window >= 0xF000_0000 {
		p.Window = sluice.MaxWindow - time.Duration(window&0xFFFF)*time.Second
	}
	switch alg {
	case sluice.SlidingLog:
		p.Limit = 1 + int64(limit)%sluice.MaxLogLimit
	case sluice.TokenBucket:
		p.Burst = int64(extra) % 20 // 0 means Limit
		if extra >= 240 {
			// As deep as the window allows, and one more, which Validate
			// refuses.
			t := (int64(p.Window) + p.Limit - 1) / p.Limit
			p.Burst = min(sluice.MaxLimit, int64(4*sluice.MaxWindow)/t+int64(extra&1))
		}
	case sluice.Concurrency:
		p.Limit = min(p.Limit, sluice.MaxLogLimit)
		p.LeaseTTL = time.Millisecond + time.Duration(window%10_000)*time.Millisecond
	case sluice.Quota:
		p.Buckets = 1 + int(extra)%12
		p.Window = time.Duration(p.Buckets) * (time.Millisecond + time.Duration(window%100_000)*time.Millisecond)
		if window >= 0xF000_0000 {
			size := sluice.MaxWindow / time.Duration(p.Buckets)
			p.Window = time.Duration(p.Buckets) * (size - size%time.Millisecond)
		}
		if extra >= 250 {
			p.Calendar = sluice.Month
		}
	}
	if p.Validate() != nil {
		return nil
	}
	return p
}

func fuzz(f *testing.F, alg sluice.Algorithm) {
	f.Add(uint16(4), uint32(1000), uint8(0), []byte{0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 10, 1, 50, 2, 130, 3})
	f.Add(uint16(9), uint32(59_999), uint8(3), []byte{1, 10, 2, 199, 49, 198, 51, 1, 255, 1, 129, 1, 0, 0, 25, 5})
	f.Add(uint16(0), uint32(0), uint8(1), []byte{0, 1, 0, 1, 128, 1, 129, 1, 200, 201, 0, 202, 1, 203})
	f.Add(uint16(30), uint32(7), uint8(251), []byte{3, 3, 3, 3, 3, 3, 3, 3, 40, 7, 40, 7, 200, 7, 0, 210, 0, 211})
	f.Add(uint16(0xF00F), uint32(0xF000_0001), uint8(0), []byte{0, 199, 1, 198, 40, 1, 0, 198, 128, 5})
	f.Add(uint16(0xFFFF), uint32(7), uint8(240), []byte{0, 198, 0, 1, 0, 199, 25, 1, 129, 1})
	f.Add(uint16(3), uint32(0xFFFF_FFFF), uint8(241), []byte{0, 198, 0, 1, 50, 1, 100, 198})
	f.Fuzz(func(t *testing.T, limit uint16, window uint32, extra uint8, ops []byte) {
		if p := policyFrom(alg, limit, window, extra); p != nil {
			run(t, p, ops)
		}
	})
}

func FuzzFixedWindow(f *testing.F)   { fuzz(f, sluice.FixedWindow) }
func FuzzSlidingWindow(f *testing.F) { fuzz(f, sluice.SlidingWindow) }
func FuzzSlidingLog(f *testing.F)    { fuzz(f, sluice.SlidingLog) }
func FuzzTokenBucket(f *testing.F)   { fuzz(f, sluice.TokenBucket) }
func FuzzConcurrency(f *testing.F)   { fuzz(f, sluice.Concurrency) }
func FuzzQuota(f *testing.F)         { fuzz(f, sluice.Quota) }

// TestAgainstModel is the property test run by every `go test`: many random
// request sequences per algorithm, from a fixed seed so that a failure
// reproduces, each held to the reference model as the fuzz targets are.
func TestAgainstModel(t *testing.T) {
	rounds := 300
	if testing.Short() {
		rounds = 30
	}
	for _, alg := range sluice.Algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(alg), 2026))
			for range rounds {
				ops := make([]byte, 2*(1+r.IntN(150)))
				for i := range ops {
					ops[i] = byte(r.Uint32())
				}
				if p := policyFrom(alg, uint16(r.Uint32()), r.Uint32(), uint8(r.Uint32())); p != nil {
					run(t, p, ops)
				}
			}
		})
	}
}
