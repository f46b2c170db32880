// Package server is `sluice serve`: the HTTP API, the WebSocket gateway,
// the dashboard and Envoy's rate limit service over one engine and the
// store chosen, assembled from a Config, run until asked to stop, then
// drained and closed, as cmd/wtfd's Main is in benbjohnson/wtf. The flags
// are cmd/sluice's; the server takes them parsed and checked.
//
// A Server is built by New, which opens the store and listens; served by
// Run, which returns once the server has drained; and released by Close,
// in the reverse order of its parts: the gateway before the upstreams,
// which withdraw this node's shares from the store, and the store last.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"reflect"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/httpapi"
	"github.com/sluicehq/sluice/insight"
	"github.com/sluicehq/sluice/insight/insighthttp"
	"github.com/sluicehq/sluice/internal/loopback"
	"github.com/sluicehq/sluice/internal/pseudo"
	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/peer"
	"github.com/sluicehq/sluice/tenancy"
	"github.com/sluicehq/sluice/web"
)

// Config is the configuration of a server. Each field is the `sluice
// serve` flag named beside it, whose help says what it means; New takes
// it as cmd/sluice checks it (a known store, positive durations and
// sizes, checked patterns), and errors that name a flag name its field.
type Config struct {
	Addr            string         // --addr
	Store           string         // --store: pebble, memory, dynamodb or redis
	DataDir         string         // --data-dir
	SyncInterval    time.Duration  // --sync-interval
	WriteBehind     time.Duration  // --write-behind; 0: each change synced before its answer
	ConfigFile      string         // --config; empty: none, the defaults
	ConfigPoll      time.Duration  // --config-poll
	AdminKey        string         // --admin-key, $SLUICE_ADMIN_KEY or --admin-key-file's
	TrustedProxies  []netip.Prefix // --trusted-proxies
	MaxKeys         int            // --max-keys
	ShutdownTimeout time.Duration  // --shutdown-timeout
	DebugAddr       string         // --debug-addr; empty: no profiles
	Dynamo          DynamoConfig   // --dynamodb-table, --dynamodb-region, --dynamodb-endpoint
	Redis           RedisConfig    // --redis-url, --redis-ca
	RegionID        string         // --region-id: this node's region, in multi-region mode
	Regions         []string       // --regions: every region of the global table
	WSRenew         time.Duration  // --ws-renew
	Heartbeat       time.Duration  // --heartbeat
	AdvertiseURL    string         // --advertise-url
	WSMaxMessage    int64          // --ws-max-message
	WSIdle          time.Duration  // --ws-idle-timeout
	WSLifetime      time.Duration  // --ws-max-lifetime
	WSCheck         time.Duration  // --ws-session-check
	WSOrigins       []string       // --ws-allowed-origins
	AllowedHosts    []string       // --allowed-hosts: answered besides loopback names (see allowedHosts)
	AllowedOrigins  []string       // --allowed-origins: whose pages may change state, besides the server's own
	TenantLabels    int            // --metrics-tenant-labels
	HistorySave     time.Duration  // --history-save: how often the dashboard's history is written
	Envoy           EnvoyConfig    // --grpc-addr and the --envoy-* flags
	EnvoyCompat     bool           // --envoy-compat: envoyproxy/ratelimit's /healthcheck and /json on --addr (envoyhttp.go)
	TLS             TLSConfig      // --tls-cert, --tls-key; empty: plain HTTP and gRPC
	Pseudonyms      bool           // --pseudonymise-keys (docs/privacy.md)
	KeySecretFile   string         // --key-secret-file; empty: $SLUICE_KEY_SECRET
	Version         string         // the binary's, for the start's log and sluice_build_info
	Commit          string         // the binary's VCS revision, for sluice_build_info
}

