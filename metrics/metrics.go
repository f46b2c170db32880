// Package metrics holds a node's Prometheus metrics: the engine's
// decisions (Decisions, an engine.Observer), the front doors' requests
// (HTTP, GRPC's interceptors), the fair-share upstreams' (Upstreams, whose
// Observer a fairshare.Upstream tells), the WebSocket gateway's (Gateway,
// a gateway.Observer, and GatewayStats), the DynamoDB store's (DynamoDB),
// and the Registry that serves them with the Go runtime's and the
// process's.
//
// Label sets are bounded whatever clients send: policy names a
// configuration does not know count as "inline", tenants beyond a cap as
// "(other)" (and a tenant idle for long frees its place), close codes a client chose as "other", paths that matched no
// route as "unmatched", gRPC methods no service has as "unknown"; a
// deleted tenant's series go.
package metrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Registry is a node's metrics: the collectors registered, plus the Go
// runtime's and the process's (process_cpu_seconds_total,
// process_resident_memory_bytes, ...). It is safe for concurrent use.
type Registry struct {
	reg *prometheus.Registry
}

// NewRegistry returns a registry of the Go runtime's and the process's
// metrics.
func NewRegistry() *Registry {
	r := &Registry{reg: prometheus.NewRegistry()}
	r.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}

// Register adds collectors, such as Decisions, Gateway or a store's
// counts; it stops at the first one refused (a name already taken).
func (r *Registry) Register(cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := r.reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// Handler serves the metrics in the Prometheus text format.
func (r *Registry) Handler() http.Handler {
	return promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{})
}

// collectorSet is several collectors as one.
type collectorSet []prometheus.Collector

// Describe implements prometheus.Collector.
func (cs collectorSet) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range cs {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (cs collectorSet) Collect(ch chan<- prometheus.Metric) {
	for _, c := range cs {
		c.Collect(ch)
	}
}

// BuildInfo is sluice_build_info: 1, labelled with what the binary was
// built from, for dashboards to tell the nodes' versions apart.
func BuildInfo(version, commit, goVersion string) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "sluice_build_info",
		Help:        "What this binary was built from: 1, labelled with its version, commit and Go version.",
		ConstLabels: prometheus.Labels{"version": version, "commit": commit, "goversion": goVersion},
	})
	g.Set(1)
	return g
}
