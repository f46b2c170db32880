package metrics

import (
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/gateway"
)

// Gateway is the WebSocket gateway's metrics. It implements
// gateway.Observer and prometheus.Collector, and is safe for concurrent
// use. Its metrics, with GatewayStats's:
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
// "(other)", which no tenant id can be, so that tenants cannot grow the
// label set; a deleted tenant's series go (ForgetTenant), and so do those
// of a tenant with no connect or message for an hour or two (idleAfter),
// at a scrape or when another tenant asks for a place.
type Gateway struct {
	collectorSet       // the metrics below, for prometheus.Collector
	connects, messages *prometheus.CounterVec
	closes             *prometheus.CounterVec
	wait               *prometheus.HistogramVec
	fanout             prometheus.Histogram

	tenants tenantLabels

	mu sync.Mutex
	// refused counts the connects and messages refused since the start,
	// by "connect:"/"message:" and outcome, for the dashboard
	// (Refusals); outcomes are a fixed few.
	refused map[string]int64
}

var (
	_ gateway.Observer     = (*Gateway)(nil)
	_ prometheus.Collector = (*Gateway)(nil)
)

// NewGateway returns the gateway's metrics, labelled by no tenant until
// LabelTenants.
func NewGateway() *Gateway {
	g := &Gateway{
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
		refused: map[string]int64{},
	}
	g.collectorSet = collectorSet{g.connects, g.messages, g.closes, g.wait, g.fanout}
	g.tenants.drop = g.drop
	return g
}

// Collect implements prometheus.Collector: it frees the tenants' places
// idle for long (tenantLabels.sweep) before collecting.
func (g *Gateway) Collect(ch chan<- prometheus.Metric) {
	g.tenants.sweep()
	g.collectorSet.Collect(ch)
}

func (g *Gateway) refuse(what, outcome string) {
	g.mu.Lock()
	g.refused[what+":"+outcome]++
	g.mu.Unlock()
}

// Refusals returns the gateway's connects and messages refused since the
// start, by "connect:<outcome>" and "message:<outcome>".
func (g *Gateway) Refusals() map[string]int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[string]int64, len(g.refused))
	for k, v := range g.refused {
		out[k] = v
	}
	return out
}

// tenant is the label of tenant: "" unless tenant labels are on; its own
// once a connect of it was admitted (so that no one can take the labels
// with made-up tenant ids), while fewer than the cap have one; "(other)"
// otherwise.
func (g *Gateway) tenant(t string, admitted bool) string {
	return g.tenants.label(t, admitted)
}

// closeCodes are the close codes counted by their own label; any other,
// which a client may choose, counts as "other".
var closeCodes = map[websocket.StatusCode]bool{1000: true, 1001: true, 1006: true, 1007: true, 1008: true, 1009: true, 1011: true, 1013: true, 4000: true, 4001: true}

// LabelTenants labels the gateway's metrics by tenant, for the first n
// tenants seen; the rest count as "(other)". Zero (the default) labels
// none.
func (g *Gateway) LabelTenants(n int) { g.tenants.setMax(n) }

// ForgetTenant deletes a deleted tenant's series and frees its label, so
// that a tenant created again under its id starts from nothing.
func (g *Gateway) ForgetTenant(id string) {
	if g.tenants.forget(id) {
		g.drop(id)
	}
}

// drop deletes tenant id's series.
func (g *Gateway) drop(id string) {
	g.connects.DeletePartialMatch(prometheus.Labels{"tenant": id})
	g.messages.DeletePartialMatch(prometheus.Labels{"tenant": id})
}

// Connect implements gateway.Observer.
func (g *Gateway) Connect(tenant, outcome string) {
	g.connects.WithLabelValues(g.tenant(tenant, outcome == "admitted"), outcome).Inc()
	if outcome != "admitted" {
		g.refuse("connect", outcome)
	}
}

// Closed implements gateway.Observer.
func (g *Gateway) Closed(tenant string, code websocket.StatusCode) {
	label := "other"
	if closeCodes[code] {
		label = strconv.Itoa(int(code))
	}
	g.closes.WithLabelValues(label).Inc()
}

// Message implements gateway.Observer.
func (g *Gateway) Message(tenant, outcome string) {
	g.messages.WithLabelValues(g.tenant(tenant, false), outcome).Inc()
	if outcome != "accepted" {
		g.refuse("message", outcome)
	}
}

// Delivered implements gateway.Observer.
func (g *Gateway) Delivered(queue string, wait, fanout time.Duration) {
	g.wait.WithLabelValues(queue).Observe(wait.Seconds())
	g.fanout.Observe(fanout.Seconds())
}

// GatewayStats publishes a gateway's live counts, read once per scrape.
func GatewayStats(stats func() gateway.Stats) prometheus.Collector {
	return gatewayStats(stats)
}

type gatewayStats func() gateway.Stats

var (
	descConns    = prometheus.NewDesc("sluice_gateway_connections", "Live WebSocket connections on this node.", nil, nil)
	descSessions = prometheus.NewDesc("sluice_gateway_sessions", "Sessions with a live connection on this node.", nil, nil)
	descSilos    = prometheus.NewDesc("sluice_gateway_silo_queues", "Silo queues held, one per tenant with messages lately.", nil, nil)
	descDepth    = prometheus.NewDesc("sluice_gateway_queue_depth", "Messages waiting to be delivered.", []string{"queue"}, nil)
)

// Describe implements prometheus.Collector.
func (f gatewayStats) Describe(ch chan<- *prometheus.Desc) {
	ch <- descConns
	ch <- descSessions
	ch <- descSilos
	ch <- descDepth
}

// Collect implements prometheus.Collector.
func (f gatewayStats) Collect(ch chan<- prometheus.Metric) {
	s := f()
	ch <- prometheus.MustNewConstMetric(descConns, prometheus.GaugeValue, float64(s.Connections))
	ch <- prometheus.MustNewConstMetric(descSessions, prometheus.GaugeValue, float64(s.Sessions))
	ch <- prometheus.MustNewConstMetric(descSilos, prometheus.GaugeValue, float64(s.Silos))
	ch <- prometheus.MustNewConstMetric(descDepth, prometheus.GaugeValue, float64(s.SiloDepth), "silo")
	ch <- prometheus.MustNewConstMetric(descDepth, prometheus.GaugeValue, float64(s.PooledDepth), "pooled")
}
