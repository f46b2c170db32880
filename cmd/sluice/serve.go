package main

import (
	"context"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"path"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/internal/buildinfo"

	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/loopback"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/store/pebblestore"
	"github.com/sluicehq/sluice/store/redisstore"
)

// maxSyncInterval bounds --sync-interval: a durable decision may wait this
// long for its sync, on top of the sync itself.
const maxSyncInterval = 10 * time.Millisecond

// maxWriteBehind bounds --write-behind: a crash may forget what the
// durable counters admitted in this long.
const maxWriteBehind = time.Minute

// serveConfig is the configuration of `sluice serve`: the server's, and
// the flags the binary keeps for itself.
type serveConfig struct {
	server.Config
	LogFormat    string
	AdminKeyFile string
	logLevel     slog.Level
	envWarnings  []string // of SLUICE_ variables that name no flag
	compat       compat   // what --envoy-compat set, to explain errors
}

// serveLists are the flags of `sluice serve` read after parsing: lists,
// parsed into serveConfig, and a file.
type serveLists struct {
	proxies, wsOrigins, hosts, origins, regions string
	tokenFile                                   string
}

// serve runs the HTTP API until ctx is cancelled, then drains in-flight
// requests for up to the shutdown timeout. SIGHUP reloads the watched
// configurations and the TLS certificate. With --log-format json, an error
// is logged as a JSON line, and returned as logged.
func serve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := parseServe(args, stdout, stderr)
	if err != nil {
		format := startLogFormat(args)
		if format == "" && c.EnvoyCompat && strings.EqualFold(os.Getenv("LOG_FORMAT"), "json") {
			format = "json" // the reference's variable, read in this mode
		}
		if !errors.Is(err, flag.ErrHelp) && format == "json" {
			return logError(newLogger(stderr, "json", slog.LevelInfo), err)
		}
		return err
	}
	log := newLogger(stderr, c.LogFormat, c.logLevel)
	for _, w := range c.envWarnings {
		log.Warn("environment: " + w)
	}
	if err := runServer(ctx, c, log); err != nil {
		err = c.compat.explain(err)
		if c.LogFormat == "json" {
			return logError(log, err)
		}
		return err
	}
	return nil
}

// runServer builds the server of c and runs it until ctx is cancelled.
func runServer(ctx context.Context, c serveConfig, log *slog.Logger) error {
	b := buildinfo.Read(version, commit)
	c.Version, c.Commit = b.Version, b.Commit
	s, err := server.New(ctx, c.Config, log)
	if err != nil {
		return err
	}
	defer s.Close() // its error is logged
	for _, hup := range s.ReloadSignals() {
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
	}
	return s.Run(ctx)
}

// logged is an error logged already, which main does not print again.
type logged struct{ error }

func (e logged) Unwrap() error { return e.error }

// logError logs err, the error serve ends with, and returns it as logged.
func logError(log *slog.Logger, err error) error {
	log.Error("serve failed", "err", err)
	return logged{err}
}

// newLogger returns the logger of --log-format and --log-level, writing
// to w. Durations are written as Go writes them ("1.5s") in both formats:
// slog's JSON handler would write integer nanoseconds, without a unit.
func newLogger(w io.Writer, format string, level slog.Leveler) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: durationString}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// durationString renders a duration attribute as a string with its unit.
func durationString(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}

// startLogFormat returns the log format asked for by args or the
// environment, for an error met before the flags are all parsed.
func startLogFormat(args []string) string {
	for i, a := range args {
		if a == "--" {
			break
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name != "log-format" || !strings.HasPrefix(a, "-") {
			continue
		}
		if hasValue {
			return value
		}
		if i+1 < len(args) {
			return args[i+1]
		}
	}
	return os.Getenv(envName("log-format"))
}

// parseServe parses the flags of `sluice serve`, each flag not given
// taken from its variable in the environment, if set.
func parseServe(args []string, stdout, stderr io.Writer) (serveConfig, error) {
	var c serveConfig
	var l serveLists
	fs := c.flagSet(&l)
	envUsage(fs)
	if err := parseFlags(fs, args, stdout, stderr); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("serve: unexpected argument %q", fs.Arg(0))
	}
	var err error
	if c.envWarnings, err = applyEnv(fs, os.Environ()); err != nil {
		return c, fmt.Errorf("serve: %w", err)
	}
	if c.EnvoyCompat {
		if c.compat, err = applyCompat(fs, os.Environ()); err != nil {
			return c, err
		}
		c.envWarnings = append(c.envWarnings, c.compat.notes...)
	}
	if err := checkEnvoy(&c.Envoy, c.TLS, l.tokenFile); err != nil {
		return c, c.compat.explain(err)
	}
	if err := c.parseLists(l); err != nil {
		return c, err
	}
	if c.AdminKeyFile != "" {
		b, err := os.ReadFile(c.AdminKeyFile)
		if err != nil {
			return c, fmt.Errorf("serve: --admin-key-file: %w", err)
		}
		c.AdminKey = strings.TrimSpace(string(b))
	}
	return c, c.compat.explain(c.check(l.regions))
}

