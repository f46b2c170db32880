package fairshare

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// readyAfter(now, m, n) is when n units may go after m are taken at now:
// what readyAt answers once they are, on random pacers and releases.
func TestPacerReadyAfter(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	compared, later := 0, 0
	for trial := range 5000 {
		p := newPacer(100, time.Second, 10, 10)
		now := t0
		for range r.IntN(300) {
			now = now.Add(time.Duration(r.IntN(30)) * time.Millisecond)
			p.expire(now)
			if n := 1 + r.Int64N(10); p.readyAt(now, n).Equal(now) {
				p.take(now, n)
			}
		}
		p.expire(now)
		m, n := 1+r.Int64N(10), 1+r.Int64N(10)
		if !p.readyAt(now, m).Equal(now) {
			continue
		}
		got := p.readyAfter(now, m, n)
		q := p
		q.log = slices.Clone(p.log)
		q.take(now, m)
		if want := q.readyAt(now, n); !got.Equal(want) {
			t.Fatalf("trial %d: readyAfter(%d, %d) = %v, want %v", trial, m, n, got.Sub(t0), want.Sub(t0))
		}
		compared++
		if got.After(p.readyAt(now, n)) {
			later++
		}
	}
	if compared < 1000 || later == 0 || later == compared {
		t.Errorf("compared %d pacers, %d of them put off by the m units: the cases are not varied enough", compared, later)
	}
}
