package server

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/envoyrls"
	"github.com/sluicehq/sluice/internal/loopback"
	"github.com/sluicehq/sluice/metrics"
)

// EnvoyConfig configures Envoy's rate limit service (package envoyrls).
type EnvoyConfig struct {
	GRPCAddr      string // --grpc-addr; empty: no service
	Dir           string // --envoy-config; empty: no domains
	PerDescriptor bool   // --envoy-per-descriptor
	Headers       bool   // --envoy-response-headers
	Token         string // --grpc-token-file's; empty: none asked
	QuotaMode     bool   // --envoy-quota-mode
	ShadowMode    bool   // --envoy-shadow-mode
	Metadata      bool   // --envoy-dynamic-metadata
	// HeaderNames are the names of the headers --envoy-response-headers
	// adds: --envoy-header-limit, --envoy-header-remaining and
	// --envoy-header-reset; empty ones are envoyrls.DefaultHeaders'.
	HeaderNames envoyrls.Headers
	Merge       bool // --envoy-merge-domains
	// Counting is --envoy-counting: all-or-nothing, per-descriptor or
	// reference (envoyrls.ParseCounting); empty: all-or-nothing, or
	// per-descriptor with PerDescriptor.
	Counting string
	// ReferenceErrors is --envoy-reference-errors.
	ReferenceErrors bool
	// StartWithoutConfig is --envoy-start-without-config: a directory
	// that does not load at start is no configuration, calls failing,
	// until it loads.
	StartWithoutConfig bool
	// HealthNeedsConfig is --envoy-health-needs-config: the health is
	// not serving while no domain is loaded (envoyConfig.Healthy).
	HealthNeedsConfig bool
}

// CheckCounting reports whether --envoy-counting and
// --envoy-per-descriptor are good together, naming them.
func (f EnvoyConfig) CheckCounting() error {
	_, err := f.counting()
	return err
}

// counting is how the service counts: f.Counting, or by PerDescriptor.
func (f EnvoyConfig) counting() (envoyrls.Counting, error) {
	if f.Counting == "" {
		if f.PerDescriptor {
			return envoyrls.PerDescriptor, nil
		}
		return envoyrls.AllOrNothing, nil
	}
	c, err := envoyrls.ParseCounting(f.Counting)
	if err != nil {
		return 0, fmt.Errorf("serve: --envoy-counting: %w", err)
	}
	if f.PerDescriptor && c != envoyrls.PerDescriptor {
		return 0, fmt.Errorf("serve: --envoy-per-descriptor is --envoy-counting per-descriptor, but --envoy-counting is %s: give one", c)
	}
	return c, nil
}

// headerNames are the names of the RateLimit headers: f.HeaderNames, the
// reference's where empty.
func (f EnvoyConfig) headerNames() envoyrls.Headers {
	h := f.HeaderNames
	for _, p := range []struct {
		name *string
		def  string
	}{
		{&h.Limit, envoyrls.DefaultHeaders.Limit},
		{&h.Remaining, envoyrls.DefaultHeaders.Remaining},
		{&h.Reset, envoyrls.DefaultHeaders.Reset},
	} {
		if *p.name == "" {
			*p.name = p.def
		}
	}
	return h
}

// envoyConfig is the Envoy configuration in force: a watched directory, or
// none.
type envoyConfig struct {
	watcher *envoyrls.Watcher
	empty   *envoyrls.Config
	health  *envoyHealth
}

// envoyHealth is the rate limit service's gRPC health, kept to the
// store's readiness (watchStore's) and, with --envoy-health-needs-config,
// to the configuration in force. Reloads update it from the watcher's
// goroutine, the store's poller from its own, the server sets it once it
// serves.
type envoyHealth struct {
	needsConfig bool
	current     func() *envoyrls.Config
	storeDown   atomic.Bool // the store's last readiness check failed
	mu          sync.Mutex
	hs          *health.Server // nil until the service serves
}

// storePoll is the period of the store's readiness checks the health
// follows, and storeCheck each one's deadline (/readyz's).
const (
	storePoll  = time.Second
	storeCheck = 2 * time.Second
)

func loadEnvoy(f EnvoyConfig, log *slog.Logger) (envoyConfig, error) {
	h := &envoyHealth{needsConfig: f.HealthNeedsConfig}
	if f.Dir == "" {
		c, _ := envoyrls.Parse(nil)
		h.current = func() *envoyrls.Config { return c }
		return envoyConfig{empty: c, health: h}, nil
	}
	load := envoyrls.Loading{MergeDomains: f.Merge, StartWithoutConfig: f.StartWithoutConfig}
	w, err := envoyrls.NewWatcher(f.Dir, load, log, func(ok bool) {
		if ok {
			h.update()
		}
	})
	if err != nil {
		return envoyConfig{}, fmt.Errorf("serve: %w", err)
	}
	h.current = w.Config
	return envoyConfig{watcher: w, health: h}, nil
}

// Healthy reports whether the rate limit service is healthy: while the
// store was ready at its last check (watchStore), and with
// --envoy-health-needs-config, while a domain is loaded (none at start
// yet, or every one gone on a reload, is unhealthy). The gRPC health
// follows it; the reference's HTTP /healthcheck answers by it.
func (c envoyConfig) Healthy() bool { return c.health.healthy() }

func (h *envoyHealth) healthy() bool {
	return !h.storeDown.Load() && (!h.needsConfig || h.current().NumDomains() > 0)
}

