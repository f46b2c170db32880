package httpapi

import (
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/gateway"
)

// The gateway's metrics (Metrics implements gateway.Observer):
//
//	sluice_gateway_connects_total{tenant, outcome}  connects: admitted, or the refusing limit, forbidden, unavailable, invalid
//	sluice_gateway_messages_total{tenant, outcome}  messages: accepted, throttled, duplicate, queue_full, unavailable, invalid, session_gone
//	sluice_gateway_closes_total{code}               connections closed, by close code
//	sluice_gateway_queue_wait_seconds{queue}        from a message's acceptance to its delivery, silo or pooled
//	sluice_gateway_fanout_seconds                   a delivery's echo and fan-out
//	sluice_gateway_connections, _sessions           live on this node
//	sluice_gateway_queue_depth{queue}, _silo_queues messages waiting; silo queues held
//
// The tenant label is "" unless tenant labels are asked for
// (LabelTenants): the first n tenants seen get their own, the rest share
// "other", so that tenants cannot grow the label set.
type gatewayMetrics struct {
	connects, messages *prometheus.CounterVec
	closes             *prometheus.CounterVec
	wait               *prometheus.HistogramVec
	fanout             prometheus.Histogram

	mu      sync.Mutex
	max     int
	tenants map[string]bool
}

func newGatewayMetrics() *gatewayMetrics {
	return &gatewayMetrics{
		connects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_gateway_connects_total", Help: "WebSocket connects by tenant and outcome: admitted, or why refused.",
		}, []string{"tenant", "outcome"}),
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_gateway_messages_total", Help: "WebSocket messages by tenant and outcome.",
		}, []string{"tenant", "outcome"}),
		closes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_gateway_closes_total", Help: "WebSocket connections closed, by close code.",
		}, []string{"code"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sluice_gateway_queue_wait_seconds", Help: "Time from a message's acceptance to its delivery.",
			Buckets: prometheus.ExponentialBuckets(1e-5, 4, 10), // 10µs to ~2.6s
		}, []string{"queue"}),
		fanout: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sluice_gateway_fanout_seconds", Help: "Time a delivery's echo and fan-out took.",
			Buckets: prometheus.ExponentialBuckets(1e-5, 4, 10),
		}),
		tenants: map[string]bool{},
	}
}

// tenant is the label of tenant: "" unless tenant labels are on, "other"
// past the cap.
func (g *gatewayMetrics) tenant(t string) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.max == 0:
		return ""
	case g.tenants[t]:
		return t
	case len(g.tenants) < g.max:
		g.tenants[t] = true
		return t
	}
	return "other"
}

// LabelTenants labels the gateway's metrics by tenant, for the first n
// tenants seen; the rest count as "other". Zero (the default) labels none.
func (m *Metrics) LabelTenants(n int) {
	m.gw.mu.Lock()
	m.gw.max = n
	m.gw.mu.Unlock()
}

// Connect implements gateway.Observer.
func (m *Metrics) Connect(tenant, outcome string) {
	m.gw.connects.WithLabelValues(m.gw.tenant(tenant), outcome).Inc()
}

// Closed implements gateway.Observer.
func (m *Metrics) Closed(tenant string, code websocket.StatusCode) {
	m.gw.closes.WithLabelValues(strconv.Itoa(int(code))).Inc()
}

// Message implements gateway.Observer.
func (m *Metrics) Message(tenant, outcome string) {
	m.gw.messages.WithLabelValues(m.gw.tenant(tenant), outcome).Inc()
}

// Delivered implements gateway.Observer.
func (m *Metrics) Delivered(queue string, wait, fanout time.Duration) {
	m.gw.wait.WithLabelValues(queue).Observe(wait.Seconds())
	m.gw.fanout.Observe(fanout.Seconds())
}

var _ gateway.Observer = (*Metrics)(nil)

// GatewayStats publishes a gateway's live counts, read at every scrape.
func (m *Metrics) GatewayStats(stats func() gateway.Stats) error {
	gauge := func(name, help string, labels prometheus.Labels, v func(gateway.Stats) int) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels}, func() float64 { return float64(v(stats())) })
	}
	for _, c := range []prometheus.Collector{
		gauge("sluice_gateway_connections", "Live WebSocket connections on this node.", nil, func(s gateway.Stats) int { return s.Connections }),
		gauge("sluice_gateway_sessions", "Sessions with a live connection on this node.", nil, func(s gateway.Stats) int { return s.Sessions }),
		gauge("sluice_gateway_silo_queues", "Silo queues held, one per tenant with messages lately.", nil, func(s gateway.Stats) int { return s.Silos }),
		gauge("sluice_gateway_queue_depth", "Messages waiting to be delivered.", prometheus.Labels{"queue": "silo"}, func(s gateway.Stats) int { return s.SiloDepth }),
		gauge("sluice_gateway_queue_depth", "Messages waiting to be delivered.", prometheus.Labels{"queue": "pooled"}, func(s gateway.Stats) int { return s.PooledDepth }),
	} {
		if err := m.reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
