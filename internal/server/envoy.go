package server

import (
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"sync"
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
}

// envoyConfig is the Envoy configuration in force: a watched directory, or
// none.
type envoyConfig struct {
	watcher *envoyrls.Watcher
	empty   *envoyrls.Config
}

func loadEnvoy(f EnvoyConfig, log *slog.Logger) (envoyConfig, error) {
	if f.Dir == "" {
		c, _ := envoyrls.Parse(nil)
		return envoyConfig{empty: c}, nil
	}
	w, err := envoyrls.NewWatcher(f.Dir, log, nil)
	if err != nil {
		return envoyConfig{}, fmt.Errorf("serve: %w", err)
	}
	return envoyConfig{watcher: w}, nil
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
	ln, err := net.Listen("tcp", f.GRPCAddr)
	if err != nil {
		return nil, fmt.Errorf("serve: --grpc-addr: %w", err)
	}
	if !loopback.Addr(f.GRPCAddr) && f.Token == "" {
		log.Warn("the rate limit service listens off loopback without a token: anyone who reaches it can spend any domain's limits; set --grpc-token-file or keep it on a private network", "addr", f.GRPCAddr)
	}
	headers := envoyrls.Headers{}
	if f.Headers {
		headers = envoyrls.DefaultHeaders
	}
	svc := envoyrls.New(envoyrls.Options{Limiter: eng, Config: cfg.current, PerDescriptor: f.PerDescriptor, Headers: headers, Hide: hide})
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
	m.Known(r.gs.GetServiceInfo())
	go func() {
		defer close(r.done)
		if err := r.gs.Serve(ln); err != nil {
			log.Error("rate limit service", "err", err)
		}
	}()
	log.Info("envoy rate limit service serving", "addr", ln.Addr().String(), "config", f.Dir,
		"domains", len(cfg.current().Domains()), "per_descriptor", f.PerDescriptor, "token", f.Token != "")
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
