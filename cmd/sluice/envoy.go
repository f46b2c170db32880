package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/envoyrls"
	"github.com/sluicehq/sluice/internal/server"
)

// registerEnvoy defines the flags of Envoy's rate limit service, and
// --grpc-token-file, whose token checkEnvoy reads, and the client
// certificates of the service into t.
func registerEnvoy(fs *flag.FlagSet, f *server.EnvoyConfig, t *server.TLSConfig, tokenFile *string) {
	fs.StringVar(&t.ClientCAFile, "grpc-client-ca", "", "PEM `file` of the CAs a client certificate of --grpc-addr must chain to: with it, with --tls-cert, a client without such a certificate is refused in the TLS handshake, health checks too (envoyproxy/ratelimit's GRPC_CLIENT_TLS_CACERT); reloaded as --tls-cert. The HTTP port asks for none")
	fs.StringVar(&t.ClientSAN, "grpc-client-san", "", "with --grpc-client-ca, a `name` the client certificate must hold among its DNS names (or its IP addresses, for an address), compared as a host name, wildcards included (envoyproxy/ratelimit's GRPC_CLIENT_TLS_SAN)")
	fs.StringVar(&f.GRPCAddr, "grpc-addr", "", "`address` to serve Envoy's rate limit service on, over gRPC (off if empty; see docs/envoy.md)")
	fs.StringVar(&f.Dir, "envoy-config", "", "`directory` of envoyproxy/ratelimit YAML files, one domain each (reloaded on SIGHUP and on change)")
	fs.BoolVar(&f.PerDescriptor, "envoy-per-descriptor", false, "decide each descriptor on its own, as envoyproxy/ratelimit does, instead of all-or-nothing: an admitted descriptor consumes even when another denies")
	fs.BoolVar(&f.Headers, "envoy-response-headers", false, "add RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset of the descriptor nearest its limit to every answer (envoyproxy/ratelimit's LIMIT_RESPONSE_HEADERS_ENABLED)")
	fs.BoolVar(&f.QuotaMode, "envoy-quota-mode", false, "make every descriptor a quota-mode one (envoyproxy/ratelimit's QUOTA_MODE): one over its limits denies a request only if every quota-mode descriptor of it is over")
	fs.BoolVar(&f.ShadowMode, "envoy-shadow-mode", false, "answer OK whatever the limits say, keeping each descriptor's status, and count as if enforcing: a dry run (envoyproxy/ratelimit's SHADOW_MODE)")
	fs.BoolVar(&f.Metadata, "envoy-dynamic-metadata", false, "add the domain, the descriptors and the metadata of the rules that passed to every answer's dynamic metadata (envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA)")
	fs.StringVar(&f.HeaderNames.Limit, "envoy-header-limit", envoyrls.DefaultHeaders.Limit, "`name` of the header of the limit, with --envoy-response-headers (envoyproxy/ratelimit's LIMIT_LIMIT_HEADER)")
	fs.StringVar(&f.HeaderNames.Remaining, "envoy-header-remaining", envoyrls.DefaultHeaders.Remaining, "`name` of the header of what is left, with --envoy-response-headers (envoyproxy/ratelimit's LIMIT_REMAINING_HEADER)")
	fs.StringVar(&f.HeaderNames.Reset, "envoy-header-reset", envoyrls.DefaultHeaders.Reset, "`name` of the header of the seconds until reset, with --envoy-response-headers (envoyproxy/ratelimit's LIMIT_RESET_HEADER)")
	fs.BoolVar(&f.Merge, "envoy-merge-domains", false, "merge the files of one domain into one, instead of refusing a domain in two files; a descriptor at the top of two files is an error (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG)")
	fs.StringVar(&f.Counting, "envoy-counting", "", "how a request's descriptors consume: all-or-nothing (the default: a denied request consumes nothing), per-descriptor (each on its own, as --envoy-per-descriptor) or reference (envoyproxy/ratelimit's own, STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false)")
	fs.BoolVar(&f.ReferenceErrors, "envoy-reference-errors", false, "answer errors as envoyproxy/ratelimit does: code Unknown with its texts, and a store failure as an Unknown error instead of the limits' fail modes' answer, for Envoy's failure_mode_deny to decide")
	fs.BoolVar(&f.StartWithoutConfig, "envoy-start-without-config", false, "start even if --envoy-config does not load (missing, or a bad file): calls fail (Unknown) until it loads (envoyproxy/ratelimit's FORCE_START_WITHOUT_INITIAL_CONFIG)")
	fs.BoolVar(&f.HealthNeedsConfig, "envoy-health-needs-config", false, "health checks answer NOT_SERVING while no domain is loaded, at start or after a reload (envoyproxy/ratelimit's HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED)")
	fs.StringVar(tokenFile, "grpc-token-file", "", "`file` holding a token every rate limit call must carry as \"authorization: Bearer <token>\" metadata (health checks excepted)")
}

// checkEnvoy checks the flags of Envoy's rate limit service, and those of
// its client certificates in t, and reads the token of tokenFile into f.
func checkEnvoy(f *server.EnvoyConfig, t server.TLSConfig, tokenFile string) error {
	switch {
	case t.ClientSAN != "" && t.ClientCAFile == "":
		return errors.New("serve: --grpc-client-san needs --grpc-client-ca: without it no client certificate is asked")
	case t.ClientCAFile != "" && t.CertFile == "":
		return errors.New("serve: --grpc-client-ca needs --tls-cert and --tls-key: a client certificate is asked over TLS")
	}
	if f.GRPCAddr == "" {
		for _, o := range []struct {
			name string
			set  bool
		}{
			{"--envoy-config", f.Dir != ""},
			{"--envoy-per-descriptor", f.PerDescriptor},
			{"--envoy-response-headers", f.Headers},
			{"--envoy-quota-mode", f.QuotaMode},
			{"--envoy-shadow-mode", f.ShadowMode},
			{"--envoy-dynamic-metadata", f.Metadata},
			{"--envoy-merge-domains", f.Merge},
			{"--envoy-counting", f.Counting != ""},
			{"--envoy-reference-errors", f.ReferenceErrors},
			{"--envoy-start-without-config", f.StartWithoutConfig},
			{"--envoy-health-needs-config", f.HealthNeedsConfig},
			{"--grpc-token-file", tokenFile != ""},
			{"--grpc-client-ca", t.ClientCAFile != ""},
		} {
			if o.set {
				return fmt.Errorf("serve: %s needs --grpc-addr, as every --envoy-* flag does", o.name)
			}
		}
	}
	if err := f.CheckCounting(); err != nil {
		return err
	}
	if err := f.HeaderNames.Validate(); err != nil {
		var se *sluice.Error
		if errors.As(err, &se) {
			return fmt.Errorf("serve: --envoy-header-%s: %s", se.Field, se.Message)
		}
		return fmt.Errorf("serve: %w", err)
	}
	switch {
	case f.Dir != "" && !f.StartWithoutConfig:
		if fi, err := os.Stat(f.Dir); err != nil || !fi.IsDir() {
			return fmt.Errorf("serve: --envoy-config %q is not a directory", f.Dir)
		}
	}
	if tokenFile != "" {
		b, err := os.ReadFile(tokenFile)
		if err != nil {
			return fmt.Errorf("serve: --grpc-token-file: %w", err)
		}
		if f.Token = strings.TrimSpace(string(b)); len(f.Token) < 16 {
			return errors.New("serve: --grpc-token-file: the token must be at least 16 characters")
		}
	}
	return nil
}
