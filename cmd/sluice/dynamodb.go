package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/countproxy"
	"github.com/sluicehq/sluice/internal/loopback"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/store/dynamostore"
)

// registerDynamo defines the flags that reach a table.
func registerDynamo(fs *flag.FlagSet, f *server.DynamoConfig) {
	fs.StringVar(&f.Table, "dynamodb-table", "sluice", "DynamoDB `table` (see sluice dynamodb create-table)")
	fs.StringVar(&f.Region, "dynamodb-region", "", "AWS `region`; default $AWS_REGION, then us-east-1")
	fs.StringVar(&f.Endpoint, "dynamodb-endpoint", "", "DynamoDB endpoint `URL`, for a local emulator; default AWS's")
}

const dynamoUsage = `Usage:
  sluice dynamodb create-table [--dynamodb-table T] [--dynamodb-region R] [--dynamodb-endpoint URL] [--replica-regions R1,R2]
      create the table (idempotent): on-demand billing, TTL on, the gsi1 index;
      with --replica-regions, a global table replicated to those regions
  sluice dynamodb iam-policy --tenant T --table-arn ARN
      print an IAM policy that reaches only tenant T's items (dynamodb:LeadingKeys)
  sluice dynamodb count-proxy --dynamodb-endpoint URL [--listen 127.0.0.1:18399] [--allow-remote]
      forward every DynamoDB request to URL (an emulator) unchanged, counting them by
      operation, and serve the counts on GET /metrics at the same address (for
      sluice bench-ws --store-metrics); until interrupted
`

func dynamodbCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, dynamoUsage)
		return errors.New("dynamodb: no subcommand")
	}
	if isHelp(args[0]) {
		fmt.Fprint(stdout, dynamoUsage)
		return nil
	}
	fs := flag.NewFlagSet("sluice dynamodb "+args[0], flag.ContinueOnError)
	switch args[0] {
	case "create-table":
		var f server.DynamoConfig
		var replicas string
		registerDynamo(fs, &f)
		fs.StringVar(&replicas, "replica-regions", "", "comma-separated AWS `regions` to replicate the table to: a global table (version 2019.11.21) for multi-region limits")
		if err := parseFlags(fs, args[1:], stdout, stderr); err != nil {
			return err
		}
		var regions []string
		for _, r := range strings.Split(replicas, ",") {
			if r = strings.TrimSpace(r); r != "" {
				regions = append(regions, r)
			}
		}
		db, err := f.Client(ctx)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		if err := dynamostore.CreateTable(ctx, db, f.Table); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "table %s is active, with TTL on attribute ttl\n", f.Table)
		if len(regions) > 0 {
			ctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
			defer cancel()
			if err := dynamostore.AddReplicas(ctx, db, f.Table, regions); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "table %s is a global table with replicas in %s\n", f.Table, strings.Join(regions, ", "))
		}
		return nil
	case "iam-policy":
		var tenant, arn string
		fs.StringVar(&tenant, "tenant", "", "the tenant the policy is for")
		fs.StringVar(&arn, "table-arn", "", "the table's ARN, arn:aws:dynamodb:REGION:ACCOUNT:table/NAME")
		if err := parseFlags(fs, args[1:], stdout, stderr); err != nil {
			return err
		}
		if !sluice.ValidID(tenant) {
			return fmt.Errorf("dynamodb iam-policy: --tenant %q is not a valid tenant id", tenant)
		}
		if arn == "" {
			return errors.New("dynamodb iam-policy: --table-arn is required")
		}
		b, err := json.MarshalIndent(dynamostore.TenantPolicy(tenant, arn), "", "  ")
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, string(b))
		return nil
	case "count-proxy":
		return countProxy(ctx, fs, args[1:], stdout, stderr)
	}
	fmt.Fprint(stderr, dynamoUsage)
	return fmt.Errorf("dynamodb: unknown subcommand %q", args[0])
}

// countProxy runs `sluice dynamodb count-proxy` until ctx ends.
func countProxy(ctx context.Context, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	var listen, endpoint string
	var remote bool
	fs.StringVar(&listen, "listen", "127.0.0.1:18399", "`address` to listen on, for the nodes' --dynamodb-endpoint and for GET /metrics")
	fs.StringVar(&endpoint, "dynamodb-endpoint", "", "the DynamoDB endpoint `URL` to forward to: an emulator such as dynoxide (the client signs for the proxy's address, which real DynamoDB refuses)")
	fs.BoolVar(&remote, "allow-remote", false, "listen on an address off loopback: anyone who reaches it reaches the store, with no key")
	if err := parseFlags(fs, args, stdout, stderr); err != nil {
		return err
	}
	if endpoint == "" {
		return errors.New("dynamodb count-proxy: --dynamodb-endpoint is required")
	}
	if !remote && !loopback.Addr(listen) {
		return fmt.Errorf("dynamodb count-proxy: --listen %q is not on loopback: the proxy forwards anyone's requests to the store, with no key; pass --allow-remote to listen there anyway", listen)
	}
	p, err := countproxy.New(endpoint)
	if err != nil {
		return err
	}
	defer p.Close()
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("dynamodb count-proxy: %w", err)
	}
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	fmt.Fprintf(stdout, "count-proxy: forwarding http://%s to %s; counts on http://%[1]s/metrics\n", ln.Addr(), endpoint)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv.Shutdown(sctx)
	<-served
	return nil
}
