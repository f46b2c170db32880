package fairsim

import (
	"testing"
	"time"
)

// Sluice keeps the window bound and the upstream busy, and is far fairer
// than first come first served, for several seeds. The Jain target
// of 0.99 is not met yet (docs/benchmarks.md): the floors here are what the
// scheduler reaches today, second by second and over the whole run.
func TestSimSluiceTargets(t *testing.T) {
	for _, seed := range []uint64{0, 1, 42} {
		rep, err := Run(Config{Seed: seed, Duration: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		by := map[string]Result{}
		for _, r := range rep.Strategies {
			by[r.Strategy] = r
		}
		s, f := by["sluice"], by["fcfs"]
		if s.WindowsOver != 0 || s.MaxInWindow > rep.Rate {
			t.Errorf("seed %d: sluice granted %d in some 1s, %d aligned windows over", seed, s.MaxInWindow, s.WindowsOver)
		}
		if s.Utilisation < 0.98 {
			t.Errorf("seed %d: sluice utilisation %.3f, want >= 0.98", seed, s.Utilisation)
		}
		if s.Jain < 0.97 || s.JainRun < 0.95 {
			t.Errorf("seed %d: sluice Jain %.3f per second and %.3f over the run, want >= 0.97 and 0.95", seed, s.Jain, s.JainRun)
		}
		if f.Jain > s.Jain-0.3 {
			t.Errorf("seed %d: fcfs Jain %.3f not measurably below sluice's %.3f", seed, f.Jain, s.Jain)
		}
		if f.MaxInWindow <= rep.Rate {
			t.Errorf("seed %d: fcfs's token bucket never exceeded the quota in a sliding second", seed)
		}
	}
}

func TestSimDeterministic(t *testing.T) {
	a, _ := Run(Config{Seed: 7, Duration: 5 * time.Second})
	b, _ := Run(Config{Seed: 7, Duration: 5 * time.Second})
	for i := range a.Strategies {
		if a.Strategies[i] != b.Strategies[i] {
			t.Fatalf("seed 7 twice: %+v then %+v", a.Strategies[i], b.Strategies[i])
		}
	}
}
