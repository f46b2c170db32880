package insight

import (
	"cmp"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/engine"
)

// Recorder counts the engine's decisions for the dashboard: per second,
// by tenant and by policy, over the last hour, and the heaviest keys of
// each policy by hits and by denials. It implements engine.Observer and
// engine.KeyObserver; its memory is bounded by its options whatever the
// traffic, and no tenant can take another's share of it:
//
//   - A configured policy (RecorderOptions.Configured) always has its
//     series and sketches: the operator's configuration bounds how many
//     there are.
//   - A policy a tenant invents (an inline check's) is the tenant's own:
//     its sketches hold that tenant's keys only, and each tenant holds at
//     most TenantPolicies of them, of Policies over all tenants. Past
//     either bound its decisions count under Other, and take nothing of
//     anybody else's. A sketch with no decision over the span gives its
//     slot up.
//   - Forget drops a deleted tenant's counts and keys; the readers take
//     the tenant's creation time (since), so that a tenant created again
//     under the same id never reads the keys of the one before it, even
//     on a node that was not told of the deletion.
type Recorder struct {
	now                   func() time.Time
	configured            func(policy string) bool
	tenants               *Series
	policies              *Series
	store                 *Series // latencies, one label
	k                     int
	maxInvented, perTen   int
	span                  time.Duration
	sampled, sampleEvents int
	hist                  *history // counts per minute, folded from the seconds

	// sketches is read by every decision without a lock: an immutable copy
	// of sketch, replaced whole under mu when a sketch comes or goes.
	sketches atomic.Pointer[map[sketchID]*policySketch]

	mu       sync.Mutex
	sketch   map[sketchID]*policySketch // the writers' copy
	invented map[string]int             // a tenant's invented policies with sketches
	named    map[string]int             // an invented name's tenants with sketches: its policy series lives while one does
	nInv     int                        // invented policies with sketches, over all tenants
	samples  [2]int                     // sketches with a sample: configured, invented
	swept    int64                      // the second of the last sweep for idle sketches
}

// sketchID names a policy's sketches: a configured policy's by its name
// alone, an invented one's by its tenant too.
type sketchID struct{ tenant, policy string }

type policySketch struct {
	mu            sync.Mutex // guards hits and denials: one policy's, or one tenant's invented one's
	hits, denials *TopK
	sample        *KeySample   // nil past the policies sampled; safe for concurrent use
	born          int64        // unix ns: an invented policy's keys are of its tenant as of then
	last          atomic.Int64 // the latest second of a decision
}

func (id sketchID) invented() bool { return id.tenant != "" }

// Kinds of a Recorder's series: the engine's outcomes.
const Kinds = int(engine.FailedClosed) + 1

