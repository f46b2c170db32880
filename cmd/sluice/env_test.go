package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"
)

// TestServeFlagsFromEnv: every flag of serve is also read from its
// SLUICE_ variable, booleans as the flag package parses them; a flag given
// on the command line wins over its variable.
func TestServeFlagsFromEnv(t *testing.T) {
	t.Setenv("SLUICE_MAX_KEYS", "5")
	t.Setenv("SLUICE_ADDR", "127.0.0.1:9999")
	t.Setenv("SLUICE_DYNAMODB_TABLE", "limits")
	t.Setenv("SLUICE_GRPC_ADDR", "127.0.0.1:0")
	t.Setenv("SLUICE_ENVOY_PER_DESCRIPTOR", "1")
	t.Setenv("SLUICE_WS_IDLE_TIMEOUT", "90s")
	t.Setenv("SLUICE_ADMIN_KEY", "0123456789abcdef-env")
	t.Setenv("SLUICE_DEBUG_ADDR", "") // as if unset
	t.Setenv("SLUICE_DATA_DIR", "")
	c, err := parseServe([]string{"--addr", "127.0.0.1:7777"}, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Addr != "127.0.0.1:7777" {
		t.Errorf("--addr %q, want the flag's over $SLUICE_ADDR", c.Addr)
	}
	if c.DataDir != "./sluice-data" {
		t.Errorf("--data-dir %q from an empty variable, want the default", c.DataDir)
	}
	if c.MaxKeys != 5 || c.Dynamo.Table != "limits" || !c.Envoy.PerDescriptor || c.WSIdle != 90*time.Second || c.AdminKey != "0123456789abcdef-env" {
		t.Errorf("from the environment: max-keys %d, table %q, per-descriptor %v, idle %v, admin key %q", c.MaxKeys, c.Dynamo.Table, c.Envoy.PerDescriptor, c.WSIdle, c.AdminKey)
	}
	if len(c.envWarnings) != 0 {
		t.Errorf("warnings %q, want none", c.envWarnings)
	}
}

// TestServeEnvBadValue: a value its flag refuses is an error naming the
// variable and the flag.
func TestServeEnvBadValue(t *testing.T) {
	t.Setenv("SLUICE_MAX_KEYS", "x")
	_, err := parseServe(nil, io.Discard, io.Discard)
	if err == nil || !strings.HasPrefix(err.Error(), `serve: $SLUICE_MAX_KEYS (--max-keys): invalid value "x": `) {
		t.Fatalf("%v, want an error naming $SLUICE_MAX_KEYS and --max-keys", err)
	}
	t.Setenv("SLUICE_MAX_KEYS", "") // as if unset
	t.Setenv("SLUICE_GRPC_ADDR", "127.0.0.1:0")
	t.Setenv("SLUICE_ENVOY_RESPONSE_HEADERS", "yes")
	if _, err := parseServe(nil, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "$SLUICE_ENVOY_RESPONSE_HEADERS (--envoy-response-headers)") {
		t.Fatalf("%v, want an error naming the boolean's variable", err)
	}
}

// TestServeEnvUnknown: a SLUICE_ variable that names no flag is warned of,
// with the nearest flag's variable; a flag given on the command line and
// in the environment is not.
func TestServeEnvUnknown(t *testing.T) {
	t.Setenv("SLUICE_ADRR", "127.0.0.1:1")
	t.Setenv("SLUICE_QUITE_UNLIKE_ANY", "1")
	t.Setenv("SLUICE_STORE", "pebble")
	c, err := parseServe([]string{"--store", "memory"}, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"$SLUICE_ADRR names no flag of sluice serve; did you mean $SLUICE_ADDR (--addr)?",
		"$SLUICE_QUITE_UNLIKE_ANY names no flag of sluice serve",
	}
	if strings.Join(c.envWarnings, "\n") != strings.Join(want, "\n") {
		t.Fatalf("warnings:\n%s\nwant:\n%s", strings.Join(c.envWarnings, "\n"), strings.Join(want, "\n"))
	}
}

// TestHelpCommand: `sluice help X` prints what `sluice X -h` does, for
// each command with flags; serve's help names each flag's variable.
func TestHelpCommand(t *testing.T) {
	for _, cmd := range [][]string{{"serve"}, {"bench"}, {"bench-ws"}, {"dynamodb", "create-table"}, {"dynamodb"}, {"sim", "fairshare"}, {"sim", "regions"}, {"config"}, {"check"}, {"tenants"}, {"keys"}, {"block"}} {
		var want, got bytes.Buffer
		if err := run(context.Background(), append(cmd, "-h"), &want, io.Discard); err != nil {
			t.Fatalf("%v -h: %v", cmd, err)
		}
		if err := run(context.Background(), append([]string{"help"}, cmd...), &got, io.Discard); err != nil {
			t.Fatalf("help %v: %v", cmd, err)
		}
		if got.Len() == 0 || got.String() != want.String() {
			t.Errorf("help %v printed:\n%s\nwant what -h prints:\n%s", cmd, &got, &want)
		}
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"help", "serve"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"($SLUICE_ADDR)", "($SLUICE_DYNAMODB_TABLE)", "($SLUICE_ADMIN_KEY_FILE)", "($SLUICE_TLS_CERT)"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("serve's help lacks %s", s)
		}
	}
	err := run(context.Background(), []string{"help", "nosuch"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "serve, config, bench, bench-ws, dynamodb, sim, check, tenants, keys, block, version") {
		t.Errorf("help nosuch: %v, want the commands named", err)
	}
}

// TestMisspelt: a misspelt flag or command is answered with the nearest
// name, and where the names are listed.
func TestMisspelt(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--adr", "x"}, "flag provided but not defined: -adr; did you mean --addr? (sluice serve -h lists the flags)"},
		{[]string{"serve", "-max-key", "1"}, "did you mean --max-keys?"},
		{[]string{"serve", "--nope"}, "flag provided but not defined: -nope (sluice serve -h lists the flags)"},
		{[]string{"bench", "--wrokers", "1"}, "did you mean --workers?"},
		{[]string{"serv"}, `unknown command "serv"; did you mean serve? (sluice help lists the commands)`},
		{[]string{"benchws"}, "did you mean bench-ws?"},
	} {
		var stderr bytes.Buffer
		err := run(context.Background(), tc.args, io.Discard, &stderr)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
		if stderr.Len() > 0 {
			t.Errorf("%v printed the usage:\n%s", tc.args, &stderr)
		}
	}
}

