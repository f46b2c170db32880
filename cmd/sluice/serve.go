package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"net/url"
	"os"
	"os/signal"
	"path"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/fairshare"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/httpapi"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/insight"
	"github.com/sluicehq/sluice/store/dynamostore"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/store/pebblestore"
	"github.com/sluicehq/sluice/tenancy"
	"github.com/sluicehq/sluice/web"
)

// maxSyncInterval bounds --sync-interval: a durable decision may wait this
// long for its sync, on top of the sync itself.
const maxSyncInterval = 10 * time.Millisecond

// serveConfig is the configuration of `sluice serve`.
type serveConfig struct {
	Addr            string
	Store           string
	DataDir         string
	ConfigFile      string
	ConfigPoll      time.Duration
	AdminKey        string
	AdminKeyFile    string
	TrustedProxies  []netip.Prefix
	MaxKeys         int
	SyncInterval    time.Duration
	ShutdownTimeout time.Duration
	LogFormat       string
	DebugAddr       string
	Dynamo          dynamoFlags
	RegionID        string   // this node's region, in multi-region mode
	Regions         []string // every region of the global table
	WSRenew         time.Duration
	AdvertiseURL    string
	WSMaxMessage    int64
	WSIdle          time.Duration
	WSLifetime      time.Duration
	WSOrigins       []string
	AllowedHosts    []string // answered besides loopback names (see allowedHosts)
	AllowedOrigins  []string // whose pages may change state, besides the server's own
	TenantLabels    int
	Envoy           envoyFlags
}