// Server is a running `sluice serve`. Its methods are called in turn, New,
// Run and Close, from one goroutine.
type Server struct {
	c   Config
	log *slog.Logger

	cfg      *config.Config // the file's configuration at the start
	current  func() *config.Config
	watcher  *config.Watcher // nil without --config
	envoy    envoyConfig
	envoyHup chan os.Signal // a value reloads --envoy-config; nil if not watched
	fileHup  chan os.Signal // a value reloads --config; nil if not watched
	tls      *certLoader    // nil without TLS
	tlsHup   chan os.Signal // a value reloads the certificate; nil without TLS

	// The node's metrics: the registry /metrics serves, and the engine's,
	// the gateway's, the front doors' and the upstreams', registered in it.
	metrics   *metrics.Registry
	decisions *metrics.Decisions
	gwMetrics *metrics.Gateway
	front     frontMetrics

	st       stores
	timeout  time.Duration // of a store operation; 0 for stores in process
	tenants  *tenancy.Service
	keyer    *pseudo.Keyer // --pseudonymise-keys's; nil without
	rec      *insight.Recorder
	ins      *insighthttp.Handler // the dashboard's routes over rec
	eng      *engine.Engine
	ups      map[string]httpapi.Upstream
	ln       net.Listener
	gw       *gateway.Gateway
	clu      *peer.Cluster // this node alone, for a store of one process
	srv      *http.Server
	routes   []string       // the HTTP API's, for Routes
	inflight sync.WaitGroup // handlers running, so that the store outlives them

	// Started by Run, stopped by Close.
	wg        sync.WaitGroup // the sweeper, the announcer, the watchers, the debug server
	stopWatch context.CancelFunc
	debug     *http.Server
	rls       *rlsServer
	closed    sync.Once
	closeErr  error
}