// RecorderOptions bound a Recorder. Zero fields take the defaults.
type RecorderOptions struct {
	Span    time.Duration // default 1h
	Tenants int           // tenants with a series of their own; default 1000
	// Configured reports whether a policy is the operator's (of the
	// configuration): those always have their series and sketches. Nil:
	// every policy but an inline check's (sluice.SpaceInline).
	Configured func(policy string) bool
	// Policies bounds the policies tenants invent (inline checks) with
	// series and sketches of their own, over all tenants (default 256);
	// TenantPolicies those of one tenant (default 16).
	Policies       int
	TenantPolicies int
	TopK           int // keys kept per policy sketch; default 100
	// Sampled is how many policies keep a sample of whole keys for trying
	// a limit (default 32): configured policies first come, and a quarter
	// as many invented ones, one a tenant. Each sample holds about
	// SampleEvents decisions (default 20,000) in at most 64 bytes a
	// decision of it (NewKeySample: 1.28 MB at the default, about 51 MB
	// for the 40 samples).
	Sampled      int
	SampleEvents int
	// History keeps the counts per minute longer than the Span, and
	// across restarts with a file (HistoryOptions).
	History HistoryOptions
	Now     func() time.Time
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
	if o.TenantPolicies <= 0 {
		o.TenantPolicies = 16
	}
	if o.History.TenantPolicies <= 0 {
		o.History.TenantPolicies = o.TenantPolicies
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
	r := &Recorder{
		now: o.Now, configured: o.Configured, k: o.TopK, maxInvented: o.Policies, perTen: o.TenantPolicies,
		span: o.Span, sampled: o.Sampled, sampleEvents: o.SampleEvents,
		tenants:  NewSeries(o.Span, Kinds, o.Tenants),
		policies: NewSeries(o.Span, Kinds, o.Policies),
		store:    NewSeries(o.Span, latencyBuckets, 1),
		sketch:   map[sketchID]*policySketch{},
		invented: map[string]int{},
		named:    map[string]int{},
		hist:     newHistory(o.History),
	}
	r.sketches.Store(&map[sketchID]*policySketch{})
	return r
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
	// The key's id, for the sketches and the sample, on the stack: each
	// copies it only if the key is new to it.
	var buf [128]byte
	key := append(append(append(buf[:0], tenant...), 0), c.Key...)
	// A decision takes one lock of the recorder's, its sketch's: shared
	// by the tenants of a configured policy, held for two sketch updates.
	ps, id := r.lookup(tenant, c)
	if ps == nil {
		r.mu.Lock()
		ps, id = r.sketchLocked(now, tenant, c)
		r.mu.Unlock()
	}
	if ps == nil {
		r.policies.AddReserved(now, Other, int(o), 1)
		return
	}
	if sec := now.Unix(); ps.last.Load() < sec {
		ps.last.Store(sec) // a racing older second may win: a second off the hour's sweep is harmless
	}
	ns := now.UnixNano()
	ps.mu.Lock()
	ps.hits.add(key, max(hits, 1), ns)
	if Refused(o) {
		ps.denials.add(key, 1, ns)
	}
	ps.mu.Unlock()
	// An invented name's row lives while a tenant holds a sketch of it
	// (named): the bound on sketches bounds the rows.
	r.policies.AddReserved(now, id.policy, int(o), 1)
	if ps.sample != nil { // set once, and safe for concurrent use
		ps.sample.add(now, key, len(tenant), max(hits, 1))
	}
}

// lookup returns the sketches of c's policy for tenant, if they exist,
// without a lock.
func (r *Recorder) lookup(tenant string, c *sluice.Check) (*policySketch, sketchID) {
	m := *r.sketches.Load()
	id := sketchID{policy: c.Policy.Name}
	if ps := m[id]; ps != nil {
		return ps, id
	}
	if r.invents(c) {
		id.tenant = tenant
		return m[id], id
	}
	return nil, id
}

// invents reports whether c's policy is its tenant's invention: an
// inline check's, or one the configuration does not name.
func (r *Recorder) invents(c *sluice.Check) bool {
	return c.Space == sluice.SpaceInline || r.configured != nil && !r.configured(c.Policy.Name)
}

// publishLocked lets the decisions see the writers' copy of the
// sketches. r.mu is held.
func (r *Recorder) publishLocked() {
	m := maps.Clone(r.sketch)
	r.sketches.Store(&m)
}

// sketchLocked returns the sketches of c's policy for tenant, made if
// there is room; nil past an invented policy's bounds. r.mu is held.
func (r *Recorder) sketchLocked(now time.Time, tenant string, c *sluice.Check) (*policySketch, sketchID) {
	sec := now.Unix()
	id := sketchID{policy: c.Policy.Name}
	if ps := r.sketch[id]; ps != nil {
		return ps, id // made since the lookup
	}
	if r.invents(c) {
		id.tenant = tenant
		if ps := r.sketch[id]; ps != nil {
			return ps, id
		}
		if r.invented[tenant] >= r.perTen || r.nInv >= r.maxInvented {
			r.sweepLocked(sec)
			if r.invented[tenant] >= r.perTen || r.nInv >= r.maxInvented {
				return nil, id
			}
		}
		r.invented[tenant]++
		r.named[id.policy]++
		r.nInv++
	}
	ps := &policySketch{hits: NewTopK(r.k), denials: NewTopK(r.k), born: now.UnixNano()}
	ps.last.Store(sec)
	if r.sampleFreeLocked(id) {
		ps.sample = NewKeySample(r.span, r.sampleEvents)
		r.samples[b2i(id.invented())]++
	}
	r.sketch[id] = ps
	r.publishLocked()
	return ps, id
}

// sampleFreeLocked reports whether a new sketch of id may keep a sample:
// configured policies up to Sampled, invented ones up to a quarter of
// that, one a tenant. r.mu is held.
func (r *Recorder) sampleFreeLocked(id sketchID) bool {
	if !id.invented() {
		return r.samples[0] < r.sampled
	}
	if r.samples[1] >= max(r.sampled/4, 1) {
		return false
	}
	for other, ps := range r.sketch {
		if other.tenant == id.tenant && ps.sample != nil {
			return false
		}
	}
	return true
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// sweepLocked drops the sketches with no decision over the span, at most
// once a second. r.mu is held.
func (r *Recorder) sweepLocked(sec int64) {
	if r.swept == sec {
		return
	}
	r.swept = sec
	idle := sec - int64(r.span/time.Second)
	dropped := false
	for id, ps := range r.sketch {
		if ps.last.Load() <= idle {
			r.dropLocked(id, ps)
			dropped = true
		}
	}
	if dropped {
		r.publishLocked()
	}
}

// dropLocked drops one policy's sketches from the writers' copy; the
// caller publishes it. r.mu is held.
func (r *Recorder) dropLocked(id sketchID, ps *policySketch) {
	delete(r.sketch, id)
	if ps.sample != nil {
		r.samples[b2i(id.invented())]--
	}
	if !id.invented() {
		return
	}
	r.nInv--
	if r.invented[id.tenant]--; r.invented[id.tenant] <= 0 {
		delete(r.invented, id.tenant)
	}
	if r.named[id.policy]--; r.named[id.policy] <= 0 {
		delete(r.named, id.policy)
		r.policies.Forget(id.policy)
	}
}

// Forget drops what the Recorder holds of tenant (deleted): its series,
// its invented policies, its keys in the configured policies' sketches
// and samples, and its minutes and its invented policies' (from the
// history's file at its next write).
func (r *Recorder) Forget(tenant string) {
	r.tenants.Forget(tenant)
	r.forgetSketches(tenant)
	// After its sketches: a fold now no longer finds the tenant's
	// invented policies, and one under way has ended.
	r.hist.forget(tenant)
}

func (r *Recorder) forgetSketches(tenant string) {
	prefix := keyID(tenant, "")
	mine := func(it Item) bool { return strings.HasPrefix(it.Key, prefix) }
	r.mu.Lock()
	defer r.mu.Unlock()
	defer r.publishLocked()
	for id, ps := range r.sketch {
		if id.tenant == tenant {
			r.dropLocked(id, ps)
			continue
		}
		ps.mu.Lock()
		ps.hits.RemoveFunc(mine)
		ps.denials.RemoveFunc(mine)
		ps.mu.Unlock()
		if ps.sample != nil {
			ps.sample.Forget(tenant)
		}
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

// TopKeys returns policy's n heaviest keys: over every tenant if tenant is
// empty; else tenant's own, as of since (the tenant's creation: keys
// counted before it are an earlier tenant's of the same id, and are
// dropped).
func (r *Recorder) TopKeys(policy, tenant string, since time.Time, n int) Top {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := Top{Policy: policy, Hits: []KeyCount{}, Denials: []KeyCount{}}
	var sketches []*policySketch
	if tenant == "" {
		for id, ps := range r.sketch {
			if id.policy == policy {
				sketches = append(sketches, ps)
			}
		}
	} else {
		sketches = r.tenantSketchesLocked(policy, tenant, since)
	}
	prefix := keyID(tenant, "")
	stale := func(it Item) bool { return strings.HasPrefix(it.Key, prefix) && it.Since < since.UnixNano() }
	var hits, denials []KeyCount
	for _, ps := range sketches {
		ps.mu.Lock()
		if tenant != "" && !since.IsZero() {
			ps.hits.RemoveFunc(stale)
			ps.denials.RemoveFunc(stale)
		}
		hits = appendKeys(hits, ps.hits, tenant)
		denials = appendKeys(denials, ps.denials, tenant)
		t.HitsBound += ps.hits.Bound()
		t.DenialsBound += ps.denials.Bound()
		ps.mu.Unlock()
	}
	t.Hits, t.Denials = heaviest(hits, n), heaviest(denials, n)
	return t
}

// tenantSketchesLocked returns the sketches holding tenant's keys of
// policy: the configured policy's, or the tenant's own invented one,
// dropped if it was made before since. r.mu is held.
func (r *Recorder) tenantSketchesLocked(policy, tenant string, since time.Time) []*policySketch {
	if ps := r.sketch[sketchID{policy: policy}]; ps != nil {
		return []*policySketch{ps}
	}
	id := sketchID{tenant: tenant, policy: policy}
	ps := r.sketch[id]
	if ps == nil {
		return nil
	}
	if ps.born < since.UnixNano() {
		r.dropLocked(id, ps)
		r.publishLocked()
		return nil
	}
	return []*policySketch{ps}
}

// appendKeys adds sk's keys to out, only tenant's if tenant is not empty.
func appendKeys(out []KeyCount, sk *TopK, tenant string) []KeyCount {
	for _, it := range sk.Top(sk.k) {
		tn, key, _ := strings.Cut(it.Key, "\x00")
		if tenant != "" && tn != tenant {
			continue
		}
		out = append(out, KeyCount{tn, key, it.Count, it.Err})
	}
	return out
}

// heaviest returns keys' n most counted, most first.
func heaviest(keys []KeyCount, n int) []KeyCount {
	slices.SortFunc(keys, func(a, b KeyCount) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.Key, b.Key))
	})
	if keys == nil {
		return []KeyCount{}
	}
	return keys[:min(len(keys), max(n, 0))]
}

// Try replays policy p on the last seconds of the sampled traffic of the
// policy of the same name (KeySample.Try): over every tenant if tenant is
// empty (every tenant's sample of an invented name, summed), else
// tenant's keys since its creation (since). ok is false if that policy
// has no sample.
func (r *Recorder) Try(p *sluice.Policy, tenant string, since time.Time, seconds int, top int) (Tried, bool) {
	r.mu.Lock()
	var samples []*KeySample
	add := func(ps *policySketch) {
		if ps != nil && ps.sample != nil {
			samples = append(samples, ps.sample)
		}
	}
	switch {
	case tenant != "":
		for _, ps := range r.tenantSketchesLocked(p.Name, tenant, since) {
			add(ps)
		}
	case r.sketch[sketchID{policy: p.Name}] != nil:
		add(r.sketch[sketchID{policy: p.Name}])
	default:
		for id, ps := range r.sketch {
			if id.policy == p.Name {
				add(ps)
			}
		}
	}
	r.mu.Unlock()
	if len(samples) == 0 {
		return Tried{}, false
	}
	from := r.now().Add(-time.Duration(seconds) * time.Second)
	if since.After(from) {
		from = since
	}
	out := Tried{Rate: 1, Who: []KeyCount{}}
	var variance float64
	for _, s := range samples {
		t := s.Try(p, tenant, from, top)
		out.Rate = min(out.Rate, t.Rate)
		out.Keys += t.Keys
		out.Heavy += t.Heavy
		out.Events += t.Events
		out.Denied += t.Denied
		out.DeniedSampled += t.DeniedSampled
		variance += t.StdErr * t.StdErr // the samples are independent
		out.Who = append(out.Who, t.Who...)
	}
	out.StdErr = math.Sqrt(variance)
	out.Who = heaviest(out.Who, top)
	return out, true
}
