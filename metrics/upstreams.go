package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/fairshare"
)

// Upstreams is the fair-share upstreams' metrics, one series of each per
// upstream the configuration names (Observer, Live). It implements
// prometheus.Collector and is safe for concurrent use.
//
//	sluice_upstream_grants_total{upstream}            requests granted
//	sluice_upstream_refusals_total{upstream, reason}  requests refused: estimate, expired, queue_full, cancelled, closed, invalid
//	sluice_upstream_wait_seconds{upstream}            how long granted requests waited
//	sluice_upstream_queue_depth{upstream}             requests waiting, read at the scrape
//	sluice_upstream_waiting_customers{upstream}       customers with a request waiting
//	sluice_upstream_utilisation{upstream}             the last window's grants over the rate (0 to 1)
//
// The counters of every reason exist from Observer, at 0, so that a rate or an
// alert has a series before the first refusal. An upstream removed
// (Remove) takes its series with it.
type Upstreams struct {
	collectorSet
	grants   *prometheus.CounterVec
	refusals *prometheus.CounterVec
	wait     *prometheus.HistogramVec

	mu   sync.Mutex
	live map[string]func() fairshare.Stats
}

var _ prometheus.Collector = (*Upstreams)(nil)

// NewUpstreams returns the upstreams' metrics, of no upstream until Add.
func NewUpstreams() *Upstreams {
	m := &Upstreams{
		grants: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_upstream_grants_total", Help: "Requests for a fair-share upstream granted.",
		}, []string{"upstream"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_upstream_refusals_total", Help: "Requests for a fair-share upstream refused, by reason: estimate (would wait past its maximum), expired (waited its maximum), queue_full, cancelled (its client went), closed, invalid, unavailable (the store sharing it failed).",
		}, []string{"upstream", "reason"}),
		wait: latencyHistogram("sluice_upstream_wait_seconds", "How long granted requests for a fair-share upstream waited for their turn.", "upstream"),
		live: map[string]func() fairshare.Stats{},
	}
	m.collectorSet = collectorSet{m.grants, m.refusals, m.wait}
	return m
}

// Observer returns the observer upstream name's fairshare.Upstream is
// to tell (fairshare.Options.Observer), and makes its counters.
func (m *Upstreams) Observer(name string) fairshare.Observer {
	o := &upstreamObserver{grants: m.grants.WithLabelValues(name), wait: m.wait.WithLabelValues(name), refusals: map[string]prometheus.Counter{}}
	for _, r := range fairshare.RefusedReasons {
		o.refusals[r] = m.refusals.WithLabelValues(name, r)
	}
	return o
}

// Live publishes upstream name's live state, which stats returns at each
// scrape.
func (m *Upstreams) Live(name string, stats func() fairshare.Stats) {
	m.mu.Lock()
	m.live[name] = stats
	m.mu.Unlock()
}

// Remove forgets upstream name and deletes its series.
func (m *Upstreams) Remove(name string) {
	m.mu.Lock()
	delete(m.live, name)
	m.mu.Unlock()
	l := prometheus.Labels{"upstream": name}
	m.grants.DeletePartialMatch(l)
	m.refusals.DeletePartialMatch(l)
	m.wait.DeletePartialMatch(l)
}

var (
	descUpDepth     = prometheus.NewDesc("sluice_upstream_queue_depth", "Requests waiting for a fair-share upstream on this node.", []string{"upstream"}, nil)
	descUpCustomers = prometheus.NewDesc("sluice_upstream_waiting_customers", "Customers with a request waiting for a fair-share upstream on this node.", []string{"upstream"}, nil)
	descUpUtil      = prometheus.NewDesc("sluice_upstream_utilisation", "Units a fair-share upstream granted in the last window over its rate, 0 to 1.", []string{"upstream"}, nil)
)

// Describe implements prometheus.Collector.
func (m *Upstreams) Describe(ch chan<- *prometheus.Desc) {
	m.collectorSet.Describe(ch)
	ch <- descUpDepth
	ch <- descUpCustomers
	ch <- descUpUtil
}

// Collect implements prometheus.Collector: the counters, and each
// upstream's live state read once.
func (m *Upstreams) Collect(ch chan<- prometheus.Metric) {
	m.collectorSet.Collect(ch)
	m.mu.Lock()
	live := make(map[string]func() fairshare.Stats, len(m.live))
	for name, stats := range m.live {
		live[name] = stats
	}
	m.mu.Unlock()
	for name, stats := range live {
		s := stats()
		ch <- prometheus.MustNewConstMetric(descUpDepth, prometheus.GaugeValue, float64(s.Waiting), name)
		ch <- prometheus.MustNewConstMetric(descUpCustomers, prometheus.GaugeValue, float64(s.Customers), name)
		ch <- prometheus.MustNewConstMetric(descUpUtil, prometheus.GaugeValue, s.Utilisation, name)
	}
}

// upstreamObserver counts one upstream's acquires.
type upstreamObserver struct {
	grants   prometheus.Counter
	wait     prometheus.Observer
	refusals map[string]prometheus.Counter // by reason; read only
}

func (o *upstreamObserver) Granted(waited time.Duration) {
	o.grants.Inc()
	o.wait.Observe(waited.Seconds())
}

func (o *upstreamObserver) Refused(reason string) {
	if c, ok := o.refusals[reason]; ok {
		c.Inc()
	}
}
