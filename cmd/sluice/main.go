// Command sluice is the Sluice rate limiter: `sluice serve` runs the HTTP
// API. Run `sluice help` for the commands.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/sluicehq/sluice/config"
)

const usage = `Sluice decides rate limits for multi-tenant services.

Usage:
  sluice serve [flags]        serve the HTTP API (sluice serve -h for flags)
  sluice config check FILE    validate a configuration file
  sluice bench [flags]        load a local server and measure it (sluice bench -h)
  sluice bench-ws [flags]     load a local server's WebSocket gateway and measure it
  sluice dynamodb create-table|iam-policy [flags]
                              set up the DynamoDB table; print a tenant's IAM policy
  sluice version              print the version
  sluice help                 print this help
`

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "sluice:", err)
		}
		os.Exit(2)
	}
}

// run executes one command; ctx is cancelled on SIGINT or SIGTERM.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command given")
	}
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], stderr)
	case "config":
		return configCmd(args[1:], stdout)
	case "bench":
		return bench(ctx, args[1:], stdout, stderr)
	case "bench-ws":
		return benchWS(ctx, args[1:], stdout, stderr)
	case "dynamodb":
		return dynamodbCmd(ctx, args[1:], stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, "sluice", version)
		return nil
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}

// configCmd runs `sluice config check FILE`.
func configCmd(args []string, stdout io.Writer) error {
	if len(args) != 2 || args[0] != "check" {
		return errors.New("usage: sluice config check FILE")
	}
	c, err := config.Load(args[1])
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: ok: %d policies, %d endpoints, %d tiers, %d tenants\n", args[1], len(c.Policies), len(c.Endpoints), len(c.Tiers), len(c.Tenants))
	return nil
}