// flagSet defines the flags of `sluice serve` into c, and those read
// after parsing into l.
func (c *serveConfig) flagSet(l *serveLists) *flag.FlagSet {
	fs := flag.NewFlagSet("sluice serve", flag.ContinueOnError)
	fs.StringVar(&c.Addr, "addr", "127.0.0.1:8080", "`address` to listen on")
	fs.StringVar(&c.Store, "store", "pebble", "state store: pebble (embedded, durable), memory, or dynamodb or redis (shared by many nodes)")
	registerDynamo(fs, &c.Dynamo)
	fs.StringVar(&c.Redis.URL, "redis-url", "", "with --store redis: the Redis (or Valkey) `URL`: redis://[user:password@]host:port[/db], rediss:// for TLS, ?master_name=NAME for Sentinel, redis+cluster:// for Cluster (docs/redis.md); better from the environment than on a command line, which other users can read")
	fs.StringVar(&c.Redis.CAFile, "redis-ca", "", "with a rediss:// --redis-url: PEM `file` of the CAs the server's certificate is checked against; default the system's")
	fs.StringVar(&c.RegionID, "region-id", "", "with --store dynamodb on a global table: this node's `region`, one of --regions (multi-region limits; see docs/dynamodb.md)")
	fs.StringVar(&l.regions, "regions", "", "with --region-id: comma-separated ids of every `region` of the global table, the same list on every node")
	fs.StringVar(&c.DataDir, "data-dir", "./sluice-data", "`directory` of the pebble store")
	fs.DurationVar(&c.SyncInterval, "sync-interval", pebblestore.DefaultSyncInterval, "pebble store: least time between two syncs of its log; the durable writes that arrive meanwhile share one sync (0 syncs as soon as asked)")
	fs.DurationVar(&c.WriteBehind, "write-behind", 0, "pebble store: write the durable counters' changes every `interval` (at least 1ms, at most 1m) in the background, instead of syncing each before its answer: a decision costs about what it costs in memory, and a crash (kill -9, a power cut) forgets what the counters admitted in the last interval; a graceful stop forgets nothing. 0 (the default) syncs each change before its answer (docs/operations.md)")
	fs.StringVar(&c.ConfigFile, "config", "", "YAML `file` of named policies, endpoints, tiers and tenants (reloaded on SIGHUP and on change)")
	fs.DurationVar(&c.ConfigPoll, "config-poll", time.Second, "how often to look for changes to --config")
	fs.StringVar(&c.AdminKey, "admin-key", "", "admin API key, required off loopback; better from the environment or --admin-key-file than on a command line, which other users can read")
	fs.StringVar(&c.AdminKeyFile, "admin-key-file", "", "`file` holding the admin API key; wins over --admin-key")
	fs.BoolVar(&c.Pseudonyms, "pseudonymise-keys", false, "store and show every key as its pseudonym, a keyed hash (HMAC-SHA256) of each key part under the secret of --key-secret-file or $SLUICE_KEY_SECRET, the same on every node; turning it on or off, or a new secret, starts every counter anew (docs/privacy.md)")
	fs.StringVar(&c.KeySecretFile, "key-secret-file", "", "`file` holding the secret of --pseudonymise-keys, at least 16 bytes (or $SLUICE_KEY_SECRET)")
	fs.StringVar(&l.proxies, "trusted-proxies", "", "comma-separated `CIDRs` of proxies whose X-Forwarded-For is believed")
	fs.IntVar(&c.MaxKeys, "max-keys", 1_000_000, "most counters held in memory; a request that would add one past it fails per its policy's fail mode")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", 10*time.Second, "how long to drain in-flight requests on SIGINT/SIGTERM")
	fs.StringVar(&c.LogFormat, "log-format", "text", "log format: text or json")
	fs.TextVar(&c.logLevel, "log-level", slog.LevelInfo, "least level logged: debug (a line per request), info (the first refusal of each tenant, route and status a minute), warn or error")
	fs.StringVar(&c.AdvertiseURL, "advertise-url", "", "this node's base `URL` as other nodes reach it, for a session's connections on several nodes; default http:// (https:// with --tls-cert) and the listening address")
	fs.Int64Var(&c.WSMaxMessage, "ws-max-message", 128<<10, "largest WebSocket message in `bytes`; larger closes with 1009")
	fs.DurationVar(&c.WSIdle, "ws-idle-timeout", 10*time.Minute, "close a WebSocket connection idle this long")
	fs.DurationVar(&c.WSLifetime, "ws-max-lifetime", 2*time.Hour, "close any WebSocket connection after this long")
	fs.DurationVar(&c.WSCheck, "ws-session-check", 30*time.Second, "how often a node reads every session it holds connections of, to find a deletion it was not told of (one read per session); a deletion is told to every node at once, so this is the fallback")
	fs.DurationVar(&c.WSRenew, "ws-renew", 10*time.Second, "how often a node brings its WebSocket connection counts and registrations to what it holds; on a store of one process, how often it renews them (a dead node's connections return within three)")
	fs.DurationVar(&c.Heartbeat, "heartbeat", 5*time.Second, "on a store shared by nodes (dynamodb, redis), how often a node records itself live; a dead node's WebSocket connections stop counting within five")
	fs.StringVar(&l.wsOrigins, "ws-allowed-origins", "", "comma-separated browser `origins` besides this server's own host that may open WebSocket connections: hosts (app.example.com, *.example.com) or origins (https://*.example.com)")
	fs.StringVar(&l.hosts, "allowed-hosts", "", "comma-separated host `names` besides loopback ones (localhost, 127.0.0.1, [::1]) that this server answers: without an admin key it answers no other, so that no web page can reach it by pointing its own name at loopback (DNS rebinding); with one, only these if any are given. Patterns as in --ws-allowed-origins, with a port or for any (sluice.internal, *.corp.example.com, sluice.internal:8443)")
	fs.StringVar(&l.origins, "allowed-origins", "", "comma-separated browser `origins` besides this server's own whose pages may send requests that change state (POST, PUT, PATCH, DELETE); others are refused 403. Patterns as in --ws-allowed-origins")
	fs.DurationVar(&c.HistorySave, "history-save", time.Minute, "how often the dashboard's history (a day of counts per minute, in --data-dir) is written, the minute in progress included: what a crash may forget of it; 1s to 1m")
	fs.IntVar(&c.TenantLabels, "metrics-tenant-labels", 0, "label the gateway's and the decisions' metrics by tenant for the first `N` tenants seen (the rest count as \"(other)\", no tenant id; a tenant with no decision for an hour frees its place; /metrics then needs the admin key); 0 labels none")
	registerEnvoy(fs, &c.Envoy, &c.TLS, &l.tokenFile)
	registerCompat(fs, &c.EnvoyCompat)
	fs.StringVar(&c.TLS.CertFile, "tls-cert", "", "PEM `file` of the TLS certificate (and its chain) of the HTTP API and the rate limit service, with --tls-key; reloaded when it changes and on SIGHUP")
	fs.StringVar(&c.TLS.KeyFile, "tls-key", "", "PEM `file` of the private key of --tls-cert")
	fs.StringVar(&c.DebugAddr, "debug-addr", "", "loopback `address` to serve Go's pprof profiles on (off if empty)")
	return fs
}

