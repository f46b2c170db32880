package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// cliAdminKey is the admin key of the CLI tests' server.
const cliAdminKey = "an-admin-key-for-the-cli-tests"

// cliConfig's policy refills one hit in 10 days: the counts the tests
// read down never move on their own, however slow the machine.
const cliConfig = `version: 1
policies:
  chat: {algorithm: token_bucket, limit: 3, window: 720h, key: [user]}
  login: {algorithm: sliding_window, limit: 5, window: 60s, key: [ip]}
endpoints:
  talk: [chat]
`

// startCLIServer runs `sluice serve` with cliConfig and the admin key.
func startCLIServer(t *testing.T) *process {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(cfg, []byte(cliConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	return start(t, "--config", cfg, "--admin-key", cliAdminKey)
}

// cliResult is a run of the CLI.
type cliResult struct {
	stdout, stderr string
	code           int
}

// sluiceCLI runs the binary with args, with env and none of the caller's
// SLUICE_ variables, and returns what it printed and its exit code.
func sluiceCLI(t *testing.T, env []string, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SLUICE_") && !strings.HasPrefix(kv, "GORACE=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	// A race build sleeps a second at exit by default: the tests run it often.
	cmd.Env = append(append(cmd.Env, "GORACE=atexit_sleep_ms=0"), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("sluice %v: %v", args, err)
	}
	return cliResult{stdout.String(), stderr.String(), code}
}

// want fails the test unless r exited with code.
func (r cliResult) want(t *testing.T, code int, args ...string) cliResult {
	t.Helper()
	if r.code != code {
		t.Fatalf("sluice %v: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", args, r.code, code, r.stdout, r.stderr)
	}
	return r
}

// cli runs the CLI against p with the admin key from the environment.
func cli(t *testing.T, p *process, code int, args ...string) cliResult {
	t.Helper()
	env := []string{"SLUICE_SERVER=http://" + p.addr, "SLUICE_ADMIN_KEY=" + cliAdminKey}
	return sluiceCLI(t, env, args...).want(t, code, args...)
}

var remainingRE = regexp.MustCompile(`remaining=(\d+) `)

// remaining reads the remaining count of a check's line.
func remaining(t *testing.T, line string) int {
	t.Helper()
	m := remainingRE.FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("no remaining= in %q", line)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

func TestCLI(t *testing.T) {
	p := startCLIServer(t)

	t.Run("check counts down, then denies", func(t *testing.T) {
		for want := 2; want >= 0; want-- {
			r := cli(t, p, 0, "check", "--tenant", "acme", "chat", "--key", "user=u1")
			if !strings.HasPrefix(r.stdout, "allowed policy=chat limit=3 ") || remaining(t, r.stdout) != want {
				t.Fatalf("got %q, want allowed with remaining=%d", r.stdout, want)
			}
		}
		r := cli(t, p, 1, "check", "--tenant", "acme", "--endpoint", "talk", "--key", "user=u1")
		if !strings.HasPrefix(r.stdout, "denied policy=chat limit=3 remaining=0 ") || !strings.Contains(r.stdout, "retry-after=") {
			t.Fatalf("got %q, want a denial of chat with its retry-after", r.stdout)
		}
		if r.stderr != "" {
			t.Fatalf("a denial is no error, yet stderr says %q", r.stderr)
		}
		// --json is the server's answer; --cost 0 reads without consuming.
		var out struct {
			Allowed   bool   `json:"allowed"`
			Policy    string `json:"policy"`
			Remaining *int64 `json:"remaining"`
		}
		r = cli(t, p, 1, "check", "--json", "--tenant", "acme", "chat", "--key", "user=u1")
		if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || out.Allowed || out.Policy != "chat" || out.Remaining == nil || *out.Remaining != 0 {
			t.Fatalf("--json: %+v, %v, from %q", out, err, r.stdout)
		}
		r = cli(t, p, 0, "check", "--cost", "0", "--tenant", "acme", "chat", "--key", "user=u2")
		if remaining(t, r.stdout) != 3 {
			t.Fatalf("--cost 0 of a fresh key: %q, want remaining=3", r.stdout)
		}
		r = cli(t, p, 0, "check", "--tenant", "acme", "chat", "--key", "user=u2")
		if remaining(t, r.stdout) != 2 {
			t.Fatalf("after a read: %q, want remaining=2: the read consumed", r.stdout)
		}
	})

	t.Run("errors exit 2 and say what", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"check", "--tenant", "acme", "chat"}, "key.user"}, // the server's field
			{[]string{"check", "--tenant", "acme", "nosuch", "--key", "user=u1"}, "policies[0]"},
			{[]string{"check", "--tenant", "acme"}, "POLICY"},
			{[]string{"check", "--tenant", "acme", "chat", "--key", "user"}, "name=value"},
			{[]string{"tenants", "get", "nosuch"}, `tenant "nosuch": the server at http://` + p.addr + " answered 404"},
			{[]string{"block", "--tenant", "acme", "--key", "user=u1", "--for", "800h"}, "field seconds"},
		} {
			r := cli(t, p, 2, tc.args...)
			if !strings.Contains(r.stderr, tc.want) {
				t.Errorf("sluice %v: stderr %q lacks %q", tc.args, r.stderr, tc.want)
			}
		}
		// A server not there: the URL it tried.
		gone := "http://" + freeAddr(t)
		r := sluiceCLI(t, []string{"SLUICE_SERVER=" + gone}, "check", "--tenant", "acme", "chat", "--key", "user=u1").
			want(t, 2, "check", "(unreachable)")
		if !strings.Contains(r.stderr, "cannot reach the server at "+gone) {
			t.Fatalf("unreachable: stderr %q", r.stderr)
		}
	})

	t.Run("admin key from the environment or a file", func(t *testing.T) {
		server := "SLUICE_SERVER=http://" + p.addr
		file := filepath.Join(t.TempDir(), "admin-key")
		if err := os.WriteFile(file, []byte(cliAdminKey+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		sluiceCLI(t, []string{server, "SLUICE_ADMIN_KEY=" + cliAdminKey}, "tenants").want(t, 0, "tenants", "(env)")
		sluiceCLI(t, []string{server}, "tenants", "--admin-key-file", file).want(t, 0, "tenants", "--admin-key-file")
		r := sluiceCLI(t, []string{server}, "tenants", "--admin-key", cliAdminKey).want(t, 0, "tenants", "--admin-key")
		if !strings.Contains(r.stderr, "shows in ps") {
			t.Fatalf("--admin-key gave no warning: %q", r.stderr)
		}
		bad := filepath.Join(t.TempDir(), "bad-key")
		if err := os.WriteFile(bad, []byte("not-the-admin-key-at-all"), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, run := range []cliResult{
			sluiceCLI(t, []string{server, "SLUICE_ADMIN_KEY=not-the-admin-key-at-all"}, "tenants"),
			sluiceCLI(t, []string{server}, "tenants", "--admin-key-file", bad),
			sluiceCLI(t, []string{server, "SLUICE_ADMIN_KEY=not-the-admin-key-at-all"}, "check", "--tenant", "acme", "chat", "--key", "user=u1"),
		} {
			run.want(t, 2, "(a wrong key)")
			if !strings.Contains(run.stderr, "refused the key sent (401 Unauthorized)") {
				t.Fatalf("a wrong key: stderr %q", run.stderr)
			}
		}
		r = sluiceCLI(t, []string{server}, "tenants").want(t, 2, "tenants", "(no key)")
		if !strings.Contains(r.stderr, "wants a key") {
			t.Fatalf("no key: stderr %q", r.stderr)
		}
		sluiceCLI(t, []string{server, "SLUICE_ADMIN_KEY_FILE=" + file}, "tenants").want(t, 0, "tenants", "($SLUICE_ADMIN_KEY_FILE)")

		// A tenant's API key decides for its own tenant, and reaches no other.
		adminPost(t, p, "/v1/tenants", `{"id":"keyed"}`)
		var key struct {
			Token string `json:"token"`
		}
		if err := json.Unmarshal(adminPost(t, p, "/v1/tenants/keyed/keys", `{"name":"cli"}`), &key); err != nil || key.Token == "" {
			t.Fatalf("no key made: %v", err)
		}
		if r := cli(t, p, 0, "tenants", "keys", "keyed"); !regexp.MustCompile(`(?m)^\S+\s+cli\s+20`).MatchString(r.stdout) || strings.Contains(r.stdout, key.Token) {
			t.Fatalf("tenants keys: want the key named cli, without its secret:\n%s", r.stdout)
		}
		tenantKey := filepath.Join(t.TempDir(), "tenant-key")
		if err := os.WriteFile(tenantKey, []byte(key.Token), 0o600); err != nil {
			t.Fatal(err)
		}
		r = sluiceCLI(t, []string{server}, "check", "--api-key-file", tenantKey, "chat", "--key", "user=u1").want(t, 0, "check", "--api-key-file")
		if remaining(t, r.stdout) != 2 {
			t.Fatalf("a tenant's first check: %q", r.stdout)
		}
		r = sluiceCLI(t, []string{server, "SLUICE_API_KEY=" + key.Token}, "tenants", "get", "made-by-api").want(t, 2, "tenants", "$SLUICE_API_KEY")
		if !strings.Contains(r.stderr, "refused the key sent for this (403 Forbidden)") {
			t.Fatalf("another tenant's key: stderr %q", r.stderr)
		}
	})

	t.Run("tenants lists a tenant created through the API", func(t *testing.T) {
		adminPost(t, p, "/v1/tenants", `{"id":"made-by-api"}`)
		var list struct {
			Tenants []struct {
				ID string `json:"id"`
			} `json:"tenants"`
		}
		r := cli(t, p, 0, "tenants", "--json")
		if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
			t.Fatalf("tenants --json: %v: %q", err, r.stdout)
		}
		found := false
		for _, tn := range list.Tenants {
			found = found || tn.ID == "made-by-api"
		}
		if !found {
			t.Fatalf("tenants --json lacks made-by-api: %q", r.stdout)
		}
		if r := cli(t, p, 0, "tenants"); !regexp.MustCompile(`(?m)^made-by-api\s+\S+\s+store v1\s`).MatchString(r.stdout) {
			t.Fatalf("tenants lacks made-by-api's row:\n%s", r.stdout)
		}
		if r := cli(t, p, 0, "tenants", "get", "made-by-api"); !regexp.MustCompile(`(?m)^chat\s+token_bucket\s+3\s`).MatchString(r.stdout) {
			t.Fatalf("tenants get lacks chat's limit:\n%s", r.stdout)
		}
		cli(t, p, 0, "tenants", "create", "made-by-cli")
		cli(t, p, 2, "tenants", "create", "made-by-cli") // taken: 409
		cli(t, p, 0, "tenants", "delete", "made-by-cli")
		cli(t, p, 2, "tenants", "get", "made-by-cli")
	})

	t.Run("block denies a key until removed", func(t *testing.T) {
		// Blocks live in a tenant's record: an unknown tenant has none.
		r := cli(t, p, 2, "block", "--tenant", "ghost", "--key", "user=u9", "--for", "10m")
		if !strings.Contains(r.stderr, `tenant "ghost"`) || !strings.Contains(r.stderr, "404") {
			t.Fatalf("block of an unknown tenant: %q", r.stderr)
		}
		cli(t, p, 0, "tenants", "create", "blocky")
		check := []string{"check", "--tenant", "blocky", "--endpoint", "talk", "--key", "user=u9"}
		cli(t, p, 0, check...)
		r = cli(t, p, 0, "block", "--tenant", "blocky", "--key", "user=u9", "--for", "10m", "--reason", "cli test")
		if !strings.Contains(r.stdout, "blocked tenant=blocky policy=chat key=user=u9 ") {
			t.Fatalf("block: %q", r.stdout)
		}
		cli(t, p, 1, check...)
		r = cli(t, p, 0, "block", "list", "--tenant", "blocky")
		if !regexp.MustCompile(`(?m)^blocky\s+chat\s+user=u9\s.*\scli test$`).MatchString(r.stdout) {
			t.Fatalf("block list:\n%s", r.stdout)
		}
		var listed struct {
			Blocks []struct {
				Tenant, Policy, Key string
			} `json:"blocks"`
		}
		r = cli(t, p, 0, "block", "list", "--json")
		if err := json.Unmarshal([]byte(r.stdout), &listed); err != nil || len(listed.Blocks) != 1 || listed.Blocks[0].Key != "user=u9" {
			t.Fatalf("block list --json: %+v, %v: %q", listed, err, r.stdout)
		}
		r = cli(t, p, 0, "block", "remove", "--tenant", "blocky", "--key", "user=u9")
		if !strings.Contains(r.stdout, "lifted tenant=blocky policy=chat key=user=u9 block=true") {
			t.Fatalf("block remove: %q", r.stdout)
		}
		// A lift that finds nothing says so, and fails.
		r = cli(t, p, 2, "block", "remove", "--tenant", "blocky", "--key", "user=u9")
		if !strings.Contains(r.stderr, "no block or penalty of key user=u9 to lift") {
			t.Fatalf("a second block remove: %q", r.stderr)
		}
		r = cli(t, p, 0, check...)
		if remaining(t, r.stdout) != 1 {
			t.Fatalf("after the lift: %q, want remaining=1 (the blocked request consumed nothing)", r.stdout)
		}
		// The heaviest keys show the key, its hits and its state.
		r = cli(t, p, 0, "keys", "--tenant", "blocky", "--policy", "chat")
		if !regexp.MustCompile(`(?m)^chat\s+blocky\s+user=u9\s+3\s+1\s+1/3\s`).MatchString(r.stdout) {
			t.Fatalf("keys:\n%s", r.stdout)
		}
	})
}

// TestCLIHelp: each CLI command asked for help prints its usage and flags
// to stdout and exits 0; sluice help names them.
func TestCLIHelp(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"check", "-h"}, []string{"Exit status: 0 allowed, 1 denied, 2", "-admin-key-file", "-cost"}},
		{[]string{"check", "--tenant", "acme", "--help"}, []string{"--endpoint NAME"}},
		{[]string{"tenants", "-h"}, []string{"sluice tenants [list]", "get|create|delete|keys", "-server"}},
		{[]string{"tenants", "create", "--help"}, []string{"-tier"}},
		{[]string{"keys", "help"}, []string{"heaviest keys", "-policy"}},
		{[]string{"block", "-h"}, []string{"sluice block remove", "-for", "-reason"}},
		{[]string{"block", "list", "-h"}, []string{"-tenant"}},
		{[]string{"help"}, []string{"sluice check", "sluice tenants", "sluice keys", "sluice block"}},
	} {
		r := sluiceCLI(t, nil, tc.args...).want(t, 0, tc.args...)
		for _, w := range tc.want {
			if !strings.Contains(r.stdout, w) {
				t.Errorf("sluice %v: stdout lacks %q:\n%s", tc.args, w, r.stdout)
			}
		}
	}
}