// TestLogDurations: a duration is logged with its unit, as Go writes it,
// in JSON as in text, in a group too.
func TestLogDurations(t *testing.T) {
	var buf bytes.Buffer
	newLogger(&buf, "json", slog.LevelInfo).Info("m", "took", 1500*time.Millisecond, slog.Group("g", "wait", 250*time.Microsecond))
	var line struct {
		Took string
		G    struct{ Wait string }
	}
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil || line.Took != "1.5s" || line.G.Wait != "250µs" {
		t.Fatalf("json %s: %+v %v, want took 1.5s, g.wait 250µs", &buf, line, err)
	}
	buf.Reset()
	newLogger(&buf, "text", slog.LevelInfo).Info("m", "took", 1500*time.Millisecond)
	if !strings.Contains(buf.String(), " took=1.5s") {
		t.Fatalf("text: %s", &buf)
	}
}

func TestStartLogFormat(t *testing.T) {
	t.Setenv("SLUICE_LOG_FORMAT", "")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--log-format", "json", "--max-keys", "x"}, "json"},
		{[]string{"--max-keys=x", "-log-format=json"}, "json"},
		{[]string{"--max-keys", "x"}, ""},
		{[]string{"--", "--log-format", "json"}, ""},
	} {
		if got := startLogFormat(tc.args); got != tc.want {
			t.Errorf("%q: %q, want %q", tc.args, got, tc.want)
		}
	}
	t.Setenv("SLUICE_LOG_FORMAT", "json")
	if got := startLogFormat(nil); got != "json" {
		t.Errorf("from $SLUICE_LOG_FORMAT: %q", got)
	}
}

// TestConfigurationDocsNameEveryFlag: docs/configuration.md's table has a
// row for every flag of serve, so that a flag added, and its variable, is
// documented.
func TestConfigurationDocsNameEveryFlag(t *testing.T) {
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	var c serveConfig
	c.flagSet(&serveLists{}).VisitAll(func(f *flag.Flag) {
		if !strings.Contains(string(doc), "| `--"+f.Name+"` |") {
			t.Errorf("docs/configuration.md has no row for --%s", f.Name)
		}
	})
}