// parseLists parses the comma-separated lists of l into c.
func (c *serveConfig) parseLists(l serveLists) error {
	for _, r := range strings.Split(l.regions, ",") {
		if r = strings.TrimSpace(r); r != "" {
			c.Regions = append(c.Regions, r)
		}
	}
	var err error
	if c.TrustedProxies, err = httplimit.ParsePrefixes(l.proxies); err != nil {
		return fmt.Errorf("serve: --trusted-proxies: %w", err)
	}
	if c.WSOrigins, err = patterns("ws-allowed-origins", l.wsOrigins, false); err != nil {
		return err
	}
	if c.AllowedOrigins, err = patterns("allowed-origins", l.origins, false); err != nil {
		return err
	}
	if c.AllowedHosts, err = patterns("allowed-hosts", l.hosts, true); err != nil {
		return err
	}
	return nil
}

// check checks the values of c, naming their flags; regions is --regions
// as given.
func (c *serveConfig) check(regions string) error {
	if c.Store == "redis" && c.Redis.URL != "" {
		if err := checkRedisURL(c.Redis); err != nil {
			return fmt.Errorf("serve: --redis-url: %w", err)
		}
	}
	switch {
	case c.Store != "memory" && c.Store != "pebble" && c.Store != "dynamodb" && c.Store != "redis":
		return fmt.Errorf("serve: --store %q is not supported (want pebble, memory, dynamodb or redis)", c.Store)
	case c.Store == "redis" && c.Redis.URL == "":
		return errors.New("serve: --store redis needs --redis-url (or $SLUICE_REDIS_URL)")
	case c.Store != "redis" && (c.Redis.URL != "" || c.Redis.CAFile != ""):
		return fmt.Errorf("serve: --redis-url and --redis-ca need --store redis, got --store %s", c.Store)
	case c.RegionID != "" && c.Store != "dynamodb":
		return fmt.Errorf("serve: --region-id needs --store dynamodb (a global table), got --store %s", c.Store)
	case c.RegionID != "" && !slices.Contains(c.Regions, c.RegionID):
		return fmt.Errorf("serve: --region-id %q must be one of --regions %q", c.RegionID, regions)
	case c.RegionID == "" && len(c.Regions) > 0:
		return errors.New("serve: --regions needs --region-id, this node's region")
	case c.Store == "pebble" && c.DataDir == "":
		return errors.New("serve: --data-dir is empty")
	case c.WriteBehind != 0 && c.Store != "pebble":
		return fmt.Errorf("serve: --write-behind needs --store pebble, got --store %s", c.Store)
	case c.WriteBehind != 0 && (c.WriteBehind < time.Millisecond || c.WriteBehind > maxWriteBehind):
		return fmt.Errorf("serve: --write-behind must be 0, or between 1ms and %v, got %v", maxWriteBehind, c.WriteBehind)
	case c.SyncInterval < 0 || c.SyncInterval > maxSyncInterval:
		return fmt.Errorf("serve: --sync-interval must be between 0 and %v, got %v", maxSyncInterval, c.SyncInterval)
	case c.MaxKeys <= 0:
		return fmt.Errorf("serve: --max-keys must be positive, got %d", c.MaxKeys)
	case c.ShutdownTimeout <= 0:
		return fmt.Errorf("serve: --shutdown-timeout must be positive, got %v", c.ShutdownTimeout)
	case c.WSMaxMessage < 1 || c.WSIdle <= 0 || c.WSLifetime <= 0:
		return errors.New("serve: --ws-max-message, --ws-idle-timeout and --ws-max-lifetime must be positive")
	case c.WSCheck < time.Second || c.WSCheck > time.Hour:
		return fmt.Errorf("serve: --ws-session-check must be between 1s and 1h, got %v", c.WSCheck)
	case c.WSRenew < 10*time.Millisecond:
		return fmt.Errorf("serve: --ws-renew must be at least 10ms, got %v", c.WSRenew)
	case c.Heartbeat < 100*time.Millisecond || c.Heartbeat > time.Minute:
		return fmt.Errorf("serve: --heartbeat must be between 100ms and 1m, got %v", c.Heartbeat)
	case c.HistorySave < time.Second || c.HistorySave > time.Minute:
		return fmt.Errorf("serve: --history-save must be between 1s and 1m, got %v", c.HistorySave)
	case c.TenantLabels < 0 || c.TenantLabels > 10_000:
		return fmt.Errorf("serve: --metrics-tenant-labels must be between 0 and 10000, got %d", c.TenantLabels)
	case c.ConfigPoll <= 0:
		return fmt.Errorf("serve: --config-poll must be positive, got %v", c.ConfigPoll)
	case c.LogFormat != "text" && c.LogFormat != "json":
		return fmt.Errorf("serve: --log-format must be text or json, got %q", c.LogFormat)
	case c.DebugAddr != "" && !loopback.Addr(c.DebugAddr):
		return fmt.Errorf("serve: --debug-addr %q must be on loopback", c.DebugAddr)
	case (c.TLS.CertFile == "") != (c.TLS.KeyFile == ""):
		return errors.New("serve: --tls-cert and --tls-key go together: give both or neither")
	case c.AdvertiseURL != "" && !advertisable(c.AdvertiseURL):
		return fmt.Errorf("serve: --advertise-url %q is not a node's base URL: want http:// or https://, a host and, if any, a port (http://10.0.0.5:8080, https://node-1.sluice.internal)", c.AdvertiseURL)
	case c.TLS.CertFile != "" && strings.HasPrefix(strings.ToLower(c.AdvertiseURL), "http://"):
		// The listener speaks TLS alone; and peers send the admin key to
		// this URL, which must not cross the network in the clear.
		return fmt.Errorf("serve: --advertise-url %q must be https:// with --tls-cert: other nodes reach this one over TLS, with the admin key", c.AdvertiseURL)
	case c.Pseudonyms && c.KeySecretFile == "" && os.Getenv("SLUICE_KEY_SECRET") == "":
		return errors.New("serve: --pseudonymise-keys needs a secret: --key-secret-file or $SLUICE_KEY_SECRET")
	case !c.Pseudonyms && c.KeySecretFile != "":
		// A secret given alone pseudonymises nothing: say so rather than
		// let its operator believe keys are hidden.
		return errors.New("serve: --key-secret-file is the secret of --pseudonymise-keys, which is off: give both, or neither")
	case c.AdminKey != "" && len(c.AdminKey) < 16:
		return errors.New("serve: the admin key must be at least 16 characters")
	}
	return nil
}