// watchStore checks the store's readiness, ready (/readyz's), at once
// and every period, each check within deadline, until ctx is done, and
// keeps the health to it. It is the store's one prober: health checks,
// however many, read what it found and never reach the store.
func (h *envoyHealth) watchStore(ctx context.Context, ready func(context.Context) error, period, deadline time.Duration, log *slog.Logger) {
	// A timer reset after each check, not a ticker: a slow store's
	// checks stay a period apart, never back to back.
	t := time.NewTimer(period)
	defer t.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, deadline)
		err := ready(cctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if down := err != nil; h.storeDown.Swap(down) != down {
			if down {
				log.Warn("the store is not ready: the rate limit service's health is NOT_SERVING until it is", "err", err)
			} else {
				log.Info("the store is ready again: the rate limit service's health follows it")
			}
			h.update()
		}
		t.Reset(period)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// serve makes hs, the gRPC health of the service now serving, follow
// the configuration.
func (h *envoyHealth) serve(hs *health.Server) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.hs = hs
	envoyrls.SetHealth(hs, h.healthy())
}

// update sets the gRPC health, if serving, to the configuration's.
func (h *envoyHealth) update() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.hs != nil {
		envoyrls.SetHealth(h.hs, h.healthy())
	}
}

func (c envoyConfig) current() *envoyrls.Config {
	if c.watcher != nil {
		return c.watcher.Config()
	}
	return c.empty
}

// named reports whether policy is a rule's in the configuration in force,
// for its metrics' label.
func (c envoyConfig) named(policy string) bool { return c.current().HasPolicy(policy) }

// rlsServer is the running gRPC server, or nothing.
type rlsServer struct {
	svc  *envoyrls.Service // also POST /json's (envoyhttp.go)
	gs   *grpc.Server
	hs   *health.Server
	once sync.Once
	done chan struct{}
}

// startEnvoy serves the rate limit service at f.GRPCAddr, if set, its
// calls counted in m. waits says whether a decision waits for its store
// (a disk sync on Pebble, a round trip to DynamoDB); opts are the server's
// further options (TLS). hide, if set, makes descriptors' values
// pseudonyms (--pseudonymise-keys).
func startEnvoy(f EnvoyConfig, eng *engine.Engine, cfg envoyConfig, waits bool, opts []grpc.ServerOption, hide func(tenant, name, value string) string, m *metrics.GRPC, log *slog.Logger) (*rlsServer, error) {
	r := &rlsServer{done: make(chan struct{})}
	if f.GRPCAddr == "" {
		close(r.done)
		r.once.Do(func() {})
		return r, nil
	}
	counting, err := f.counting()
	if err != nil {
		return nil, err
	}
	headers := envoyrls.Headers{}
	if f.Headers {
		headers = f.headerNames()
		if err := headers.Validate(); err != nil {
			return nil, fmt.Errorf("serve: --envoy-header-*: %w", err)
		}
	}
	ln, err := net.Listen("tcp", f.GRPCAddr)
	if err != nil {
		return nil, fmt.Errorf("serve: --grpc-addr: %w", err)
	}
	if !loopback.Addr(f.GRPCAddr) && f.Token == "" {
		log.Warn("the rate limit service listens off loopback without a token: anyone who reaches it can spend any domain's limits; set --grpc-token-file or keep it on a private network", "addr", f.GRPCAddr)
	}
	svc := envoyrls.New(envoyrls.Options{Limiter: eng, Config: cfg.current, Counting: counting, Headers: headers, Hide: hide,
		QuotaMode: f.QuotaMode, ShadowMode: f.ShadowMode, DynamicMetadata: f.Metadata,
		ReferenceErrors: f.ReferenceErrors})
	// A call waiting for its store holds its stream worker meanwhile; with
	// one worker a core, as for the memory store, the calls behind it
	// would each start a goroutine whose stack grows by copying (12% of
	// the server's CPU on Pebble under load, docs/benchmarks.md). 64 a
	// core keeps them on workers; the memory store, which never waits,
	// does best with one.
	workers := runtime.GOMAXPROCS(0)
	if waits {
		workers *= 64
	}
	// The metrics' interceptors come first, before the token's: they
	// count the calls it refuses. A call of a method no service has goes
	// to unknown, whose Unimplemented they count too, as "unknown".
	opts = append(opts, grpc.NumStreamWorkers(uint32(workers)),
		grpc.ChainUnaryInterceptor(m.UnaryInterceptor), grpc.ChainStreamInterceptor(m.StreamInterceptor),
		grpc.UnknownServiceHandler(unknown))
	r.svc = svc
	r.gs, r.hs = envoyrls.NewServer(svc, f.Token, opts...)
	cfg.health.serve(r.hs)
	m.Known(r.gs.GetServiceInfo())
	go func() {
		defer close(r.done)
		if err := r.gs.Serve(ln); err != nil {
			log.Error("rate limit service", "err", err)
		}
	}()
	log.Info("envoy rate limit service serving", "addr", ln.Addr().String(), "config", f.Dir,
		"domains", cfg.current().NumDomains(), "counting", counting.String(), "token", f.Token != "")
	return r, nil
}

// unknown answers a call of a method no service has, as gRPC does
// without it.
func unknown(_ any, ss grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(ss)
	return status.Errorf(codes.Unimplemented, "unknown method %s", method)
}

// stopping stops the server: health checks answer NOT_SERVING at once, calls
// in flight get up to d to finish, and the returned channel closes once
// the server has stopped. Stopping again waits for the first stop.
func (r *rlsServer) stopping(d time.Duration) <-chan struct{} {
	r.once.Do(func() {
		r.hs.Shutdown()
		go func() {
			t := time.AfterFunc(d, r.gs.Stop)
			r.gs.GracefulStop()
			t.Stop()
		}()
	})
	return r.done
}

// stop stops the server within d and waits for it.
func (r *rlsServer) stop(d time.Duration) { <-r.stopping(d) }
