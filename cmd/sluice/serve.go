package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/httpapi"
	"github.com/sluicehq/sluice/store/memstore"
)

// serveConfig is the configuration of `sluice serve`.
type serveConfig struct {
	Addr            string
	Store           string
	MaxKeys         int
	ShutdownTimeout time.Duration
	LogFormat       string
}

func parseServe(args []string, stderr io.Writer) (serveConfig, error) {
	var c serveConfig
	fs := flag.NewFlagSet("sluice serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.Addr, "addr", "127.0.0.1:8080", "`address` to listen on")
	fs.StringVar(&c.Store, "store", "memory", "state store: memory")
	fs.IntVar(&c.MaxKeys, "max-keys", 1_000_000, "most keys the memory store holds; new keys past it are refused (503)")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", 10*time.Second, "how long to drain in-flight requests on SIGINT/SIGTERM")
	fs.StringVar(&c.LogFormat, "log-format", "text", "log format: text or json")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("serve: unexpected argument %q", fs.Arg(0))
	}
	switch {
	case c.Store != "memory":
		return c, fmt.Errorf("serve: --store %q is not supported (want memory)", c.Store)
	case c.MaxKeys <= 0:
		return c, fmt.Errorf("serve: --max-keys must be positive, got %d", c.MaxKeys)
	case c.ShutdownTimeout <= 0:
		return c, fmt.Errorf("serve: --shutdown-timeout must be positive, got %v", c.ShutdownTimeout)
	case c.LogFormat != "text" && c.LogFormat != "json":
		return c, fmt.Errorf("serve: --log-format must be text or json, got %q", c.LogFormat)
	}
	return c, nil
}

// serve runs the HTTP API until ctx is cancelled, then drains in-flight
// requests for up to the shutdown timeout.
func serve(ctx context.Context, args []string, stderr io.Writer) error {
	c, err := parseServe(args, stderr)
	if err != nil {
		return err
	}
	var log *slog.Logger
	if c.LogFormat == "json" {
		log = slog.New(slog.NewJSONHandler(stderr, nil))
	} else {
		log = slog.New(slog.NewTextHandler(stderr, nil))
	}

	var store sluice.Store = memstore.New(memstore.Options{MaxKeys: c.MaxKeys})
	defer store.Close()
	eng := engine.New(store, engine.Options{})

	ln, err := net.Listen("tcp", c.Addr)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	srv := &http.Server{
		Handler:           httpapi.New(eng, log),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      15 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("sluice serving", "addr", ln.Addr().String(), "store", c.Store, "version", version)

	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down: draining in-flight requests", "timeout", c.ShutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), c.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("serve: shutdown: %w", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	log.Info("stopped")
	return nil
}