func parseServe(args []string, stdout, stderr io.Writer) (serveConfig, error) {
	var c serveConfig
	var proxies, origins, hosts, apiOrigins string
	fs := flag.NewFlagSet("sluice serve", flag.ContinueOnError)
	fs.StringVar(&c.Addr, "addr", "127.0.0.1:8080", "`address` to listen on")
	fs.StringVar(&c.Store, "store", "pebble", "state store: pebble (embedded, durable), memory, or dynamodb (shared by many nodes)")
	c.Dynamo.register(fs)
	var regions string
	fs.StringVar(&c.RegionID, "region-id", "", "with --store dynamodb on a global table: this node's `region`, one of --regions (multi-region limits; see docs/dynamodb.md)")
	fs.StringVar(&regions, "regions", "", "with --region-id: comma-separated ids of every `region` of the global table, the same list on every node")
	fs.StringVar(&c.DataDir, "data-dir", "./sluice-data", "`directory` of the pebble store")
	fs.DurationVar(&c.SyncInterval, "sync-interval", pebblestore.DefaultSyncInterval, "pebble store: least time between two syncs of its log; the durable writes that arrive meanwhile share one sync (0 syncs as soon as asked)")
	fs.StringVar(&c.ConfigFile, "config", "", "YAML `file` of named policies, endpoints, tiers and tenants (reloaded on SIGHUP and on change)")
	fs.DurationVar(&c.ConfigPoll, "config-poll", time.Second, "how often to look for changes to --config")
	fs.StringVar(&c.AdminKey, "admin-key", "", "admin API key (or $SLUICE_ADMIN_KEY, or --admin-key-file); required off loopback")
	fs.StringVar(&c.AdminKeyFile, "admin-key-file", "", "`file` holding the admin API key")
	fs.StringVar(&proxies, "trusted-proxies", "", "comma-separated `CIDRs` of proxies whose X-Forwarded-For is believed")
	fs.IntVar(&c.MaxKeys, "max-keys", 1_000_000, "most counters held in memory; a request that would add one past it fails per its policy's fail mode")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", 10*time.Second, "how long to drain in-flight requests on SIGINT/SIGTERM")
	fs.StringVar(&c.LogFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&c.AdvertiseURL, "advertise-url", "", "this node's base `URL` as other nodes reach it, for a session's connections on several nodes; default http:// and the listening address")
	fs.Int64Var(&c.WSMaxMessage, "ws-max-message", 128<<10, "largest WebSocket message in `bytes`; larger closes with 1009")
	fs.DurationVar(&c.WSIdle, "ws-idle-timeout", 10*time.Minute, "close a WebSocket connection idle this long")
	fs.DurationVar(&c.WSLifetime, "ws-max-lifetime", 2*time.Hour, "close any WebSocket connection after this long")
	fs.DurationVar(&c.WSRenew, "ws-renew", 10*time.Second, "how often a node renews its WebSocket connections' leases; a dead node's connections return within three")
	fs.StringVar(&origins, "ws-allowed-origins", "", "comma-separated browser `origins` besides this server's own host that may open WebSocket connections: hosts (app.example.com, *.example.com) or origins (https://*.example.com)")
	fs.StringVar(&hosts, "allowed-hosts", "", "comma-separated host `names` besides loopback ones (localhost, 127.0.0.1, [::1]) that this server answers: without an admin key it answers no other, so that no web page can reach it by pointing its own name at loopback (DNS rebinding); with one, only these if any are given. Patterns as in --ws-allowed-origins, with a port or for any (sluice.internal, *.corp.example.com, sluice.internal:8443)")
	fs.StringVar(&apiOrigins, "allowed-origins", "", "comma-separated browser `origins` besides this server's own whose pages may send requests that change state (POST, PUT, PATCH, DELETE); others are refused 403. Patterns as in --ws-allowed-origins")
	fs.IntVar(&c.TenantLabels, "metrics-tenant-labels", 0, "label the gateway's metrics by tenant for the first `N` tenants seen (the rest count as \"other\"); 0 labels none")
	c.Envoy.register(fs)
	fs.StringVar(&c.DebugAddr, "debug-addr", "", "loopback `address` to serve Go's pprof profiles on (off if empty)")
	if err := parseFlags(fs, args, stdout, stderr); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("serve: unexpected argument %q", fs.Arg(0))
	}
	if err := c.Envoy.check(); err != nil {
		return c, err
	}
	for _, r := range strings.Split(regions, ",") {
		if r = strings.TrimSpace(r); r != "" {
			c.Regions = append(c.Regions, r)
		}
	}
	var err error
	if c.TrustedProxies, err = httplimit.ParsePrefixes(proxies); err != nil {
		return c, fmt.Errorf("serve: --trusted-proxies: %w", err)
	}
	if c.WSOrigins, err = patterns("ws-allowed-origins", origins, false); err != nil {
		return c, err
	}
	if c.AllowedOrigins, err = patterns("allowed-origins", apiOrigins, false); err != nil {
		return c, err
	}
	if c.AllowedHosts, err = patterns("allowed-hosts", hosts, true); err != nil {
		return c, err
	}
	if c.AdminKey == "" {
		c.AdminKey = os.Getenv("SLUICE_ADMIN_KEY")
	}
	if c.AdminKeyFile != "" {
		b, err := os.ReadFile(c.AdminKeyFile)
		if err != nil {
			return c, fmt.Errorf("serve: --admin-key-file: %w", err)
		}
		c.AdminKey = strings.TrimSpace(string(b))
	}
	switch {
	case c.Store != "memory" && c.Store != "pebble" && c.Store != "dynamodb":
		return c, fmt.Errorf("serve: --store %q is not supported (want pebble, memory or dynamodb)", c.Store)
	case c.RegionID != "" && c.Store != "dynamodb":
		return c, fmt.Errorf("serve: --region-id needs --store dynamodb (a global table), got --store %s", c.Store)
	case c.RegionID != "" && !slices.Contains(c.Regions, c.RegionID):
		return c, fmt.Errorf("serve: --region-id %q must be one of --regions %q", c.RegionID, regions)
	case c.RegionID == "" && len(c.Regions) > 0:
		return c, errors.New("serve: --regions needs --region-id, this node's region")
	case c.Store == "pebble" && c.DataDir == "":
		return c, errors.New("serve: --data-dir is empty")
	case c.SyncInterval < 0 || c.SyncInterval > maxSyncInterval:
		return c, fmt.Errorf("serve: --sync-interval must be between 0 and %v, got %v", maxSyncInterval, c.SyncInterval)
	case c.MaxKeys <= 0:
		return c, fmt.Errorf("serve: --max-keys must be positive, got %d", c.MaxKeys)
	case c.ShutdownTimeout <= 0:
		return c, fmt.Errorf("serve: --shutdown-timeout must be positive, got %v", c.ShutdownTimeout)
	case c.WSMaxMessage < 1 || c.WSIdle <= 0 || c.WSLifetime <= 0:
		return c, errors.New("serve: --ws-max-message, --ws-idle-timeout and --ws-max-lifetime must be positive")
	case c.WSRenew < 10*time.Millisecond:
		return c, fmt.Errorf("serve: --ws-renew must be at least 10ms, got %v", c.WSRenew)
	case c.TenantLabels < 0 || c.TenantLabels > 10_000:
		return c, fmt.Errorf("serve: --metrics-tenant-labels must be between 0 and 10000, got %d", c.TenantLabels)
	case c.ConfigPoll <= 0:
		return c, fmt.Errorf("serve: --config-poll must be positive, got %v", c.ConfigPoll)
	case c.LogFormat != "text" && c.LogFormat != "json":
		return c, fmt.Errorf("serve: --log-format must be text or json, got %q", c.LogFormat)
	case c.DebugAddr != "" && !loopback(c.DebugAddr):
		return c, fmt.Errorf("serve: --debug-addr %q must be on loopback", c.DebugAddr)
	case c.AdminKey != "" && len(c.AdminKey) < 16:
		return c, errors.New("serve: the admin key must be at least 16 characters")
	}
	return c, nil
}

