package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/sluicehq/sluice/internal/benchcheck"
)

// bench runs `sluice bench`: it drives POST /v1/check (or Envoy's rate
// limit service) and prints what it measured.
func bench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := parseBench(args, stdout, stderr)
	if err != nil {
		return err
	}
	res, err := benchcheck.Run(ctx, c)
	if err != nil {
		return err
	}
	fmt.Fprint(stdout, res)
	return nil
}

func parseBench(args []string, stdout, stderr io.Writer) (benchcheck.Config, error) {
	var c benchcheck.Config
	fs := flag.NewFlagSet("sluice bench", flag.ContinueOnError)
	fs.StringVar(&c.URL, "url", "http://127.0.0.1:8080", "the sluice server, on loopback")
	fs.IntVar(&c.Workers, "workers", 50, "concurrent workers, each on its own keep-alive connection")
	fs.IntVar(&c.Keys, "keys", 1000, "distinct keys, spread over the workers")
	fs.DurationVar(&c.Duration, "duration", 10*time.Second, "how long to send (at most 10m)")
	fs.Int64Var(&c.MaxReqs, "requests", 10_000_000, "stop after this many requests")
	fs.StringVar(&c.APIKey, "api-key", "", "API key, if the server requires one")
	fs.StringVar(&c.Policy, "policy", benchcheck.DefaultPolicy, "inline policy JSON of each check")
	fs.StringVar(&c.GRPC, "grpc", "", "drive Envoy's rate limit service (ShouldRateLimit) at this loopback `address` instead of POST /v1/check; --url still reads the server's /metrics")
	fs.UintVar(&c.GRPCLimit, "grpc-limit", 1_000_000, "with --grpc: each descriptor's limit per minute, sent as the request's override (0: none, the rule decides). The server must configure the domain \"bench\" (--envoy-config bench/envoy): a domain not configured is answered OK, uncounted")
	return c, parseFlags(fs, args, stdout, stderr)
}
