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

	"github.com/sluicehq/sluice/internal/buildinfo"

	"github.com/sluicehq/sluice/config"
)

const usage = `Sluice decides rate limits for multi-tenant services.

Usage:
  sluice serve [flags]        serve the HTTP API (sluice serve -h for flags)
  sluice config check FILE    validate a configuration file
  sluice bench [flags]        load a local server and measure it (sluice bench -h)
  sluice bench-ws [flags]     load a local server's WebSocket gateway and measure it
  sluice dynamodb create-table|iam-policy|count-proxy [flags]
                              set up the DynamoDB table; print a tenant's IAM policy;
                              count the requests that reach an emulator
  sluice sim fairshare [flags] simulate 200 customers sharing one upstream quota
  sluice sim regions [flags]  simulate a limit shared by regions on global tables
  sluice check [flags] POLICY...|--endpoint NAME
                              one decision of a running server: exit 0 allowed,
                              1 denied, 2 an error (sluice check -h)
  sluice tenants [list|get|create|delete|keys] [flags]
                              a running server's tenants, and their API keys
  sluice keys [flags]         the heaviest keys a running server saw, and their state
  sluice block [list|remove] [flags]
                              block a key of a tenant for a time; list, lift blocks
                              (these commands: --server, $SLUICE_SERVER; the admin key
                              from $SLUICE_ADMIN_KEY or --admin-key-file)
  sluice version              print the version, commit and Go version (also --version)
  sluice help                 print this help
`

// version and commit are set at build time with -ldflags "-X
// main.version=... -X main.commit=..." (the Makefile does).
var (
	version = "dev"
	commit  = ""
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		os.Exit(exitCode(err, os.Stderr)) // 2; a check denied 1 (cli.go)
	}
}

// run executes one command; ctx is cancelled on SIGINT or SIGTERM. A
// command asked for help (-h, -help, --help) prints it to stdout and
// succeeds.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	err := command(ctx, args, stdout, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return err
}

// isHelp reports whether arg asks for help.
func isHelp(arg string) bool {
	switch arg {
	case "help", "-h", "-help", "--help":
		return true
	}
	return false
}

// parseFlags parses args with fs. Asked for help, it prints the flags to
// stdout and returns flag.ErrHelp; at a bad flag, it prints the error and
// the flags to stderr and returns the error.
func parseFlags(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	fs.SetOutput(stderr)
	fs.Usage = func() {} // printed below, to the right writer
	err := fs.Parse(args)
	w := stderr
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		w = stdout
	}
	fmt.Fprintf(w, "Usage of %s:\n", fs.Name())
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(stderr)
	return err
}

func command(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command given")
	}
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], stdout, stderr)
	case "config":
		return configCmd(args[1:], stdout)
	case "bench":
		return bench(ctx, args[1:], stdout, stderr)
	case "bench-ws":
		return benchWS(ctx, args[1:], stdout, stderr)
	case "dynamodb":
		return dynamodbCmd(ctx, args[1:], stdout, stderr)
	case "sim":
		return simCmd(ctx, args[1:], stdout, stderr)
	case "check":
		return checkCmd(ctx, args[1:], stdout, stderr)
	case "tenants":
		return tenantsCmd(ctx, args[1:], stdout, stderr)
	case "keys":
		return keysCmd(ctx, args[1:], stdout, stderr)
	case "block":
		return blockCmd(ctx, args[1:], stdout, stderr)
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, buildinfo.Read(version, commit))
		return nil
	}
	if isHelp(args[0]) {
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}

const configUsage = "usage: sluice config check FILE"

// configCmd runs `sluice config check FILE`.
func configCmd(args []string, stdout io.Writer) error {
	if len(args) > 0 && isHelp(args[len(args)-1]) {
		fmt.Fprintln(stdout, configUsage)
		return nil
	}
	if len(args) != 2 || args[0] != "check" {
		return errors.New(configUsage)
	}
	c, err := config.Load(args[1])
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: ok: %d policies, %d endpoints, %d tiers, %d tenants, %d upstreams\n", args[1], len(c.Policies), len(c.Endpoints), len(c.Tiers), len(c.Tenants), len(c.Upstreams))
	return nil
}
