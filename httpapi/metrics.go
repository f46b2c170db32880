package httpapi

import (
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicehq/sluice/engine"
)

// Metrics are Sluice's Prometheus metrics. It implements engine.Observer.
//
//	sluice_decisions_total{policy, outcome}     decisions by policy and outcome
//	                                            (allowed, denied, penalised,
//	                                            shadow_denied, failed_open,
//	                                            failed_closed)
//	sluice_store_seconds                        store operation latency
//	sluice_store_errors_total                   failed store operations
//	sluice_config_reloads_total{result}         reloads, ok or rejected
//	                                            (both present from the start)
//
// plus the Go runtime's and the process's (process_cpu_seconds_total,
// process_resident_memory_bytes, ...).
type Metrics struct {
	reg       *prometheus.Registry
	decisions *prometheus.CounterVec
	store     prometheus.Histogram
	storeErrs prometheus.Counter
	reloads   *prometheus.CounterVec
	known     func(policy string) bool
	gw        *gatewayMetrics
	// counted holds sluice_decisions_total's counters by policy label
	// (*outcomeCounters), each made on its first decision, as
	// WithLabelValues would: found without hashing the labels.
	counted sync.Map
}

// outcomeCounters are a policy label's decision counters, by outcome.
type outcomeCounters [engine.FailedClosed + 1]atomic.Pointer[prometheus.Counter]

var _ engine.Observer = (*Metrics)(nil)

// NewMetrics returns the metrics. known reports whether a policy name is a
// configured one; others (inline policies, whose names clients choose) are
// counted under "inline", so that clients cannot grow the label set.
func NewMetrics(known func(policy string) bool) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
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
		gw:    newGatewayMetrics(),
	}
	// Both results exist from the start, at 0, so that a rate or an
	// alert on rejected reloads has a series before the first reload.
	for _, result := range []string{"ok", "rejected"} {
		m.reloads.WithLabelValues(result)
	}
	m.reg.MustRegister(m.decisions, m.store, m.storeErrs, m.reloads,
		m.gw.connects, m.gw.messages, m.gw.closes, m.gw.wait, m.gw.fanout,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Decided implements engine.Observer.
func (m *Metrics) Decided(policy string, o engine.Outcome) {
	if m.known != nil && !m.known(policy) {
		policy = "inline"
	}
	if o > engine.FailedClosed {
		m.decisions.WithLabelValues(policy, o.String()).Inc()
		return
	}
	v, ok := m.counted.Load(policy)
	if !ok {
		v, _ = m.counted.LoadOrStore(policy, new(outcomeCounters))
	}
	cp := &v.(*outcomeCounters)[o]
	c := cp.Load()
	if c == nil {
		counter := m.decisions.WithLabelValues(policy, o.String())
		c = &counter
		cp.Store(c)
	}
	(*c).Inc()
}

// StoreDone implements engine.Observer.
func (m *Metrics) StoreDone(d time.Duration, err error) {
	m.store.Observe(d.Seconds())
	if err != nil {
		m.storeErrs.Inc()
	}
}

// ConfigReloaded counts a reload attempt.
func (m *Metrics) ConfigReloaded(ok bool) {
	result := "ok"
	if !ok {
		result = "rejected"
	}
	m.reloads.WithLabelValues(result).Inc()
}

// Register adds a collector of the wiring's, such as a store's counts.
func (m *Metrics) Register(c prometheus.Collector) error { return m.reg.Register(c) }

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}