// adminPost posts body to p's path with the admin key, wants 201, and
// returns the answer's body.
func adminPost(t *testing.T, p *process, path, body string) []byte {
	t.Helper()
	req, err := http.NewRequest("POST", "http://"+p.addr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+cliAdminKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST %s: %s, %v: %s", path, resp.Status, err, b)
	}
	return b
}

// TestCLICheckNoDecision: a server that cannot decide (its own 503, a
// proxy's 502) is an error, exit 2 with what it said, never a denial; a
// decision the store failed open on is the server's, allowed.
func TestCLICheckNoDecision(t *testing.T) {
	answers := map[string]struct {
		status int
		body   string
	}{
		"closed": {503, `{"error":"unavailable","message":"the limiter's store could not decide in time and policy \"chat\" fails closed"}`},
		"proxy":  {502, `<html>bad gateway</html>`},
		"open": {200, `{"allowed":true,"policy":"chat","limit":3,"remaining":3,"resetAt":0,"retryAfter":0,"retryAfterMs":0,` +
			`"decisions":[{"policy":"chat","allowed":true,"limit":3,"remaining":3,"resetAt":0,"retryAfter":0,"retryAfterMs":0,"failedOpen":true}]}`},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Tenant string `json:"tenant"`
		}
		json.NewDecoder(r.Body).Decode(&in)
		a := answers[in.Tenant]
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(a.status)
		io.WriteString(w, a.body)
	}))
	defer srv.Close()
	env := []string{"SLUICE_SERVER=" + srv.URL}
	check := func(tenant string) []string { return []string{"check", "--tenant", tenant, "chat", "--key", "user=u1"} }
	r := sluiceCLI(t, env, check("closed")...).want(t, 2, check("closed")...)
	if !strings.Contains(r.stderr, "answered 503 Service Unavailable: the limiter's store could not decide") {
		t.Errorf("a fail-closed 503: stderr %q", r.stderr)
	}
	r = sluiceCLI(t, env, check("proxy")...).want(t, 2, check("proxy")...)
	if !strings.Contains(r.stderr, "answered 502 Bad Gateway") {
		t.Errorf("a proxy's 502: stderr %q", r.stderr)
	}
	r = sluiceCLI(t, env, check("open")...).want(t, 0, check("open")...)
	if !strings.Contains(r.stdout, "allowed policy=chat") || !strings.Contains(r.stdout, "failed open") {
		t.Errorf("a decision failed open: stdout %q", r.stdout)
	}
}
