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
	"slices"
	"strings"
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
  sluice help [COMMAND]       print this help, or a command's (as COMMAND -h does)
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
	// Run as ratelimit, the reference's name: serve --envoy-compat.
	if err := run(ctx, compatArgs(os.Args[0], os.Args[1:]), os.Stdout, os.Stderr); err != nil {
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
// stdout and returns flag.ErrHelp; at a bad flag, it prints nothing and
// returns the error, with the nearest flag's name if one was misspelt and
// where the flags are listed, for the caller to print once.
func parseFlags(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	fs.SetOutput(io.Discard) // the flag package's own error and usage
	fs.Usage = func() {}
	err := fs.Parse(args)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprintf(stdout, "Usage of %s:\n", fs.Name())
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		fs.SetOutput(stderr)
		return err
	}
	fs.SetOutput(stderr)
	msg := err.Error()
	const undefined = "flag provided but not defined: -"
	if name, ok := strings.CutPrefix(msg, undefined); ok {
		var names []string
		fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
		if near, ok := nearest(strings.TrimLeft(name, "-"), names); ok {
			msg += "; did you mean --" + near + "?"
		}
	}
	return fmt.Errorf("%s (%s -h lists the flags)", msg, fs.Name())
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
		return help(ctx, args[1:], stdout, stderr)
	}
	return unknownCommand(args[0])
}

// help runs `sluice help [COMMAND [SUBCOMMAND]]`: the usage, or the
// command's help, as the command prints it asked with -h.
func help(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || isHelp(args[0]) {
		fmt.Fprint(stdout, usage)
		return nil
	}
	if !slices.Contains(commands(), args[0]) {
		return unknownCommand(args[0])
	}
	return command(ctx, append(slices.Clip(args), "-h"), stdout, stderr)
}

// unknownCommand is the error of a command that is not one: it names the
// nearest command if it was misspelt, else them all.
func unknownCommand(name string) error {
	if near, ok := nearest(name, commands()); ok {
		return fmt.Errorf("unknown command %q; did you mean %s? (sluice help lists the commands)", name, near)
	}
	return fmt.Errorf("unknown command %q: the commands are %s (sluice help says more)", name, strings.Join(commands(), ", "))
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