// patterns parses the comma-separated origin patterns of flag (host
// patterns alone if hosts), each checked by checkOriginPattern.
func patterns(flag, list string, hosts bool) ([]string, error) {
	var out []string
	for _, p := range strings.Split(list, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		if hosts && strings.Contains(p, "/") {
			return nil, fmt.Errorf("serve: --%s: %q is not a host name: give it without a scheme or a path", flag, p)
		}
		if err := checkOriginPattern(p); err != nil {
			return nil, fmt.Errorf("serve: --%s: %w", flag, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// checkOriginPattern refuses an origin pattern that is malformed, or whose
// host is not pinned to a domain: wildcards are allowed only in front of
// two literal labels ("*.example.com"), so that no pattern ("*", "*.*",
// "https://*", "*.com") lets any web page in.
func checkOriginPattern(pat string) error {
	if _, err := path.Match(pat, ""); err != nil {
		return fmt.Errorf("%q is not a valid pattern: %v", pat, err)
	}
	host := pat
	if _, rest, ok := strings.Cut(pat, "://"); ok {
		host = rest
	}
	if i := strings.LastIndexByte(host, ':'); i >= 0 && strings.Trim(host[i+1:], "0123456789*?") == "" {
		host = host[:i] // a port, or a pattern of ports
	}
	w := strings.LastIndexAny(host, "*?[]")
	if w < 0 {
		if host == "" {
			return fmt.Errorf("%q names no host", pat)
		}
		return nil
	}
	var literal int
	for _, label := range strings.Split(host[w+1:], ".") {
		if label != "" {
			literal++
		}
	}
	if literal < 2 {
		return fmt.Errorf("%q would match any site: a wildcard must stand before a domain of two labels or more, as in *.example.com", pat)
	}
	return nil
}

// loopback reports whether addr only listens on loopback.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}

// stores are the two stores of a server, whichever kind.
type stores struct {
	counters sluice.Store
	tenants  sluice.TenantStore
	sessions sluice.SessionStore
	registry sluice.Registry
	ready    func(context.Context) error
	close    func() error
	local    bool // in process: no network between a decision and its state
	// metrics publishes the store's own counts, if it keeps any.
	metrics prometheus.Collector
	// nodes lists the live nodes of a shared store, for the dashboard to
	// sum them (DynamoDB); nil for a store of one process.
	nodes nodeList
	// sweepSessions removes expired sessions' state, periodically (not
	// for DynamoDB, whose TTL does it, eventually).
	sweepSessions func(now time.Time)
}

func openStores(ctx context.Context, c serveConfig, log *slog.Logger) (stores, error) {
	mem := memstore.Options{MaxKeys: c.MaxKeys}
	if c.Store == "dynamodb" {
		counter := newCountingClient(nil)
		db, err := c.Dynamo.clientVia(ctx, counter)
		if err != nil {
			return stores{}, fmt.Errorf("serve: %w", err)
		}
		s, err := dynamostore.New(db, dynamostore.Options{Table: c.Dynamo.Table, CacheKeys: c.MaxKeys, Region: c.RegionID, Regions: c.Regions})
		if err != nil {
			return stores{}, fmt.Errorf("serve: %w", err)
		}
		return stores{counters: s, tenants: s, sessions: s, registry: s, nodes: s, ready: s.Ping, close: s.Close, metrics: dynamoCollector{s.Stats, counter.counts}}, nil
	}
	if c.Store == "memory" {
		s := memstore.New(mem)
		sessions := &memstore.Sessions{}
		return stores{counters: s, tenants: &memstore.Tenants{}, sessions: sessions, close: s.Close, local: true,
			sweepSessions: func(now time.Time) { sessions.Sweep(now) }}, nil
	}
	if err := os.MkdirAll(c.DataDir, 0o700); err != nil {
		return stores{}, fmt.Errorf("serve: data dir: %w", err)
	}
	interval := c.SyncInterval
	if interval == 0 {
		interval = -1 // pebblestore's "as soon as asked"; its 0 is its default
	}
	s, err := pebblestore.Open(c.DataDir, pebblestore.Options{Memory: mem, SyncInterval: interval, Logger: log})
	if err != nil {
		return stores{}, fmt.Errorf("serve: %w", err)
	}
	return stores{counters: s, tenants: s, sessions: s, ready: s.Ping, close: s.Close, local: true,
		sweepSessions: func(now time.Time) {
			if _, err := s.SweepSessions(now); err != nil {
				log.Warn("sweeping expired sessions", "err", err)
			}
		}}, nil
}

// serve runs the HTTP API until ctx is cancelled, then drains in-flight
// requests for up to the shutdown timeout.
func serve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := parseServe(args, stdout, stderr)
	if err != nil {
		return err
	}
	if !loopback(c.Addr) && c.AdminKey == "" {
		return fmt.Errorf("serve: refusing to listen on %s, off loopback, without an admin key: set --admin-key, $SLUICE_ADMIN_KEY or --admin-key-file", c.Addr)
	}
	var log *slog.Logger
	if c.LogFormat == "json" {
		log = slog.New(slog.NewJSONHandler(stderr, nil))
	} else {
		log = slog.New(slog.NewTextHandler(stderr, nil))
	}

	var watcher *config.Watcher
	cfg := config.Default()
	current := func() *config.Config { return cfg }
	envoyCfg, err := c.Envoy.load(log)
	if err != nil {
		return err
	}
	configured := func(policy string) bool {
		_, ok := current().Policies[policy]
		return ok || envoyCfg.named(policy)
	}
	metrics := httpapi.NewMetrics(configured)
	if c.ConfigFile != "" {
		onReload := func(ok bool) {
			metrics.ConfigReloaded(ok)
			// Upstreams are read at start: their schedulers hold queues
			// that a reload would have to move.
			if ok && !reflect.DeepEqual(watcher.Config().Upstreams, cfg.Upstreams) {
				log.Warn("configuration reloaded, but its upstreams changed: a restart applies them; the upstreams of the start stay in force", "file", c.ConfigFile)
			}
		}
		if watcher, err = config.NewWatcher(c.ConfigFile, log, onReload); err != nil {
			return fmt.Errorf("serve: %w", err)
		}
		cfg = watcher.Config()
		current = watcher.Config
	}
	if c.RegionID == "" && cfg.Regions.ID != "" {
		// The file's regions, unless the flags name them.
		if c.Store != "dynamodb" {
			return fmt.Errorf("serve: %s: regions need --store dynamodb (a global table), got --store %s", c.ConfigFile, c.Store)
		}
		c.RegionID, c.Regions = cfg.Regions.ID, cfg.Regions.All
	}
	st, err := openStores(ctx, c, log)
	if err != nil {
		return err
	}
	defer func() {
		if err := st.close(); err != nil {
			log.Error("closing the store", "err", err)
		}
	}()
	if st.metrics != nil {
		if err := metrics.Register(st.metrics); err != nil {
			return fmt.Errorf("serve: store metrics: %w", err)
		}
	}
	// The embedded stores never wait on a network, so the per-decision
	// deadline is for remote stores; here a timer per decision would only
	// cost CPU.
	timeout := current().Defaults.Timeout
	if st.local {
		timeout = 0
	}
	rec := insight.NewRecorder(insight.RecorderOptions{Configured: configured})
	eng := engine.New(st.counters, engine.Options{Timeout: timeout, Observer: engine.Observers(metrics, rec), Logger: log})
	// Closed before the store (defers run last first): a node leaving
	// withdraws its shares of the upstreams from the store.
	upstreams, err := newUpstreams(cfg, eng, !st.local, log)
	if err != nil {
		return err
	}
	defer closeUpstreams(upstreams)

	ln, err := net.Listen("tcp", c.Addr)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	tenants := tenancy.New(tenancy.Options{Store: st.tenants, Config: current})
	gw := gateway.New(gateway.Options{
		Limiter:  eng,
		Sessions: st.sessions,
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
		StoreTimeout:   timeout,
		RenewEvery:     c.WSRenew,
		MaxMessage:     c.WSMaxMessage,
		IdleTimeout:    c.WSIdle,
		MaxLifetime:    c.WSLifetime,
		AllowedOrigins: c.WSOrigins,
		Observer:       metrics,
		Registry:       st.registry,
		Node:           c.advertise(ln),
		Peer:           newPeer(c.AdminKey),
		Logger:         log,
	})
	defer gw.Close()
	metrics.LabelTenants(c.TenantLabels)
	if err := metrics.GatewayStats(gw.Stats); err != nil {
		return fmt.Errorf("serve: gateway metrics: %w", err)
	}
	var clu *cluster
	var cluOpt httpapi.Cluster
	if st.nodes != nil {
		// A peer's hour of counts by tenant and policy runs to megabytes.
		p := newPeer(c.AdminKey)
		p.maxBody = 64 << 20
		clu = &cluster{self: c.advertise(ln), nodes: st.nodes, peer: p, log: log}
		cluOpt = clu
	}
	var inflight sync.WaitGroup // handlers running, so that the store outlives them
	api := httpapi.New(httpapi.Options{
		Cluster:          cluOpt,
		Node:             c.advertise(ln),
		Limiter:          eng,
		Tenants:          st.tenants,
		Sessions:         st.sessions,
		Gateway:          gw,
		OnSessionDeleted: gw.CloseSession,
		OnTenantDeleted: func(id string) {
			gw.CloseTenant(id)
			rec.Forget(id)
		},
		Config:          current,
		AdminKey:        c.AdminKey,
		AllowedHosts:    c.allowedHosts(ln),
		AllowedOrigins:  c.AllowedOrigins,
		TrustedProxies:  c.TrustedProxies,
		StoreTimeout:    timeout,
		Upstreams:       upstreams,
		Insight:         rec,
		Ready:           st.ready,
		Metrics:         metrics.Handler(),
		Page:            web.Handler(),
		Dashboard:       web.Dashboard(),
		GatewayStats:    gw.Stats,
		GatewayRefusals: metrics.Refusals,
		Logger:          log,
	})
	srv := &http.Server{
		Handler: requestLog(log, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			inflight.Add(1)
			defer inflight.Done()
			api.ServeHTTP(w, r)
		})),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      15 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	// Requests held for an upstream would hold the drain up to their
	// maxWait: at shutdown they are answered unavailable at once.
	srv.RegisterOnShutdown(func() { closeUpstreams(upstreams) })
	srv.RegisterOnShutdown(api.CloseStreams) // streams would hold the drain to its timeout

	// The config watcher: SIGHUP and file changes, until shutdown.
	var wg sync.WaitGroup
	wctx, stopWatch := context.WithCancel(context.Background())
	defer func() { stopWatch(); wg.Wait() }()
	if st.sweepSessions != nil {
		wg.Go(func() {
			t := time.NewTicker(time.Minute)
			defer t.Stop()
			for {
				select {
				case <-wctx.Done():
					return
				case now := <-t.C:
					st.sweepSessions(now)
				}
			}
		})
	}
	if clu != nil {
		wg.Go(func() { clu.announce(wctx) })
	}
	if envoyCfg.watcher != nil {
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		wg.Go(func() { envoyCfg.watcher.Run(wctx, hup, c.ConfigPoll) })
	}
	if watcher != nil {
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		wg.Go(func() { watcher.Run(wctx, hup, c.ConfigPoll) })
	}

	if c.DebugAddr != "" {
		dbg := &http.Server{Addr: c.DebugAddr, Handler: debugMux(), ReadHeaderTimeout: 5 * time.Second}
		wg.Go(func() {
			if err := dbg.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("debug server", "err", err)
			}
		})
		defer dbg.Close()
	}

	rls, err := c.Envoy.start(eng, envoyCfg, c.Store != "memory", log)
	if err != nil {
		return err
	}
	defer rls.stop(0) // if serving fails: at shutdown, it has stopped
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("sluice serving", "addr", ln.Addr().String(), "store", c.Store, "data_dir", c.DataDir,
		"config", c.ConfigFile, "auth", c.AdminKey != "", "version", version)

	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down: draining in-flight requests", "timeout", c.ShutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), c.ShutdownTimeout)
	defer cancel()
	rlsStopped := rls.stopping(c.ShutdownTimeout) // its calls drain beside the HTTP requests
	defer func() { <-rlsStopped }()
	if err := srv.Shutdown(sctx); err != nil {
		// Past the timeout: cut the connections, and give the handlers
		// still running a moment before the store closes under them.
		srv.Close()
		done := make(chan struct{})
		go func() { inflight.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			log.Error("handlers still running after the drain; closing the store anyway")
		}
		return fmt.Errorf("serve: shutdown: %w", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	log.Info("stopped")
	return nil
}

// newUpstreams starts a fair-share scheduler for each upstream of cfg.
// On a store that many nodes share (shared), each upstream's rate is split
// among the nodes by a ledger in that store (fairshare.Balancer); this
// node's claims in it are named by a random id of its own, new at each
// start, so that a restarted node starts with what is free.
func newUpstreams(cfg *config.Config, lim fairshare.Limiter, shared bool, log *slog.Logger) (map[string]httpapi.Upstream, error) {
	ups := map[string]httpapi.Upstream{}
	node := sluice.NamedLease | rand.Uint64()
	for _, name := range cfg.UpstreamNames() {
		uc := cfg.Upstreams[name]
		sc := uc.Scheduler()
		opts := fairshare.Options{Logger: log.With("upstream", name)}
		if shared {
			l, err := fairshare.NewLimiterLedger(lim, name, sc, node, fairshare.DefaultTTL(sc.Window))
			if err != nil {
				closeUpstreams(ups)
				return nil, fmt.Errorf("serve: upstream %s: %w", name, err)
			}
			opts.Ledger = l
		}
		q, err := fairshare.NewUpstream(sc, opts)
		if err != nil {
			closeUpstreams(ups)
			return nil, fmt.Errorf("serve: upstream %s: %w", name, err)
		}
		ups[name] = httpapi.Upstream{Config: uc, Quota: q}
	}
	return ups, nil
}

// closeUpstreams stops them; waiting requests end with fairshare.ErrClosed.
// Closing twice is harmless.
func closeUpstreams(ups map[string]httpapi.Upstream) {
	for _, u := range ups {
		u.Quota.Close()
	}
}

// debugMux serves Go's profiles.
func debugMux() *http.ServeMux {
	m := http.NewServeMux()
	m.HandleFunc("/debug/pprof/", pprof.Index)
	m.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	m.HandleFunc("/debug/pprof/profile", pprof.Profile)
	m.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	m.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return m
}

// allowedHosts returns the hosts the server answers besides loopback
// names, when it answers only some (httpapi.Options.AllowedHosts): those
// of --allowed-hosts, and the host of its advertised URL, by which the
// other nodes reach it.
func (c serveConfig) allowedHosts(ln net.Listener) []string {
	if c.AdminKey != "" && len(c.AllowedHosts) == 0 {
		return nil // any host: the key is the wall
	}
	hosts := slices.Clip(c.AllowedHosts)
	if u, err := url.Parse(c.advertise(ln)); err == nil && u.Hostname() != "" {
		// Literally: a pattern's special characters escaped.
		hosts = append(hosts, patternEscaper.Replace(u.Hostname()))
	}
	return hosts
}

var patternEscaper = strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`)

// advertise returns the node's base URL for other nodes.
func (c serveConfig) advertise(ln net.Listener) string {
	if c.AdvertiseURL != "" {
		return strings.TrimRight(c.AdvertiseURL, "/")
	}
	return "http://" + ln.Addr().String()
}
