package metrics

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/engine"
)

// Decisions are the engine's metrics. It implements engine.Observer and
// prometheus.Collector, and is safe for concurrent use.
//
//	sluice_decisions_total{policy, outcome, tenant}
//	                                            decisions by policy and outcome
//	                                            (allowed, denied, penalised,
//	                                            shadow_denied, failed_open,
//	                                            failed_closed), and by tenant
//	                                            if asked (NewDecisionsByTenant)
//	sluice_store_seconds                        store operation latency
//	sluice_store_errors_total                   failed store operations
//	sluice_config_reloads_total{result}         reloads, ok or rejected
//	                                            (both present from the start)
type Decisions struct {
	collectorSet // the metrics below, for prometheus.Collector
	decisions    *prometheus.CounterVec
	store        prometheus.Histogram
	storeErrs    prometheus.Counter
	reloads      *prometheus.CounterVec
	known        func(policy string) bool
	// counted holds sluice_decisions_total's counters by tenant and
	// policy label (a counterKey: *outcomeCounters), each made on its
	// first decision, as WithLabelValues would: found without hashing
	// the labels.
	counted sync.Map
	tenants tenantLabels
}

// counterKey is a series of sluice_decisions_total but its outcome.
type counterKey struct{ tenant, policy string }

// outcomeCounters are a policy label's decision counters, by outcome.
type outcomeCounters [engine.FailedClosed + 1]atomic.Pointer[prometheus.Counter]

var (
	_ engine.Observer      = (*Decisions)(nil)
	_ engine.KeyObserver   = (*Decisions)(nil)
	_ prometheus.Collector = (*Decisions)(nil)
)

// NewDecisions returns the engine's metrics. known reports whether a
// policy name is a configured one; others (inline policies, whose names
// clients choose) are counted under "inline", so that clients cannot grow
// the label set.
func NewDecisions(known func(policy string) bool) *Decisions {
	return NewDecisionsByTenant(known, 0)
}

// NewDecisionsByTenant returns the engine's metrics with the decisions
// labelled by tenant as well, for the first n tenants decided on; the
// rest count as "(other)", which no tenant id can be. Zero labels none,
// as NewDecisions: the series have no tenant label at all. Any tenant id
// a caller may name can take a place, as on an open server's /v1/check:
// the label set stays bounded at n+1, a deleted tenant's place is freed
// (ForgetTenant), and so is the place of a tenant with no decision for an
// hour or two (idleAfter), with its series, at a scrape or when another
// tenant asks for a place.
func NewDecisionsByTenant(known func(policy string) bool, n int) *Decisions {
	labels := []string{"policy", "outcome"}
	if n > 0 {
		labels = append(labels, "tenant")
	}
	d := &Decisions{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_decisions_total", Help: "Decisions by policy and outcome.",
		}, labels),
		store: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sluice_store_seconds", Help: "Latency of store operations.",
			Buckets: prometheus.ExponentialBuckets(1e-6, 4, 12), // 1µs to ~4s
		}),
		storeErrs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_store_errors_total", Help: "Store operations that failed.",
		}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_config_reloads_total", Help: "Configuration reloads by result.",
		}, []string{"result"}),
		known: known,
	}
	// Both results exist from the start, at 0, so that a rate or an
	// alert on rejected reloads has a series before the first reload.
	for _, result := range []string{"ok", "rejected"} {
		d.reloads.WithLabelValues(result)
	}
	d.collectorSet = collectorSet{d.decisions, d.store, d.storeErrs, d.reloads}
	d.tenants.drop = d.drop
	d.tenants.setMax(n)
	return d
}

// Collect implements prometheus.Collector: it frees the tenants' places
// idle for long (tenantLabels.sweep) before collecting.
func (d *Decisions) Collect(ch chan<- prometheus.Metric) {
	d.tenants.sweep()
	d.collectorSet.Collect(ch)
}

// ForgetTenant deletes a deleted tenant's series and frees its label, so
// that a tenant created again under its id starts from nothing. A
// decision of the tenant racing the deletion may count once more, under
// a series that then stays.
func (d *Decisions) ForgetTenant(id string) {
	if d.tenants.forget(id) {
		d.drop(id)
	}
}

// drop deletes tenant id's series. A decision of the tenant racing it may
// count once more, under a series that then stays until the tenant's
// label is freed again.
func (d *Decisions) drop(id string) {
	d.counted.Range(func(k, _ any) bool {
		if k.(counterKey).tenant == id {
			d.counted.Delete(k)
		}
		return true
	})
	d.decisions.DeletePartialMatch(prometheus.Labels{"tenant": id})
}

// Decided implements engine.Observer: it counts the decision, unless
// tenant labels are on, when DecidedKey does.
func (d *Decisions) Decided(policy string, o engine.Outcome) {
	if d.tenants.max.Load() != 0 {
		return
	}
	d.count("", policy, o)
}

// DecidedKey implements engine.KeyObserver: with tenant labels on, it
// counts the decision under its tenant's label.
func (d *Decisions) DecidedKey(tenant string, c *sluice.Check, _ int64, o engine.Outcome) {
	if d.tenants.max.Load() == 0 {
		return
	}
	d.count(d.tenants.label(tenant, true), c.Policy.Name, o)
}

func (d *Decisions) count(tenant, policy string, o engine.Outcome) {
	if d.known != nil && !d.known(policy) {
		policy = "inline"
	}
	if o > engine.FailedClosed {
		d.series(tenant, policy, o).Inc()
		return
	}
	k := counterKey{tenant, policy}
	v, ok := d.counted.Load(k)
	if !ok {
		v, _ = d.counted.LoadOrStore(k, new(outcomeCounters))
	}
	cp := &v.(*outcomeCounters)[o]
	c := cp.Load()
	if c == nil {
		counter := d.series(tenant, policy, o)
		c = &counter
		cp.Store(c)
	}
	(*c).Inc()
}

// StoreDone implements engine.Observer.
func (d *Decisions) StoreDone(took time.Duration, err error) {
	d.store.Observe(took.Seconds())
	if err != nil {
		d.storeErrs.Inc()
	}
}

// ConfigReloaded counts a reload attempt.
func (d *Decisions) ConfigReloaded(ok bool) {
	result := "ok"
	if !ok {
		result = "rejected"
	}
	d.reloads.WithLabelValues(result).Inc()
}

// series is the counter of tenant's (if labelled), policy's and o's
// decisions.
func (d *Decisions) series(tenant, policy string, o engine.Outcome) prometheus.Counter {
	if d.tenants.max.Load() == 0 {
		return d.decisions.WithLabelValues(policy, o.String())
	}
	return d.decisions.WithLabelValues(policy, o.String(), tenant)
}