// New builds a server from c: it loads the configurations, opens the
// store and listens on c.Addr, logging to log. ctx bounds the store's
// opening. On error, what it opened is closed.
func New(ctx context.Context, c Config, log *slog.Logger) (*Server, error) {
	// The compatible mode serves its own routes alone then (envoyhttp.go).
	if !loopback.Addr(c.Addr) && c.AdminKey == "" && !c.EnvoyCompat {
		return nil, fmt.Errorf("serve: refusing to listen on %s, off loopback, without an admin key: set --admin-key, $SLUICE_ADMIN_KEY or --admin-key-file", c.Addr)
	}
	keyer, err := c.keyer()
	if err != nil {
		return nil, err
	}
	s := &Server{c: c, log: log, keyer: keyer}
	if err := s.loadConfig(); err != nil {
		return nil, err
	}
	st, err := openStores(ctx, s.c, log)
	if err != nil {
		return nil, err
	}
	s.st = st
	if err := s.assemble(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// loadConfig loads the Envoy configuration and the file's, watching them,
// and takes the file's regions unless the flags name them.
func (s *Server) loadConfig() error {
	var err error
	if s.envoy, err = loadEnvoy(s.c.Envoy, s.log); err != nil {
		return err
	}
	s.cfg = config.Default()
	s.current = func() *config.Config { return s.cfg }
	s.metrics = metrics.NewRegistry()
	s.decisions = metrics.NewDecisionsByTenant(s.configured, s.c.TenantLabels)
	s.gwMetrics = metrics.NewGateway()
	s.front = newFrontMetrics()
	if err := s.metrics.Register(s.decisions, s.gwMetrics, s.front.http, s.front.grpc, s.front.upstreams, metrics.BuildInfo(s.c.Version, s.c.Commit, runtime.Version())); err != nil {
		return fmt.Errorf("serve: metrics: %w", err)
	}
	if s.c.ConfigFile != "" {
		if s.watcher, err = config.NewWatcher(s.c.ConfigFile, s.log, s.reloaded); err != nil {
			return fmt.Errorf("serve: %w", err)
		}
		s.cfg = s.watcher.Config()
		s.current = s.watcher.Config
	}
	if s.envoy.watcher != nil {
		s.envoyHup = make(chan os.Signal, 1)
	}
	if s.watcher != nil {
		s.fileHup = make(chan os.Signal, 1)
	}
	if err := s.loadTLS(); err != nil {
		return err
	}
	if s.c.RegionID == "" && s.cfg.Regions.ID != "" {
		if s.c.Store != "dynamodb" {
			return fmt.Errorf("serve: %s: regions need --store dynamodb (a global table), got --store %s", s.c.ConfigFile, s.c.Store)
		}
		s.c.RegionID, s.c.Regions = s.cfg.Regions.ID, s.cfg.Regions.All
	}
	return nil
}

// configured reports whether policy is named by a configuration in force,
// for its metrics' label.
func (s *Server) configured(policy string) bool {
	_, ok := s.current().Policies[policy]
	return ok || s.envoy.named(policy)
}

// reloaded is told of each reload of --config.
func (s *Server) reloaded(ok bool) {
	s.decisions.ConfigReloaded(ok)
	// Upstreams are read at start: their schedulers hold queues that a
	// reload would have to move.
	if ok && !reflect.DeepEqual(s.watcher.Config().Upstreams, s.cfg.Upstreams) {
		s.log.Warn("configuration reloaded, but its upstreams changed: a restart applies them; the upstreams of the start stay in force", "file", s.c.ConfigFile)
	}
}

// ReloadSignals returns a channel for each configuration the server
// watches (--envoy-config, --config), on which a value reloads it: the
// caller hands each to signal.Notify for SIGHUP, and to signal.Stop once
// Run has returned. None if nothing is watched.
func (s *Server) ReloadSignals() []chan<- os.Signal {
	var out []chan<- os.Signal
	for _, c := range []chan os.Signal{s.envoyHup, s.fileHup, s.tlsHup} {
		if c != nil {
			out = append(out, c)
		}
	}
	return out
}

// Addr returns the address the HTTP API listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// assemble builds the engine, the upstreams, the gateway and the HTTP
// API over the store, and listens.
func (s *Server) assemble() error {
	if s.st.metrics != nil {
		if err := s.metrics.Register(s.st.metrics); err != nil {
			return fmt.Errorf("serve: store metrics: %w", err)
		}
	}
	// The embedded stores never wait on a network, so the per-decision
	// deadline is for remote stores; here a timer per decision would only
	// cost CPU.
	s.timeout = s.current().Defaults.Timeout
	if s.st.local {
		s.timeout = 0
	}
	s.rec = insight.NewRecorder(insight.RecorderOptions{Configured: s.configured, History: insight.HistoryOptions{Path: s.historyFile(), SaveEvery: s.c.HistorySave}})
	if err := s.rec.LoadHistory(); err != nil {
		s.log.Warn("the dashboard's history is not read: it starts empty", "err", err)
	}
	s.eng = engine.New(s.st.counters, engine.Options{Timeout: s.timeout, Observer: engine.Observers(s.decisions, s.rec), Logger: s.log})
	// Closed before the store: a node leaving withdraws its shares of the
	// upstreams from the store.
	var err error
	if s.ups, err = newUpstreams(s.cfg, s.eng, !s.st.local, s.front.upstreams, s.log); err != nil {
		return err
	}
	if s.ln, err = net.Listen("tcp", s.c.Addr); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	s.ln = s.tlsListener(s.ln)
	s.tenants = tenancy.New(tenancy.Options{Store: s.st.tenants, Sessions: s.st.sessions, Audit: s.st.audit, Config: s.current,
		AdminKey: s.c.AdminKey, StoreTimeout: s.timeout, Logger: s.log, Pseudonyms: s.keyer})
	// A peer's hour of counts by tenant and policy runs to megabytes.
	counts := peer.NewClient(s.c.AdminKey)
	counts.MaxBody = 64 << 20
	s.clu = peer.NewCluster(s.c.advertise(s.ln), s.st.nodes, counts, s.log).WithHeartbeat(s.c.Heartbeat)
	if s.st.nodes != nil {
		// Live before the first connect: a node admits none until its
		// heartbeat has landed.
		ctx, cancel := context.WithTimeout(context.Background(), s.c.Heartbeat)
		s.clu.Join(ctx)
		cancel()
	}
	s.gw = s.gateway(s.tenants)
	// Deleting a tenant or a session ends what the gateway holds of it,
	// and what the recorder does, at once.
	s.tenants.OnSessionDeleted(s.gw.CloseSession)
	s.tenants.OnTenantDeleted(func(id string) {
		s.gw.CloseTenant(id)
		s.rec.Forget(id)
		s.gwMetrics.ForgetTenant(id)
		s.decisions.ForgetTenant(id)
	})
	s.tenants.OnKeyErased(s.rec.ForgetKeys)
	s.gwMetrics.LabelTenants(s.c.TenantLabels)
	if err := s.metrics.Register(metrics.GatewayStats(s.gw.Stats)); err != nil {
		return fmt.Errorf("serve: gateway metrics: %w", err)
	}
	s.ins = insighthttp.New(insighthttp.Options{Insight: s.rec, States: s.eng, Tenancy: s.tenants, Cluster: s.clu,
		GatewayStats: s.gw.Stats, GatewayRefusals: s.gwMetrics.Refusals, Logger: s.log})
	api := s.api()
	s.routes = api.Routes()
	s.srv = s.httpServer(s.envoyFront(api))
	return nil
}

// gateway builds the WebSocket gateway, whose tenants are tenants'.
func (s *Server) gateway(tenants *tenancy.Service) *gateway.Gateway {
	return gateway.New(gateway.Options{
		Limiter:  s.eng,
		Sessions: s.st.sessions,
		Tenant: func(ctx context.Context, id string) (gateway.Tenant, bool, error) {
			t, err := tenants.Lookup(ctx, id)
			switch {
			case err == nil:
				return gateway.Tenant{Settings: t.Settings(), Since: t.Since()}, true, nil
			case sluice.KindOf(err) == sluice.KindNotFound:
				return gateway.Tenant{}, false, nil
			}
			return gateway.Tenant{}, false, err
		},
		StoreTimeout:   s.timeout,
		RenewEvery:     s.c.WSRenew,
		MaxMessage:     s.c.WSMaxMessage,
		IdleTimeout:    s.c.WSIdle,
		MaxLifetime:    s.c.WSLifetime,
		CheckEvery:     s.c.WSCheck,
		AllowedOrigins: s.c.WSOrigins,
		Observer:       s.gwMetrics,
		Registry:       s.st.registry,
		Node:           s.c.advertise(s.ln),
		Peer:           peer.NewClient(s.c.AdminKey),
		Liveness:       s.liveness(),
		Logger:         s.log,
	})
}

// liveness is the gateway's view of the nodes' runs: the cluster's on a
// store shared by nodes, none on a store of one process.
func (s *Server) liveness() gateway.Liveness {
	if s.st.nodes == nil {
		return nil
	}
	return s.clu
}

// Routes returns the HTTP API's routes, "METHOD /path", sorted
// (httpapi.Handler.Routes), as New assembled them.
func (s *Server) Routes() []string { return slices.Clone(s.routes) }

// api builds the HTTP API, with the connection management API (the
// node-to-node protocol's server half) and the dashboard's insight routes
// behind its authentication.
func (s *Server) api() *httpapi.Handler {
	// With tenant labels, /metrics names tenants and their traffic,
	// which no tenant may read of another: it needs the admin key then.
	metricsKey := ""
	if s.c.TenantLabels > 0 {
		metricsKey = s.c.AdminKey
	}
	api := httpapi.New(httpapi.Options{
		Limiter:        s.eng,
		Tenancy:        s.tenants,
		Gateway:        s.gw,
		AllowedHosts:   s.c.allowedHosts(s.ln),
		AllowedOrigins: s.c.AllowedOrigins,
		TrustedProxies: s.c.TrustedProxies,
		Upstreams:      s.ups,
		Ready:          s.st.ready,
		Metrics:        metrics.RequireKey(s.metrics.Handler(), metricsKey),
		Page:           web.Handler(),
		Dashboard:      web.Dashboard(),
		Logger:         s.log,
	})
	peer.Mount(api, s.gw)
	s.ins.Mount(api)
	return api
}

// httpServer serves api, logging each request, counting those in flight.
func (s *Server) httpServer(api http.Handler) *http.Server {
	srv := &http.Server{
		Handler: requestLog(s.log, requestMetrics(s.front.http, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s.inflight.Add(1)
			defer s.inflight.Done()
			api.ServeHTTP(w, r)
		}))),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      15 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          s.errorLog(),
	}
	// Requests held for an upstream would hold the drain up to their
	// maxWait: at shutdown they are answered unavailable at once.
	srv.RegisterOnShutdown(func() { closeUpstreams(s.ups) })
	srv.RegisterOnShutdown(s.ins.CloseStreams) // streams would hold the drain to its timeout
	return srv
}

