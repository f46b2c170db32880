// Package insighthttp serves the dashboard's insight routes over HTTP: what
// a node decided (package insight), summed over the nodes of a shared
// store (peer.Cluster), as promhttp serves Prometheus' registry. Its
// routes (docs/api.md, "Insight"):
//
//	GET  /v1/insight, /v1/insight/top, /v1/insight/stream   the admin's: every tenant's
//	POST /v1/insight/try                                    the admin's: a limit tried on every tenant's traffic
//	GET  /v1/insight/gateway                                the admin's: the gateway's live counts
//	GET  /v1/tenants/{id}/insight, .../insight/top, .../insight/stream
//	POST /v1/tenants/{id}/insight/try                       a tenant's own
//
// The routes are mounted on the API's handler (Mount, over its Route),
// which authenticates a request and answers unknown routes and methods;
// these decode, read the recorder and the tenant layer, and encode with
// package wire.
package insighthttp

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/insight"
	"github.com/sluicehq/sluice/peer"
	"github.com/sluicehq/sluice/tenancy"
)

// Options configures a Handler. Tenancy is required.
type Options struct {
	// Insight is what this node decided (insight.Recorder). Optional:
	// without it the routes answer 404.
	Insight Recorder
	// States reads a key's state without deciding (engine.Engine), for a
	// top's ?state=true. Optional: without it the keys come without.
	States StateReader
	// Tenancy is the tenant layer: a tenant's creation time, its policies
	// and its keys' labels.
	Tenancy *tenancy.Service
	// Cluster is this node and the other nodes of a shared store, whose
	// counts the routes sum with this node's (Cluster.Gather). Optional:
	// without it the routes answer for this node alone, named "".
	Cluster *peer.Cluster
	// GatewayStats and GatewayRefusals are the gateway's live counts and
	// its refusals since the start (metrics.Gateway.Refusals), for GET
	// /v1/insight/gateway. Optional: without them it answers 404.
	GatewayStats    func() gateway.Stats
	GatewayRefusals func() map[string]int64
	// MaxStreams bounds the insight streams this node holds (default
	// 256), and MaxTenantStreams those of one tenant's keys (default 4):
	// past either a stream is refused 429 (streams.go).
	MaxStreams       int
	MaxTenantStreams int
	// Now is the clock of the series' seconds. Default time.Now.
	Now func() time.Time
	// Logger receives errors. Default: discard.
	Logger *slog.Logger
}

// Recorder is what the routes read of what this node decided
// (insight.Recorder).
type Recorder interface {
	Tenant(tenant string, from, to int64) []insight.Point
	Policy(policy string, from, to int64) []insight.Point
	Tenants() []string
	Policies() []string
	TopKeys(policy, tenant string, since time.Time, n int) insight.Top
	StoreLatency(from, to int64) []insight.LatencyPoint
	Try(p *sluice.Policy, tenant string, since time.Time, seconds, top int) (insight.Tried, bool)
	// The history: counts per minute (insight.Recorder.Minutes).
	HistoryLabels(policies bool) []string
	Minutes(label string, policies bool, since, from, to int64) []insight.Point
	HistorySpan() (minutes int, kept bool)
}

// StateReader reads a key's state without deciding: its counter's, and
// its penalty box's (engine.Engine.State).
type StateReader interface {
	State(ctx context.Context, tenant string, c sluice.Check) (counter, box sluice.Decision, err error)
}

// Router is the API's handler the routes are mounted on (httpapi.Handler):
// Route serves a path behind its authentication, with the request's
// principal; Authenticate is that authentication, which a stream asks
// again every second.
type Router interface {
	Route(method, path string, fn func(w http.ResponseWriter, r *http.Request, who tenancy.Principal))
	Authenticate(r *http.Request) (tenancy.Principal, error)
}

// Handler serves the insight routes. Create it with New; mount it with
// Mount.
type Handler struct {
	opts    Options
	log     *slog.Logger
	tenants *tenancy.Service
	// authenticate is the Router's, set by Mount.
	authenticate func(r *http.Request) (tenancy.Principal, error)
	// streams is closed by CloseStreams: the insight streams end.
	streams     chan struct{}
	streamsOnce sync.Once
	hub         *streamHub // the streams open, and the poller of the other nodes
}

// New returns a Handler.
func New(opts Options) *Handler {
	if opts.Tenancy == nil {
		panic("insighthttp.New: Options.Tenancy is required")
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	h := &Handler{opts: opts, log: opts.Logger, tenants: opts.Tenancy, streams: make(chan struct{})}
	h.hub = newStreamHub(h, opts.MaxStreams, opts.MaxTenantStreams)
	return h
}

// CloseStreams ends the requests held open to stream: for a server's
// shutdown, which would otherwise wait for them.
func (h *Handler) CloseStreams() {
	h.streamsOnce.Do(func() { close(h.streams) })
}
