package metrics

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/engine"
)

// Decisions are the engine's metrics. It implements engine.Observer and
// prometheus.Collector, and is safe for concurrent use.
//
//	sluice_decisions_total{policy, outcome}     decisions by policy and outcome
//	                                            (allowed, denied, penalised,
//	                                            shadow_denied, failed_open,
//	                                            failed_closed)
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
	// counted holds sluice_decisions_total's counters by policy label
	// (*outcomeCounters), each made on its first decision, as
	// WithLabelValues would: found without hashing the labels.
	counted sync.Map
}

// outcomeCounters are a policy label's decision counters, by outcome.
type outcomeCounters [engine.FailedClosed + 1]atomic.Pointer[prometheus.Counter]

var (
	_ engine.Observer      = (*Decisions)(nil)
	_ prometheus.Collector = (*Decisions)(nil)
)

// NewDecisions returns the engine's metrics. known reports whether a
// policy name is a configured one; others (inline policies, whose names
// clients choose) are counted under "inline", so that clients cannot grow
// the label set.
func NewDecisions(known func(policy string) bool) *Decisions {
	d := &Decisions{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_decisions_total", Help: "Decisions by policy and outcome.",
		}, []string{"policy", "outcome"}),
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
	return d
}

// Decided implements engine.Observer.
func (d *Decisions) Decided(policy string, o engine.Outcome) {
	if d.known != nil && !d.known(policy) {
		policy = "inline"
	}
	if o > engine.FailedClosed {
		d.decisions.WithLabelValues(policy, o.String()).Inc()
		return
	}
	v, ok := d.counted.Load(policy)
	if !ok {
		v, _ = d.counted.LoadOrStore(policy, new(outcomeCounters))
	}
	cp := &v.(*outcomeCounters)[o]
	c := cp.Load()
	if c == nil {
		counter := d.decisions.WithLabelValues(policy, o.String())
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