// Run serves until ctx is cancelled, then drains in-flight requests and
// rate limit calls for up to the shutdown timeout. It returns once they
// have ended, with an error if serving failed or the drain ran out of
// time; Close releases the rest.
func (s *Server) Run(ctx context.Context) error {
	s.start()
	var err error
	if s.rls, err = startEnvoy(s.c.Envoy, s.eng, s.envoy, s.c.Store != "memory", s.grpcTLS(), s.hideEntry(), s.front.grpc, s.log); err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- s.srv.Serve(s.ln) }()
	s.log.Info("sluice serving", "addr", s.ln.Addr().String(), "store", s.c.Store, "data_dir", s.c.DataDir,
		"config", s.c.ConfigFile, "auth", s.c.AdminKey != "", "version", s.c.Version)

	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	return s.drain(errc)
}

// start starts the goroutines beside the servers: the sweeper of expired
// sessions, the announcer of this node, the configurations' watchers, the
// store's poller the rate limit service's health follows, and the debug
// server.
func (s *Server) start() {
	wctx, stop := context.WithCancel(context.Background())
	s.stopWatch = stop
	if s.st.sweepSessions != nil {
		s.wg.Go(func() { s.sweep(wctx) })
	}
	if s.st.nodes != nil {
		s.wg.Go(func() { s.clu.Announce(wctx) })
	}
	s.wg.Go(func() { s.rec.KeepHistory(wctx, s.historyWritten) })
	if s.envoy.watcher != nil {
		s.wg.Go(func() { s.envoy.watcher.Run(wctx, s.envoyHup, s.c.ConfigPoll) })
	}
	if s.st.ready != nil && (s.c.Envoy.GRPCAddr != "" || s.c.EnvoyCompat) {
		s.wg.Go(func() { s.envoy.health.watchStore(wctx, s.st.ready, storePoll, storeCheck, s.log) })
	}
	if s.watcher != nil {
		s.wg.Go(func() { s.watcher.Run(wctx, s.fileHup, s.c.ConfigPoll) })
	}
	if s.tls != nil {
		s.wg.Go(func() { s.watchTLS(wctx) })
	}
	if s.c.DebugAddr != "" {
		s.debug = &http.Server{Addr: s.c.DebugAddr, Handler: debugMux(), ReadHeaderTimeout: 5 * time.Second}
		s.wg.Go(func() {
			if err := s.debug.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.log.Error("debug server", "err", err)
			}
		})
	}
}

