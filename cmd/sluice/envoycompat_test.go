package main

import (
	"flag"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
)

// compatFlags is a flag set with every flag the compatible mode sets, as
// a build with every behaviour of issue 27 has them, with serve's defaults.
func compatFlags() *flag.FlagSet {
	fs := flag.NewFlagSet("sluice serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.String("addr", "127.0.0.1:8080", "")
	fs.String("grpc-addr", "", "")
	fs.String("envoy-config", "", "")
	var level slog.Level
	fs.TextVar(&level, "log-level", slog.LevelInfo, "")
	fs.String("log-format", "text", "")
	fs.Bool("envoy-per-descriptor", false, "")
	fs.Bool("envoy-response-headers", false, "")
	for _, name := range []string{"envoy-shadow-mode", "envoy-quota-mode", "envoy-dynamic-metadata", "envoy-merge-domains",
		"envoy-reference-errors", "envoy-start-without-config", "envoy-health-needs-config"} {
		fs.Bool(name, false, "")
	}
	fs.String("envoy-header-limit", "RateLimit-Limit", "")
	fs.String("envoy-header-remaining", "RateLimit-Remaining", "")
	fs.String("envoy-header-reset", "RateLimit-Reset", "")
	fs.String("envoy-counting", "all-or-nothing", "")
	return fs
}

// flagValues returns every flag's value of fs.
func flagValues(fs *flag.FlagSet) map[string]string {
	m := map[string]string{}
	fs.VisitAll(func(f *flag.Flag) { m[f.Name] = f.Value.String() })
	return m
}

// TestCompatEnvDefaults: with none of the reference's variables set, the
// compatible mode takes the reference's defaults: gRPC on :8081, HTTP on
// :8080, the configuration in /srv/runtime_data/current/config, the
// reference's counting and errors; the rest as the flags' defaults.
func TestCompatEnvDefaults(t *testing.T) {
	fs := compatFlags()
	if _, err := applyCompat(fs, nil); err != nil {
		t.Fatal(err)
	}
	want := flagValues(compatFlags())
	for k, v := range map[string]string{
		"addr": ":8080", "grpc-addr": ":8081", "envoy-config": "/srv/runtime_data/current/config",
		"envoy-counting": "reference", "envoy-reference-errors": "true",
	} {
		want[k] = v
	}
	for k, v := range flagValues(fs) {
		if want[k] != v {
			t.Errorf("--%s=%q, want %q", k, v, want[k])
		}
	}
}

// TestCompatEnv: each variable the compatible mode reads sets its flag, as
// the reference reads it.
func TestCompatEnv(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		want map[string]string
	}{
		{[]string{"PORT=9090"}, map[string]string{"addr": ":9090"}},
		{[]string{"HOST=127.0.0.1", "PORT=0x2382"}, map[string]string{"addr": "127.0.0.1:9090"}}, // base prefixes, as strconv.ParseInt(v, 0, ...)
		{[]string{"HOST=::1", "PORT=80"}, map[string]string{"addr": "[::1]:80"}},
		{[]string{"GRPC_HOST=0.0.0.0", "GRPC_PORT=9091"}, map[string]string{"grpc-addr": "0.0.0.0:9091"}},
		{[]string{"RUNTIME_ROOT=/data", "RUNTIME_SUBDIRECTORY=ratelimit"}, map[string]string{"envoy-config": "/data/ratelimit/config"}},
		{[]string{"RUNTIME_ROOT=/data/", "RUNTIME_APPDIRECTORY=rl"}, map[string]string{"envoy-config": "/data/rl"}},
		{[]string{"LOG_LEVEL=debug"}, map[string]string{"log-level": "DEBUG"}},
		{[]string{"LOG_LEVEL=TRACE"}, map[string]string{"log-level": "DEBUG"}},
		{[]string{"LOG_LEVEL=Warning"}, map[string]string{"log-level": "WARN"}},
		{[]string{"LOG_LEVEL=fatal"}, map[string]string{"log-level": "ERROR"}},
		{[]string{"LOG_FORMAT=JSON"}, map[string]string{"log-format": "json"}},
		{[]string{"LOG_FORMAT=logfmt"}, map[string]string{"log-format": "text"}},
		{[]string{"SHADOW_MODE=true"}, map[string]string{"envoy-shadow-mode": "true"}},
		{[]string{"SHADOW_MODE=1"}, map[string]string{"envoy-shadow-mode": "true"}},
		{[]string{"QUOTA_MODE=T"}, map[string]string{"envoy-quota-mode": "true"}},
		{[]string{"RESPONSE_DYNAMIC_METADATA=TRUE"}, map[string]string{"envoy-dynamic-metadata": "true"}},
		{[]string{"MERGE_DOMAIN_CONFIG=true"}, map[string]string{"envoy-merge-domains": "true"}},
		{[]string{"LIMIT_RESPONSE_HEADERS_ENABLED=true", "LIMIT_LIMIT_HEADER=A-Limit", "LIMIT_REMAINING_HEADER=A-Left", "LIMIT_RESET_HEADER=A-Reset"},
			map[string]string{"envoy-response-headers": "true", "envoy-header-limit": "A-Limit", "envoy-header-remaining": "A-Left", "envoy-header-reset": "A-Reset"}},
		{[]string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true"}, map[string]string{"envoy-counting": "all-or-nothing"}},
		{[]string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false"}, map[string]string{"envoy-counting": "reference"}},
		{[]string{"FORCE_START_WITHOUT_INITIAL_CONFIG=true"}, map[string]string{"envoy-start-without-config": "true"}},
		{[]string{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=true"}, map[string]string{"envoy-health-needs-config": "true"}},
		// Accepted: read, checked, and ignored.
		{[]string{"USE_STATSD=false", "LOCAL_CACHE_SIZE_IN_BYTES=1000", "BACKEND_TYPE=redis", "CONFIG_TYPE=FILE", "NEAR_LIMIT_RATIO=0.9",
			"GRPC_MAX_CONNECTION_AGE=1h", "MEMCACHE_HOST_PORT=m:11211", "TRACING_ENABLED=false"}, map[string]string{}},
		// An empty variable is as if unset, as for SLUICE_ variables.
		{[]string{"PORT=", "SHADOW_MODE="}, map[string]string{}},
	} {
		fs := compatFlags()
		if _, err := applyCompat(fs, tc.env); err != nil {
			t.Errorf("%v: %v", tc.env, err)
			continue
		}
		got := flagValues(fs)
		for k, v := range tc.want {
			if got[k] != v {
				t.Errorf("%v: --%s=%q, want %q", tc.env, k, got[k], v)
			}
		}
		// Nothing else moves from the defaults of the mode.
		def := compatFlags()
		applyCompat(def, nil)
		for k, v := range flagValues(def) {
			if _, ok := tc.want[k]; !ok && got[k] != v {
				t.Errorf("%v: --%s=%q, want the mode's default %q", tc.env, k, got[k], v)
			}
		}
	}
}

// TestCompatEnvExplicitWins: a flag given, on the command line or by its
// SLUICE_ variable, wins over the reference's variables and the mode's
// defaults; --envoy-per-descriptor, the synonym of a counting, wins over
// the counting of STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT.
func TestCompatEnvExplicitWins(t *testing.T) {
	fs := compatFlags()
	if err := fs.Parse([]string{"--addr", "127.0.0.1:1", "--envoy-shadow-mode=false", "--envoy-per-descriptor", "--envoy-config", "/etc/rl"}); err != nil {
		t.Fatal(err)
	}
	if _, err := applyEnv(fs, []string{"SLUICE_GRPC_ADDR=127.0.0.1:2"}); err != nil {
		t.Fatal(err)
	}
	if _, err := applyCompat(fs, []string{"PORT=3", "GRPC_PORT=4", "SHADOW_MODE=true", "RUNTIME_ROOT=/data"}); err != nil {
		t.Fatal(err)
	}
	got := flagValues(fs)
	for k, v := range map[string]string{"addr": "127.0.0.1:1", "grpc-addr": "127.0.0.1:2", "envoy-shadow-mode": "false",
		"envoy-per-descriptor": "true", "envoy-counting": "all-or-nothing", "envoy-config": "/etc/rl"} {
		if got[k] != v {
			t.Errorf("--%s=%q, want %q", k, got[k], v)
		}
	}
}

// TestCompatEnvRefused: a value the reference would not read, or a setting
// Sluice does not offer, stops the start with the variable named and why.
func TestCompatEnvRefused(t *testing.T) {
	for _, tc := range []struct {
		env  string
		want []string
	}{
		{"PORT=abc", []string{"$PORT", "abc", "integer"}},
		{"PORT=70000", []string{"$PORT", "port"}},
		{"GRPC_PORT=-1", []string{"$GRPC_PORT", "port"}},
		{"SHADOW_MODE=maybe", []string{"$SHADOW_MODE", "maybe", "true or false"}},
		{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=yes", []string{"$STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true or false"}},
		{"LOG_LEVEL=loud", []string{"$LOG_LEVEL", "loud", "debug"}},
		{"LOCAL_CACHE_SIZE_IN_BYTES=-5", []string{"$LOCAL_CACHE_SIZE_IN_BYTES"}},
		{"LOCAL_CACHE_SIZE_IN_BYTES=1k", []string{"$LOCAL_CACHE_SIZE_IN_BYTES", "integer"}},
		{"USE_STATSD=si", []string{"$USE_STATSD", "true or false"}},
		{"BACKEND_TYPE=memcache", []string{"$BACKEND_TYPE", "memcache"}},
		{"BACKEND_TYPE=cassandra", []string{"$BACKEND_TYPE", "redis"}},
		{"CONFIG_TYPE=GRPC_XDS_SOTW", []string{"$CONFIG_TYPE", "xDS"}},
		{"CONFIG_TYPE=file", []string{"$CONFIG_TYPE", "FILE"}},
		{"GRPC_UDS=/tmp/rl.sock", []string{"$GRPC_UDS", "Unix"}},
		{"GRPC_SERVER_USE_TLS=true", []string{"$GRPC_SERVER_USE_TLS", "--tls-cert"}},
	} {
		_, err := applyCompat(compatFlags(), []string{tc.env})
		if err == nil {
			t.Errorf("%s: no error", tc.env)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", tc.env, err, w)
			}
		}
	}
}

// TestCompatEnvMissingFlag: a variable read into a flag this build does
// not have is an error naming both; unset, its default is left alone.
func TestCompatEnvMissingFlag(t *testing.T) {
	fs := flag.NewFlagSet("sluice serve", flag.ContinueOnError)
	fs.String("addr", "", "")
	fs.String("grpc-addr", "", "")
	fs.String("envoy-config", "", "")
	if _, err := applyCompat(fs, nil); err != nil {
		t.Errorf("no variable set: %v", err)
	}
	_, err := applyCompat(fs, []string{"SHADOW_MODE=true"})
	if err == nil || !strings.Contains(err.Error(), "$SHADOW_MODE") || !strings.Contains(err.Error(), "--envoy-shadow-mode") {
		t.Errorf("SHADOW_MODE=true without --envoy-shadow-mode: %v", err)
	}
}

// TestCompatEnvNotes: the reference's sinks of statistics, asked for, are
// named at the start: Sluice's metrics are on /metrics alone.
func TestCompatEnvNotes(t *testing.T) {
	c, err := applyCompat(compatFlags(), []string{"USE_STATSD=true", "TRACING_ENABLED=true", "USE_PROMETHEUS=false"})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.notes) != 2 || !strings.Contains(c.notes[0], "$TRACING_ENABLED") || !strings.Contains(c.notes[1], "$USE_STATSD") {
		t.Errorf("notes %q, want one of $TRACING_ENABLED then one of $USE_STATSD", c.notes)
	}
	if c, _ := applyCompat(compatFlags(), nil); len(c.notes) != 0 {
		t.Errorf("nothing set: notes %q", c.notes)
	}
}

// TestCompatExplain: an error of a flag the compatible mode set names the
// variables it came from.
func TestCompatExplain(t *testing.T) {
	c, err := applyCompat(compatFlags(), []string{"RUNTIME_ROOT=/nowhere"})
	if err != nil {
		t.Fatal(err)
	}
	got := c.explain(errorString(`serve: --envoy-config "/nowhere/config" is not a directory`)).Error()
	for _, w := range []string{"/nowhere/config", "$RUNTIME_ROOT", "$RUNTIME_SUBDIRECTORY", "$RUNTIME_APPDIRECTORY"} {
		if !strings.Contains(got, w) {
			t.Errorf("%q does not say %q", got, w)
		}
	}
	if got := c.explain(errorString("serve: --envoy-configs is bad")).Error(); got != "serve: --envoy-configs is bad" {
		t.Errorf("another flag's error: %q", got)
	}
	if c.explain(nil) != nil {
		t.Error("explain(nil) is not nil")
	}
}

type errorString string

func (e errorString) Error() string { return string(e) }

// TestCompatArgs: run as ratelimit, sluice is `sluice serve --envoy-compat`.
func TestCompatArgs(t *testing.T) {
	for _, tc := range []struct {
		argv0 string
		args  []string
		want  []string
	}{
		{"/bin/ratelimit", nil, []string{"serve", "--envoy-compat"}},
		{"ratelimit", []string{"--store", "memory"}, []string{"serve", "--envoy-compat", "--store", "memory"}},
		{"/usr/local/bin/sluice", []string{"serve"}, []string{"serve"}},
		{"/bin/ratelimit-old", []string{"version"}, []string{"version"}},
	} {
		if got := compatArgs(tc.argv0, tc.args); !slices.Equal(got, tc.want) {
			t.Errorf("%s %q: %q, want %q", tc.argv0, tc.args, got, tc.want)
		}
	}
}

// TestCompatFlagsExist: every flag the compatible mode sets is a flag of
// serve.
func TestCompatFlagsExist(t *testing.T) {
	var c serveConfig
	fs := c.flagSet(&serveLists{})
	var missing []string
	for _, r := range compatRules {
		if r.flag != "" && fs.Lookup(r.flag) == nil {
			missing = append(missing, r.flag)
		}
	}
	slices.Sort(missing)
	if len(missing) != 0 {
		t.Errorf("flags the compatible mode sets that serve lacks: %q", missing)
	}
	if fs.Lookup("envoy-compat") == nil {
		t.Error("no --envoy-compat")
	}
}

// referenceVars are the 114 environment variables of envoyproxy/ratelimit
// (src/settings/settings.go).
var referenceVars = []string{
	"HOST", "PORT", "DEBUG_HOST", "DEBUG_PORT", "GRPC_UDS", "GRPC_HOST", "GRPC_PORT", "GRPC_MAX_CONNECTION_AGE",
	"GRPC_MAX_CONNECTION_AGE_GRACE", "GRPC_SERVER_USE_TLS", "GRPC_SERVER_TLS_CERT", "GRPC_SERVER_TLS_KEY",
	"GRPC_CLIENT_TLS_CACERT", "GRPC_CLIENT_TLS_SAN", "LOG_LEVEL", "LOG_FORMAT", "CONFIG_TYPE",
	"FORCE_START_WITHOUT_INITIAL_CONFIG", "CONFIG_GRPC_XDS_NODE_ID", "CONFIG_GRPC_XDS_NODE_METADATA",
	"CONFIG_GRPC_XDS_SERVER_URL", "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
	"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "CONFIG_GRPC_XDS_SERVER_USE_TLS", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
	"CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "CONFIG_GRPC_XDS_SERVER_TLS_SAN",
	"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "XDS_CLIENT_BACKOFF_MAX_INTERVAL", "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
	"XDS_CLIENT_BACKOFF_JITTER", "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "USE_DOG_STATSD", "USE_DOG_STATSD_MOGRIFIERS",
	"USE_STATSD", "STATSD_HOST", "STATSD_PORT", "EXTRA_TAGS", "STATS_FLUSH_INTERVAL", "DISABLE_STATS", "USE_PROMETHEUS",
	"PROMETHEUS_ADDR", "PROMETHEUS_PATH", "PROMETHEUS_MAPPER_YAML", "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS",
	"RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_APPDIRECTORY", "RUNTIME_IGNOREDOTFILES", "RUNTIME_WATCH_ROOT",
	"EXPIRATION_JITTER_MAX_SECONDS", "LOCAL_CACHE_SIZE_IN_BYTES", "NEAR_LIMIT_RATIO", "CACHE_KEY_PREFIX", "BACKEND_TYPE",
	"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "LIMIT_RESPONSE_HEADERS_ENABLED", "LIMIT_LIMIT_HEADER",
	"LIMIT_REMAINING_HEADER", "LIMIT_RESET_HEADER", "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "REDIS_SOCKET_TYPE",
	"REDIS_TYPE", "REDIS_URL", "REDIS_POOL_SIZE", "REDIS_AUTH", "REDIS_TLS", "REDIS_TLS_CLIENT_CERT",
	"REDIS_TLS_CLIENT_KEY", "REDIS_TLS_CACERT", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "REDIS_PIPELINE_WINDOW",
	"REDIS_PIPELINE_LIMIT", "REDIS_CLUSTER_PIPELINE_PARALLELISM", "REDIS_PERSECOND", "REDIS_PERSECOND_SOCKET_TYPE",
	"REDIS_PERSECOND_TYPE", "REDIS_PERSECOND_URL", "REDIS_PERSECOND_POOL_SIZE", "REDIS_PERSECOND_AUTH",
	"REDIS_PERSECOND_TLS", "REDIS_SENTINEL_AUTH", "REDIS_PERSECOND_SENTINEL_AUTH", "REDIS_PERSECOND_PIPELINE_WINDOW",
	"REDIS_PERSECOND_PIPELINE_LIMIT", "REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM",
	"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "REDIS_TIMEOUT", "REDIS_PERSECOND_TIMEOUT", "REDIS_POOL_ON_EMPTY_BEHAVIOR",
	"REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR", "REDIS_STARTUP_INITIAL_INTERVAL", "REDIS_STARTUP_MAX_INTERVAL",
	"REDIS_STARTUP_MAX_ELAPSED_TIME", "MEMCACHE_HOST_PORT", "MEMCACHE_MAX_IDLE_CONNS", "MEMCACHE_SRV",
	"MEMCACHE_SRV_REFRESH", "MEMCACHE_TLS", "MEMCACHE_TLS_CLIENT_CERT", "MEMCACHE_TLS_CLIENT_KEY", "MEMCACHE_TLS_CACERT",
	"MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION", "SHADOW_MODE", "QUOTA_MODE", "RESPONSE_DYNAMIC_METADATA",
	"MERGE_DOMAIN_CONFIG", "TRACING_ENABLED", "TRACING_SERVICE_NAME", "TRACING_SERVICE_NAMESPACE",
	"TRACING_SERVICE_INSTANCE_ID", "TRACING_EXPORTER_PROTOCOL", "TRACING_SAMPLING_RATE",
}

// TestEnvoyDocsNameEveryReferenceVariable: docs/envoy.md's table names
// every variable of the reference, read, accepted or refused; and the
// compatible mode reads no other name.
func TestEnvoyDocsNameEveryReferenceVariable(t *testing.T) {
	if len(referenceVars) != 114 {
		t.Fatalf("%d variables listed, want the reference's 114", len(referenceVars))
	}
	doc, err := os.ReadFile("../../docs/envoy.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(doc), "### The reference's environment variables")
	if !ok {
		t.Fatal("docs/envoy.md has no section of the reference's environment variables")
	}
	table, _, _ = strings.Cut(table, "\n## ")
	for _, v := range referenceVars {
		if !strings.Contains(table, "`"+v+"`") {
			t.Errorf("docs/envoy.md's table does not name %s", v)
		}
	}
	for _, r := range compatRules {
		for _, v := range r.vars {
			if !slices.Contains(referenceVars, v) {
				t.Errorf("the compatible mode reads %s, not a variable of the reference", v)
			}
			if r.flag != "" && !strings.Contains(table, "--"+r.flag) {
				t.Errorf("docs/envoy.md's table does not say that %s sets --%s", v, r.flag)
			}
		}
	}
}
