package insight

import (
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/engine"
)

// Recorder counts the engine's decisions for the dashboard: per second,
// by tenant and by policy, over the last hour, and the heaviest keys of
// each policy by hits and by denials. It implements engine.Observer and
// engine.KeyObserver; its memory is bounded by its options whatever the
// traffic.
type Recorder struct {
	now                   func() time.Time
	tenants               *Series
	policies              *Series
	store                 *Series // latencies, one label
	k                     int
	maxPol                int
	span                  time.Duration
	sampled, sampleEvents int

	mu     sync.Mutex
	sketch map[string]*policySketch
}

type policySketch struct {
	hits, denials *TopK
	sample        *KeySample // nil past the policies sampled
}

// Kinds of a Recorder's series: the engine's outcomes.
const Kinds = int(engine.FailedClosed) + 1

// RecorderOptions bound a Recorder. Zero fields take the defaults.
type RecorderOptions struct {
	Span     time.Duration // default 1h
	Tenants  int           // tenants with a series of their own; default 1000
	Policies int           // policies with series and sketches of their own; default 256
	TopK     int           // keys kept per policy sketch; default 100
	// Sampled is how many policies keep a sample of whole keys for trying
	// a limit (default 32), each of about SampleEvents decisions (default
	// 20,000): 16 bytes each.
	Sampled      int
	SampleEvents int
	Now          func() time.Time
}

// NewRecorder returns a Recorder.
func NewRecorder(o RecorderOptions) *Recorder {
	if o.Span <= 0 {
		o.Span = time.Hour
	}
	if o.Tenants <= 0 {
		o.Tenants = 1000
	}
	if o.Policies <= 0 {
		o.Policies = 256
	}
	if o.TopK <= 0 {
		o.TopK = 100
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Sampled <= 0 {
		o.Sampled = 32
	}
	if o.SampleEvents <= 0 {
		o.SampleEvents = 20_000
	}
	return &Recorder{
		now: o.Now, k: o.TopK, maxPol: o.Policies, span: o.Span, sampled: o.Sampled, sampleEvents: o.SampleEvents,
		tenants:  NewSeries(o.Span, Kinds, o.Tenants),
		policies: NewSeries(o.Span, Kinds, o.Policies),
		store:    NewSeries(o.Span, latencyBuckets, 1),
		sketch:   map[string]*policySketch{},
	}
}

var (
	_ engine.Observer    = (*Recorder)(nil)
	_ engine.KeyObserver = (*Recorder)(nil)
)

// Decided implements engine.Observer: DecidedKey counts.
func (r *Recorder) Decided(string, engine.Outcome) {}

// StoreDone implements engine.Observer: it counts the call's latency.
func (r *Recorder) StoreDone(d time.Duration, _ error) {
	r.store.Add(r.now(), "store", latencyBucket(d), 1)
}

// DecidedKey implements engine.KeyObserver.
func (r *Recorder) DecidedKey(tenant string, c *sluice.Check, hits int64, o engine.Outcome) {
	now := r.now()
	r.tenants.Add(now, tenant, int(o), 1)
	r.policies.Add(now, c.Policy.Name, int(o), 1)
	key := keyID(tenant, c.Key) // one string for the sketches and the sample
	// r.mu is held for the sketches alone: every decision takes it.
	r.mu.Lock()
	ps := r.sketch[c.Policy.Name]
	if ps == nil {
		if len(r.sketch) >= r.maxPol {
			r.mu.Unlock()
			return
		}
		ps = &policySketch{hits: NewTopK(r.k), denials: NewTopK(r.k)}
		if len(r.sketch) < r.sampled {
			ps.sample = NewKeySample(r.span, r.sampleEvents)
		}
		r.sketch[c.Policy.Name] = ps
	}
	ps.hits.Add(key, max(hits, 1))
	if o == engine.Denied || o == engine.Penalised {
		ps.denials.Add(key, 1)
	}
	r.mu.Unlock()
	if ps.sample != nil { // set once, and safe for concurrent use
		ps.sample.add(now, key, tenant, c.Key, max(hits, 1))
	}
}

// Tenant returns tenant's counts per second from from to to.
func (r *Recorder) Tenant(tenant string, from, to int64) []Point {
	return r.tenants.Range(tenant, from, to)
}

// Policy returns a policy's counts per second, over all tenants.
func (r *Recorder) Policy(policy string, from, to int64) []Point {
	return r.policies.Range(policy, from, to)
}

// Tenants and Policies return the labels counted.
func (r *Recorder) Tenants() []string  { return r.tenants.Labels() }
func (r *Recorder) Policies() []string { return r.policies.Labels() }

// KeyCount is a heavy key of a policy: its tenant and key, and its count
// with the most it may overestimate by.
type KeyCount struct {
	Tenant string `json:"tenant"`
	Key    string `json:"key"`
	Count  int64  `json:"count"`
	Err    int64  `json:"error"`
}

// Top is a policy's heaviest keys: by hits and by denials, with each
// sketch's bound (a key heavier than it is sure to be listed, and no count
// is over by more).
type Top struct {
	Policy       string     `json:"policy"`
	Hits         []KeyCount `json:"hits"`
	HitsBound    int64      `json:"hitsBound"`
	Denials      []KeyCount `json:"denials"`
	DenialsBound int64      `json:"denialsBound"`
}

// TopKeys returns policy's n heaviest keys; only tenant's if tenant is
// not empty (a tenant sees its own keys among the policy's heaviest).
func (r *Recorder) TopKeys(policy, tenant string, n int) Top {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := Top{Policy: policy, Hits: []KeyCount{}, Denials: []KeyCount{}}
	ps := r.sketch[policy]
	if ps == nil {
		return t
	}
	pick := func(sk *TopK) []KeyCount {
		out := []KeyCount{}
		for _, it := range sk.Top(r.k) {
			tn, key, _ := strings.Cut(it.Key, "\x00")
			if tenant != "" && tn != tenant {
				continue
			}
			if len(out) == n {
				break
			}
			out = append(out, KeyCount{tn, key, it.Count, it.Err})
		}
		return out
	}
	t.Hits, t.HitsBound = pick(ps.hits), ps.hits.Bound()
	t.Denials, t.DenialsBound = pick(ps.denials), ps.denials.Bound()
	return t
}

// Try replays policy p on the last seconds of the sampled traffic of the
// policy of the same name (KeySample.Try), tenant's keys only if tenant is
// not empty. ok is false if that policy has no sample.
func (r *Recorder) Try(p *sluice.Policy, tenant string, seconds int, top int) (Tried, bool) {
	r.mu.Lock()
	ps := r.sketch[p.Name]
	r.mu.Unlock()
	if ps == nil || ps.sample == nil {
		return Tried{}, false
	}
	return ps.sample.Try(p, tenant, r.now().Add(-time.Duration(seconds)*time.Second), top), true
}