// sweep removes expired sessions' state every minute until ctx is done.
func (s *Server) sweep(ctx context.Context) {
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.st.sweepSessions(now)
		}
	}
}

// drain shuts the HTTP server down, whose Serve returns on errc, and the
// rate limit service beside it.
func (s *Server) drain(errc <-chan error) error {
	s.log.Info("shutting down: draining in-flight requests", "timeout", s.c.ShutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), s.c.ShutdownTimeout)
	defer cancel()
	rlsStopped := s.rls.stopping(s.c.ShutdownTimeout) // its calls drain beside the HTTP requests
	defer func() { <-rlsStopped }()
	if err := s.srv.Shutdown(sctx); err != nil {
		// Past the timeout: cut the connections, and give the handlers
		// still running a moment before the store closes under them.
		s.srv.Close()
		done := make(chan struct{})
		go func() { s.inflight.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			s.log.Error("handlers still running after the drain; closing the store anyway")
		}
		return fmt.Errorf("serve: shutdown: %w", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	s.log.Info("stopped")
	return nil
}

// Close releases the server, after Run has returned or without it, last
// its parts first: the rate limit service (stopped by a drain already),
// the debug server, the goroutines beside the servers, the gateway, the
// upstreams and the store. It returns the store's error, which it logs.
// Closing again returns the first result.
func (s *Server) Close() error {
	s.closed.Do(func() { s.closeErr = s.close() })
	return s.closeErr
}

func (s *Server) close() error {
	if s.rls != nil {
		s.rls.stop(0) // if serving failed: after a drain, it has stopped
	}
	if s.debug != nil {
		s.debug.Close()
	}
	if s.ln != nil {
		s.ln.Close() // closed by a drain already; not if Run failed or never ran
	}
	if s.stopWatch != nil {
		s.stopWatch()
	}
	s.wg.Wait()
	if s.gw != nil {
		s.gw.Close()
	}
	closeUpstreams(s.ups)
	if err := s.st.close(); err != nil {
		s.log.Error("closing the store", "err", err)
		return fmt.Errorf("serve: closing the store: %w", err)
	}
	return nil
}
