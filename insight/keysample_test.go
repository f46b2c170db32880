package insight

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
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
				all, part := NewKeySample(time.Hour, len(ds)), NewKeySample(time.Hour, 40_000)
				for _, d := range ds {
					all.Add(d.at, "acme", d.key, d.hits)
					part.Add(d.at, "acme", d.key, d.hits)
				}
				if whole := all.Try(&p, "", time.Time{}, 5); whole.Rate != 1 || whole.Denied != float64(want) || whole.StdErr != 0 || whole.Events != len(ds) {
					t.Errorf("seed %d, whole sample: %+v, want rate 1 and exactly %d denied", seed, whole, want)
				}
				got := part.Try(&p, "", time.Time{}, 5)
				if got.Rate >= 1 || got.Events > 40_000 {
					t.Fatalf("seed %d: the small sample kept rate %v, %d events: it did not sample", seed, got.Rate, got.Events)
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