// checkRedisURL reports what redisstore.Dial refuses of r's URL (no host,
// a bad option, a CA for a URL without TLS), without reaching it; the
// error never holds the password.
func checkRedisURL(r server.RedisConfig) error {
	var o redisstore.DialOptions
	if r.CAFile != "" {
		o.RootCAs = x509.NewCertPool() // read when serving; here its presence alone
	}
	c, err := redisstore.DialWith(r.URL, o)
	if err != nil {
		return err
	}
	return c.Close()
}

// patterns parses the comma-separated origin patterns of flag (host
// patterns alone if hosts), each checked by checkOriginPattern.
func patterns(flag, list string, hosts bool) ([]string, error) {
	var out []string
	for _, p := range strings.Split(list, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		if hosts && strings.Contains(p, "/") {
			return nil, fmt.Errorf("serve: --%s: %q is not a host name: give it without a scheme or a path", flag, p)
		}
		if err := checkOriginPattern(p); err != nil {
			return nil, fmt.Errorf("serve: --%s: %w", flag, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// checkOriginPattern refuses an origin pattern that is malformed, or whose
// host is not pinned to a domain: wildcards are allowed only in front of
// two literal labels ("*.example.com"), so that no pattern ("*", "*.*",
// "https://*", "*.com") lets any web page in.
func checkOriginPattern(pat string) error {
	if _, err := path.Match(pat, ""); err != nil {
		return fmt.Errorf("%q is not a valid pattern: %v", pat, err)
	}
	host := pat
	if _, rest, ok := strings.Cut(pat, "://"); ok {
		host = rest
	}
	if i := strings.LastIndexByte(host, ':'); i >= 0 && strings.Trim(host[i+1:], "0123456789*?") == "" {
		host = host[:i] // a port, or a pattern of ports
	}
	w := strings.LastIndexAny(host, "*?[]")
	if w < 0 {
		if host == "" {
			return fmt.Errorf("%q names no host", pat)
		}
		return nil
	}
	var literal int
	for _, label := range strings.Split(host[w+1:], ".") {
		if label != "" {
			literal++
		}
	}
	if literal < 2 {
		return fmt.Errorf("%q would match any site: a wildcard must stand before a domain of two labels or more, as in *.example.com", pat)
	}
	return nil
}

// advertisable reports whether u can be a node's base URL: http or https,
// a host, no query or fragment (an IPv6 address may be written bare, as a
// template writes $(POD_IP); server.BracketIPv6 puts it in brackets).
func advertisable(u string) bool {
	p, err := url.Parse(server.BracketIPv6(u))
	return err == nil && (p.Scheme == "http" || p.Scheme == "https") && p.Hostname() != "" &&
		p.RawQuery == "" && p.Fragment == "" && p.User == nil
}
