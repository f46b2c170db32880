package main

import (
	"flag"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// The compatible mode of envoyproxy/ratelimit (--envoy-compat, also when
// the binary runs as "ratelimit"): serve reads the reference's environment
// variables into its flags, so that a Deployment of the reference can swap
// its image and keep its env, and answers as the reference does (its
// counting, its errors, its HTTP routes). docs/envoy.md has the table of
// every variable of the reference: read, accepted or refused.
//
// The variables are read only in this mode: names such as PORT, HOST and
// LOG_LEVEL are too common to read otherwise. A flag given, on the
// command line or by its SLUICE_ variable, wins over them.

// ratelimitName is the name of the reference's binary: sluice run by that
// name (a link, as the image's /bin/ratelimit) is `sluice serve
// --envoy-compat`.
const ratelimitName = "ratelimit"

// compatArgs returns the command's arguments of the binary run as argv0
// with args: `serve --envoy-compat` and args when argv0 is ratelimit.
func compatArgs(argv0 string, args []string) []string {
	if filepath.Base(argv0) != ratelimitName {
		return args
	}
	return append([]string{"serve", "--envoy-compat"}, args...)
}

// registerCompat defines --envoy-compat into on.
func registerCompat(fs *flag.FlagSet, on *bool) {
	fs.BoolVar(on, "envoy-compat", false, "envoyproxy/ratelimit's compatible mode: read its environment variables (PORT, GRPC_PORT, RUNTIME_ROOT, SHADOW_MODE, ...; docs/envoy.md) into these flags, where not given; count and answer errors as it does; serve its /healthcheck and /json on --addr, and, without an admin key off loopback, those and /healthz and /readyz alone (also when run as \"ratelimit\")")
}

// refDefaults are the reference's defaults of the variables read
// (src/settings/settings.go), those that are not the flags' own.
var refDefaults = map[string]string{
	"PORT":                      "8080",
	"GRPC_PORT":                 "8081",
	"RUNTIME_ROOT":              "/srv/runtime_data/current",
	"RUNTIME_APPDIRECTORY":      "config",
	"BACKEND_TYPE":              "redis",
	"CONFIG_TYPE":               "FILE",
	"LOCAL_CACHE_SIZE_IN_BYTES": "0",
	// --envoy-counting reference, the mode's
	"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "false",
}

// compatRule reads some of the reference's variables into a flag, or only
// checks them.
type compatRule struct {
	flag string   // the flag set; "" for a check alone
	vars []string // the variables read
	// value returns the flag's value ("": leave it alone) from get, which
	// returns a variable's value, or its default in the reference; or
	// the error refusing the variables, naming the one at fault.
	value func(get func(string) string) (string, error)
	// skipIf are flags that, given, leave this one alone: its synonyms.
	skipIf []string
	// note, for a check alone, is logged at the start when the variable
	// is set and true: what Sluice does instead.
	note string
}

// compatRules are the variables of the reference the compatible mode
// reads or refuses; those of Redis are redisRules.
var compatRules = append([]compatRule{
	{flag: "addr", vars: []string{"HOST", "PORT"}, value: hostPort("HOST", "PORT")},
	{flag: "grpc-addr", vars: []string{"GRPC_HOST", "GRPC_PORT"}, value: hostPort("GRPC_HOST", "GRPC_PORT")},
	{vars: []string{"GRPC_UDS"}, value: refuseSet("GRPC_UDS", "a Unix socket is not offered: Sluice serves gRPC on TCP ($GRPC_HOST and $GRPC_PORT, or --grpc-addr)")},
	// TLS, read only with GRPC_SERVER_USE_TLS=true, as the reference does.
	{vars: []string{"GRPC_SERVER_USE_TLS", "GRPC_SERVER_TLS_CERT", "GRPC_SERVER_TLS_KEY", "GRPC_CLIENT_TLS_CACERT", "GRPC_CLIENT_TLS_SAN"}, value: checkTLS},
	{flag: "tls-cert", vars: []string{"GRPC_SERVER_USE_TLS", "GRPC_SERVER_TLS_CERT"}, value: withTLS("GRPC_SERVER_TLS_CERT")},
	{flag: "tls-key", vars: []string{"GRPC_SERVER_USE_TLS", "GRPC_SERVER_TLS_KEY"}, value: withTLS("GRPC_SERVER_TLS_KEY")},
	{flag: "grpc-client-ca", vars: []string{"GRPC_SERVER_USE_TLS", "GRPC_CLIENT_TLS_CACERT"}, value: withTLS("GRPC_CLIENT_TLS_CACERT")},
	{flag: "grpc-client-san", vars: []string{"GRPC_SERVER_USE_TLS", "GRPC_CLIENT_TLS_SAN"}, value: withTLS("GRPC_CLIENT_TLS_SAN")},
	{flag: "envoy-config", vars: []string{"RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_APPDIRECTORY"}, value: func(get func(string) string) (string, error) {
		return filepath.Join(get("RUNTIME_ROOT"), get("RUNTIME_SUBDIRECTORY"), get("RUNTIME_APPDIRECTORY")), nil
	}},
	{vars: []string{"CONFIG_TYPE"}, value: oneOf("CONFIG_TYPE", "FILE", "GRPC_XDS_SOTW",
		"the xDS configuration source is not offered: Sluice reads the YAML files of $RUNTIME_ROOT/$RUNTIME_SUBDIRECTORY/$RUNTIME_APPDIRECTORY (CONFIG_TYPE=FILE)")},
	{vars: []string{"BACKEND_TYPE"}, value: oneOf("BACKEND_TYPE", "redis", "memcache",
		"Sluice has no memcached store (docs/envoy.md names those it has)")},
	{flag: "log-level", vars: []string{"LOG_LEVEL"}, value: logLevel},
	{flag: "log-format", vars: []string{"LOG_FORMAT"}, value: func(get func(string) string) (string, error) {
		switch v := get("LOG_FORMAT"); {
		case v == "":
			return "", nil
		case strings.EqualFold(v, "json"):
			return "json", nil
		default:
			return "text", nil // the reference's text for any other
		}
	}},
	{flag: "envoy-shadow-mode", vars: []string{"SHADOW_MODE"}, value: boolValue("SHADOW_MODE")},
	{flag: "envoy-quota-mode", vars: []string{"QUOTA_MODE"}, value: boolValue("QUOTA_MODE")},
	{flag: "envoy-dynamic-metadata", vars: []string{"RESPONSE_DYNAMIC_METADATA"}, value: boolValue("RESPONSE_DYNAMIC_METADATA")},
	{flag: "envoy-response-headers", vars: []string{"LIMIT_RESPONSE_HEADERS_ENABLED"}, value: boolValue("LIMIT_RESPONSE_HEADERS_ENABLED")},
	{flag: "envoy-header-limit", vars: []string{"LIMIT_LIMIT_HEADER"}, value: stringValue("LIMIT_LIMIT_HEADER")},
	{flag: "envoy-header-remaining", vars: []string{"LIMIT_REMAINING_HEADER"}, value: stringValue("LIMIT_REMAINING_HEADER")},
	{flag: "envoy-header-reset", vars: []string{"LIMIT_RESET_HEADER"}, value: stringValue("LIMIT_RESET_HEADER")},
	{flag: "envoy-merge-domains", vars: []string{"MERGE_DOMAIN_CONFIG"}, value: boolValue("MERGE_DOMAIN_CONFIG")},
	{flag: "envoy-counting", vars: []string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT"}, skipIf: []string{"envoy-per-descriptor"},
		value: func(get func(string) string) (string, error) {
			stop, err := refBool(get, "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT")
			if stop {
				return "all-or-nothing", err
			}
			return "reference", err
		}},
	{flag: "envoy-start-without-config", vars: []string{"FORCE_START_WITHOUT_INITIAL_CONFIG"}, value: boolValue("FORCE_START_WITHOUT_INITIAL_CONFIG")},
	{flag: "envoy-health-needs-config", vars: []string{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED"}, value: boolValue("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED")},
	{flag: "envoy-reference-errors", value: func(func(string) string) (string, error) { return "true", nil }},
	{vars: []string{"LOCAL_CACHE_SIZE_IN_BYTES"}, value: func(get func(string) string) (string, error) {
		// Sluice's deny cache, of the stores across a network, needs no
		// size: the value is checked and accepted.
		if n, err := refInt(get, "LOCAL_CACHE_SIZE_IN_BYTES"); err != nil || n < 0 {
			return "", fmt.Errorf("$LOCAL_CACHE_SIZE_IN_BYTES=%q: want a size in bytes, an integer, 0 or more", get("LOCAL_CACHE_SIZE_IN_BYTES"))
		}
		return "", nil
	}},
	{vars: []string{"USE_STATSD"}, value: boolValue("USE_STATSD"), note: "Sluice sends no statsd; its metrics are Prometheus's, on --addr's /metrics"},
	{vars: []string{"USE_DOG_STATSD"}, value: boolValue("USE_DOG_STATSD"), note: "Sluice sends no DogStatsD; its metrics are Prometheus's, on --addr's /metrics"},
	{vars: []string{"USE_PROMETHEUS"}, value: boolValue("USE_PROMETHEUS"), note: "Sluice's Prometheus metrics are on --addr's /metrics, not on $PROMETHEUS_ADDR, and have Sluice's names"},
	{vars: []string{"TRACING_ENABLED"}, value: boolValue("TRACING_ENABLED"), note: "Sluice exports no traces"},
}, redisRules...)

// compat is what the compatible mode did to serve's flags.
type compat struct {
	from  map[string][]string // of each flag set, the variables read
	notes []string            // to log at the start
}

// applyCompat sets each flag of fs that was not given from the reference's
// variables in environ (KEY=VALUE pairs, as os.Environ returns them), or
// their defaults in the reference, and the mode's defaults of the rest:
// explicit flags win. An empty variable is as if unset. A value the
// reference would not read, or a setting Sluice does not offer, is an
// error naming the variable; so is a variable set whose flag this build
// does not have.
func applyCompat(fs *flag.FlagSet, environ []string) (compat, error) {
	c := compat{from: map[string][]string{}}
	env := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && v != "" {
			env[k] = v
		}
	}
	get := func(k string) string {
		if v, ok := env[k]; ok {
			return v
		}
		return refDefaults[k]
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	for _, r := range compatRules {
		v, err := r.value(get)
		if err != nil {
			return c, fmt.Errorf("serve: --envoy-compat: %w", err)
		}
		var set []string
		for _, k := range r.vars {
			if _, ok := env[k]; ok {
				set = append(set, k)
			}
		}
		if r.flag == "" {
			if r.note != "" && v == "true" && len(set) > 0 {
				c.notes = append(c.notes, fmt.Sprintf("$%s=%s: %s", r.vars[0], env[r.vars[0]], r.note))
			}
			continue
		}
		if v == "" || given[r.flag] || slices.ContainsFunc(r.skipIf, func(f string) bool { return given[f] }) {
			continue
		}
		if fs.Lookup(r.flag) == nil {
			if len(set) == 0 {
				continue // the reference's default, of a behaviour this build lacks
			}
			return c, fmt.Errorf("serve: --envoy-compat: $%s is read into --%s, which this build of sluice does not have", strings.Join(set, ", $"), r.flag)
		}
		if err := fs.Set(r.flag, v); err != nil {
			return c, fmt.Errorf("serve: --envoy-compat: %s (--%s): invalid value %q: %w", dollars(r.vars), r.flag, v, err)
		}
		c.from[r.flag] = r.vars
	}
	slices.Sort(c.notes)
	if f := fs.Lookup("grpc-addr"); f != nil && f.Value.String() == "" {
		return c, fmt.Errorf("serve: --envoy-compat serves the rate limit service: --grpc-addr must not be empty")
	}
	return c, nil
}

// explain returns err, an error of serve's flags, naming the variables of
// the reference that set the flags it names.
func (c compat) explain(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	var from []string
	for flag, vars := range c.from {
		if len(vars) > 0 && mentions(msg, "--"+flag) {
			from = append(from, fmt.Sprintf("--%s is from %s in --envoy-compat", flag, dollars(vars)))
		}
	}
	if len(from) == 0 {
		return err
	}
	slices.Sort(from)
	return fmt.Errorf("%w (%s)", err, strings.Join(from, "; "))
}

// mentions reports whether msg names the flag name, not a longer one.
func mentions(msg, name string) bool {
	for i := 0; ; {
		j := strings.Index(msg[i:], name)
		if j < 0 {
			return false
		}
		end := i + j + len(name)
		if end == len(msg) || !(msg[end] == '-' || msg[end] >= 'a' && msg[end] <= 'z') {
			return true
		}
		i = end
	}
}

// dollars names variables as a shell does: $A, $B.
func dollars(vars []string) string {
	return "$" + strings.Join(vars, ", $")
}

// refBool reads the variable name as the reference does
// (strconv.ParseBool).
func refBool(get func(string) string, name string) (bool, error) {
	v := get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("$%s=%q: want true or false (or 1, t, T, TRUE, True, 0, f, F, FALSE, False)", name, v)
	}
	return b, nil
}

// refInt reads the variable name as the reference does
// (strconv.ParseInt, with base prefixes).
func refInt(get func(string) string, name string) (int64, error) {
	v := get(name)
	n, err := strconv.ParseInt(v, 0, 64)
	if err != nil {
		return 0, fmt.Errorf("$%s=%q: want an integer", name, v)
	}
	return n, nil
}

// boolValue is the value of a boolean flag of the variable name.
func boolValue(name string) func(func(string) string) (string, error) {
	return func(get func(string) string) (string, error) {
		b, err := refBool(get, name)
		return strconv.FormatBool(b), err
	}
}

// stringValue is the value of the variable name, as it is.
func stringValue(name string) func(func(string) string) (string, error) {
	return func(get func(string) string) (string, error) { return get(name), nil }
}

// hostPort is the address of the variables host and port. The reference's
// host 0.0.0.0, when not set, is every address, IPv6 too.
func hostPort(host, port string) func(func(string) string) (string, error) {
	return func(get func(string) string) (string, error) {
		p, err := refInt(get, port)
		if err != nil {
			return "", err
		}
		if p < 0 || p > 65535 {
			return "", fmt.Errorf("$%s=%q: not a port (0 to 65535)", port, get(port))
		}
		return net.JoinHostPort(get(host), strconv.FormatInt(p, 10)), nil
	}
}

// logLevel is --log-level of $LOG_LEVEL, a level of the reference's logger
// (logrus): trace is debug, and fatal and panic are error.
func logLevel(get func(string) string) (string, error) {
	switch v := strings.ToLower(get("LOG_LEVEL")); v {
	case "":
		return "", nil
	case "trace", "debug":
		return "debug", nil
	case "info":
		return "info", nil
	case "warn", "warning":
		return "warn", nil
	case "error", "fatal", "panic":
		return "error", nil
	}
	return "", fmt.Errorf("$LOG_LEVEL=%q: not a level (trace, debug, info, warn, error, fatal or panic)", get("LOG_LEVEL"))
}

// oneOf reads the variable name, whose values in the reference are
// accepted and refused: the first is accepted, the second refused for
// why, any other refused as the reference refuses it.
func oneOf(name, accepted, refused, why string) func(func(string) string) (string, error) {
	return func(get func(string) string) (string, error) {
		switch v := get(name); v {
		case accepted:
			return "", nil
		case refused:
			return "", fmt.Errorf("$%s=%s: %s", name, v, why)
		default:
			return "", fmt.Errorf("$%s=%q: not a value of the reference's (%s or %s)", name, v, accepted, refused)
		}
	}
}

// refuseSet refuses the variable name set to anything.
func refuseSet(name, why string) func(func(string) string) (string, error) {
	return func(get func(string) string) (string, error) {
		if v := get(name); v != "" {
			return "", fmt.Errorf("$%s=%q: %s", name, v, why)
		}
		return "", nil
	}
}

// refuseTrue refuses the boolean variable name set to true.
func refuseTrue(name, why string) func(func(string) string) (string, error) {
	return func(get func(string) string) (string, error) {
		b, err := refBool(get, name)
		if err == nil && b {
			err = fmt.Errorf("$%s=%s: %s", name, get(name), why)
		}
		return "", err
	}
}

// withTLS is the value of the variable name when GRPC_SERVER_USE_TLS is
// true; the reference reads it only then.
func withTLS(name string) func(func(string) string) (string, error) {
	return func(get func(string) string) (string, error) {
		if on, err := refBool(get, "GRPC_SERVER_USE_TLS"); err != nil || !on {
			return "", err
		}
		return get(name), nil
	}
}

// checkTLS refuses GRPC_SERVER_USE_TLS=true without a certificate, which
// the reference cannot start without either, and a SAN without a client
// CA, which the reference ignores: refused, so that no one believes
// clients are checked when none is.
func checkTLS(get func(string) string) (string, error) {
	on, err := refBool(get, "GRPC_SERVER_USE_TLS")
	switch {
	case err != nil || !on:
		return "", err
	case get("GRPC_SERVER_TLS_CERT") == "" || get("GRPC_SERVER_TLS_KEY") == "":
		return "", fmt.Errorf("$GRPC_SERVER_USE_TLS=%s needs $GRPC_SERVER_TLS_CERT and $GRPC_SERVER_TLS_KEY, the certificate served (read into --tls-cert and --tls-key, which serve both ports, HTTP and gRPC, over TLS)", get("GRPC_SERVER_USE_TLS"))
	case get("GRPC_CLIENT_TLS_SAN") != "" && get("GRPC_CLIENT_TLS_CACERT") == "":
		return "", fmt.Errorf("$GRPC_CLIENT_TLS_SAN=%q needs $GRPC_CLIENT_TLS_CACERT: without a client CA no client certificate is asked, and the SAN checks nothing (the reference ignores it then)", get("GRPC_CLIENT_TLS_SAN"))
	}
	return "", nil
}
