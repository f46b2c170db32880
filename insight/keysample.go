package insight

import (
	"cmp"
	"hash/maphash"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
)

// KeySample keeps every decision of a sample of a policy's keys over the
// last span, in about max events, for trying a limit on past traffic:
//
//   - A key is kept whole or not at all: a sample of decisions would break
//     each key's windows, and a limit replayed on a whole key decides as
//     it would have.
//   - It starts with every key (p = 1). Over max, it halves p, keeping a
//     light key only if its hash falls under p, and keeping the heaviest
//     keys (by events, the top heavyKeys) whatever their hash: on skewed
//     traffic a few keys hold most of the denials, and an estimate that
//     missed them would be far off whatever its stated error. If the
//     heaviest keys alone hold more than max, they are all it keeps: max
//     must be sized to them (a key's events are not coarsened, yet).
//
// Try replays a policy on the sample: the heavy keys' denials exactly,
// plus the light keys' over p (Horvitz-Thompson), with the standard error
// of the light part. It is safe for concurrent use.
type KeySample struct {
	span time.Duration
	max  int

	mu    sync.Mutex
	seed  maphash.Seed
	shift uint // light keys are kept with p = 2^-shift
	keys  map[string]*keyLog
	n     int // events kept
}

// heavyKeys is how many of the heaviest keys a KeySample keeps whole
// whatever its p.
const heavyKeys = 32

type keyLog struct {
	hash   uint64
	tenant string
	key    string
	heavy  bool
	events []event
}

type event struct {
	t    int64 // unix ns
	hits int64
}

// NewKeySample returns a sample of span holding about max events (more
// only if the heaviest keys alone hold more).
func NewKeySample(span time.Duration, max int) *KeySample {
	return &KeySample{span: span, max: max, seed: maphash.MakeSeed(), keys: map[string]*keyLog{}}
}

// kept reports whether a light key of hash h is in the sample at shift.
func kept(h uint64, shift uint) bool { return shift == 0 || h>>(64-shift) == 0 }

// Add records a decision of hits for tenant's key at now.
func (s *KeySample) Add(now time.Time, tenant, key string, hits int64) {
	s.add(now, keyID(tenant, key), tenant, key, hits)
}

// keyID names tenant's key in a sketch or a sample.
func keyID(tenant, key string) string { return tenant + "\x00" + key }

// add is Add with the key's id made once by the caller.
func (s *KeySample) add(now time.Time, id, tenant, key string, hits int64) {
	h := maphash.String(s.seed, id)
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.keys[id]
	if l == nil {
		if !kept(h, s.shift) {
			return
		}
		l = &keyLog{hash: h, tenant: tenant, key: key}
		s.keys[id] = l
	}
	t := now.UnixNano()
	old := 0
	for old < len(l.events) && t-l.events[old].t > int64(s.span) {
		old++
	}
	if old > 0 {
		l.events = slices.Delete(l.events, 0, old)
		s.n -= old
	}
	l.events = append(l.events, event{t, max(hits, 1)})
	s.n++
	if s.n > s.max {
		s.reduce()
	}
}

// reduce halves p, marks the heaviest keys as kept whatever their hash,
// and drops the light keys the new p leaves out, while over max and light
// keys remain to drop. s.mu is held.
func (s *KeySample) reduce() {
	for s.n > s.max && s.shift < 62 {
		logs := make([]*keyLog, 0, len(s.keys))
		for _, l := range s.keys {
			logs = append(logs, l)
		}
		slices.SortFunc(logs, func(a, b *keyLog) int { return cmp.Compare(len(b.events), len(a.events)) })
		for i, l := range logs {
			l.heavy = i < heavyKeys // a key no longer among them is light again
		}
		light := 0
		for _, l := range logs {
			if !l.heavy {
				light++
			}
		}
		if light == 0 {
			return // the heaviest keys alone are over max: keep them whole
		}
		s.shift++
		for id, l := range s.keys {
			if !l.heavy && !kept(l.hash, s.shift) {
				s.n -= len(l.events)
				delete(s.keys, id)
			}
		}
	}
}

// Tried is what a proposed policy would have done to the sampled traffic.
type Tried struct {
	// Rate is the share of light keys sampled (p); Keys and Events what
	// the sample holds (of the last span, since the time asked), Heavy
	// the keys held whatever p.
	Rate   float64 `json:"rate"`
	Keys   int     `json:"keys"`
	Heavy  int     `json:"heavyKeys"`
	Events int     `json:"events"`
	// Denied is the estimated decisions the policy would have denied over
	// all keys, and StdErr that estimate's standard error; DeniedSampled
	// the sample's own.
	Denied        float64 `json:"denied"`
	StdErr        float64 `json:"stdErr"`
	DeniedSampled int64   `json:"deniedSampled"`
	// Who are the sampled keys it would have denied most, most first.
	Who []KeyCount `json:"who"`
}

// Try replays p on the sampled decisions since from (each key's in order,
// through the algorithm as a store would decide them), only those of
// tenant if not empty, and estimates what it would have denied.
func (s *KeySample) Try(p *sluice.Policy, tenant string, from time.Time, top int) Tried {
	type logCopy struct {
		tenant, key string
		heavy       bool
		events      []event
	}
	s.mu.Lock()
	var logs []logCopy
	for _, l := range s.keys {
		if tenant == "" || l.tenant == tenant {
			logs = append(logs, logCopy{l.tenant, l.key, l.heavy, slices.Clone(l.events)})
		}
	}
	rate := math.Ldexp(1, -int(s.shift))
	s.mu.Unlock()

	out := Tried{Rate: rate, Who: []KeyCount{}}
	var lightSq float64
	for _, l := range logs {
		var st algo.State
		var d sluice.Decision
		var denied int64
		n := 0
		for _, e := range l.events {
			if e.t < from.UnixNano() {
				continue
			}
			n++
			algo.Update(p, &st, e.t, e.hits, &d)
			if !d.Allowed {
				denied++
			}
		}
		if n == 0 {
			continue
		}
		out.Keys++
		out.Events += n
		out.DeniedSampled += denied
		if l.heavy {
			out.Heavy++
			out.Denied += float64(denied)
		} else {
			out.Denied += float64(denied) / rate
			lightSq += float64(denied) * float64(denied)
		}
		if denied > 0 {
			out.Who = append(out.Who, KeyCount{Tenant: l.tenant, Key: l.key, Count: denied})
		}
	}
	// A light key is in the sample with probability p, independently (by
	// its hash): the variance of its part is (1-p)/p^2 times the sum of
	// the sampled light keys' squared denials.
	out.StdErr = math.Sqrt((1 - rate) / (rate * rate) * lightSq)
	slices.SortFunc(out.Who, func(a, b KeyCount) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.Key, b.Key))
	})
	out.Who = out.Who[:min(len(out.Who), max(top, 0))]
	return out
}
