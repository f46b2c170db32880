package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/store/redisstore/redistest"
)

// redisNodes starts n sluice servers on the Redis at addr, with a
// decision deadline of timeout (the config's defaults.timeout) and extra
// serve flags.
func redisNodes(t *testing.T, n int, url, timeout string, extra ...string) []*process {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(cfg, []byte("defaults:\n  timeout: "+timeout+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ps := make([]*process, n)
	for i := range ps {
		ps[i] = start(t, append([]string{"--store", "redis", "--redis-url", url, "--config", cfg}, extra...)...)
	}
	return ps
}

// TestRedisServe: two servers on one Redis that needs a password, the
// URL from $SLUICE_REDIS_URL: a counter, a tenant and its API key are
// shared; the logs name the URL with its password hidden, and /readyz
// answers.
func TestRedisServe(t *testing.T) {
	const password = "hunter2-redis-pw"
	r := redistest.StartOwn(t, "--requirepass", password)
	t.Setenv("SLUICE_REDIS_URL", "redis://:"+password+"@"+r.Addr+"/0")
	a, b := start(t, "--store", "redis"), start(t, "--store", "redis")
	body := `{"tenant":"acme","checks":[{"key":"u1","policy":{"name":"chat","algorithm":"fixed_window","limit":3,"window":"8760h"}}]}`
	for i, p := range []*process{a, b, a} {
		if resp := p.check(t, body); resp.StatusCode != 200 {
			t.Fatalf("request %d: %s", i, resp.Status)
		}
	}
	if resp := b.check(t, body); resp.StatusCode != 429 {
		t.Fatalf("the fourth request, on the other node: %s, want 429: the nodes do not share the counter", resp.Status)
	}
	if code, out := a.call(t, "", "POST", "/v1/tenants", `{"id":"beta"}`); code != 201 {
		t.Fatal(code, out)
	}
	code, out := a.call(t, "", "POST", "/v1/tenants/beta/keys", `{}`)
	if code != 201 {
		t.Fatal(code, out)
	}
	if code, out := b.call(t, out["token"].(string), "GET", "/v1/tenants/beta", ""); code != 200 {
		t.Fatalf("the tenant's key on the other node: %d %v", code, out)
	}
	for _, p := range []*process{a, b} {
		if code, out := p.call(t, "", "GET", "/readyz", ""); code != 200 {
			t.Fatalf("/readyz: %d %v", code, out)
		}
		// The client's pool, on /metrics: it has opened connections.
		if n := metric(t, p, `sluice_redis_pool_connections{state="total"}`); n < 1 {
			t.Fatalf("sluice_redis_pool_connections{state=\"total\"} is %v, want at least 1", n)
		}
		if strings.Contains(p.log(), password) {
			t.Fatalf("the password is in the logs:\n%s", p.log())
		}
		if !strings.Contains(p.log(), "redis://:xxxxx@"+r.Addr+"/0") {
			t.Fatalf("the logs do not name the Redis URL, redacted:\n%s", p.log())
		}
	}
}

// TestRedisBadURL: a URL that names no host, a CA for a URL without TLS
// and the Redis flags on another store are refused at start, exit 2,
// naming the flag, and no message repeats the password.
func TestRedisBadURL(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--store", "redis", "--redis-url", "redis://:hunter2@/0"}, "names no host"},
		{[]string{"--store", "redis", "--redis-url", "redis://:hunter2@:6379"}, "names no host"},
		{[]string{"--store", "redis", "--redis-url", "redis://:hunter2@h:port"}, "--redis-url"},
		{[]string{"--store", "redis", "--redis-url", "redis://:hunter2@h:6379", "--redis-ca", "ca.pem"}, "not TLS"},
		{[]string{"--store", "redis", "--redis-url", "redis://:hunter2@h:6379?bogus=1"}, "unexpected option"},
		{[]string{"--store", "memory", "--redis-url", "redis://:hunter2@h:6379"}, "need --store redis"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		out, err := exec.CommandContext(ctx, binary, append([]string{"serve"}, tc.args...)...).CombinedOutput()
		cancel()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
			t.Errorf("%v: %v, want exit 2\n%s", tc.args, err, out)
		}
		if !strings.Contains(string(out), tc.want) || strings.Contains(string(out), "hunter2") {
			t.Errorf("%v: %s\nwant a message with %q and without the password", tc.args, out, tc.want)
		}
	}
}

// TestRedisOutage: a server whose Redis hangs (SIGSTOP), then dies
// (SIGKILL), answers each policy by its fail mode within its deadline,
// and /readyz says unavailable; a burst of requests meanwhile leaves no
// goroutines behind; once Redis is back, decisions are made again.
func TestRedisOutage(t *testing.T) {
	r := redistest.StartOwn(t)
	debug := freeAddr(t)
	p := redisNodes(t, 1, "redis://"+r.Addr, "300ms", "--debug-addr", debug)[0]
	open := `{"tenant":"acme","checks":[{"key":"k","policy":{"name":"open","algorithm":"token_bucket","limit":1000,"window":"1h","failMode":"open"}}]}`
	closed := `{"tenant":"acme","checks":[{"key":"k","policy":{"name":"closed","algorithm":"sliding_window","limit":1000,"window":"1h","failMode":"closed"}}]}`
	decide := func(body string) (int, map[string]any) {
		t.Helper()
		return p.call(t, "", "POST", "/v1/check", body)
	}
	healthy := func(when string) {
		t.Helper()
		if code, out := decide(open); code != 200 || out["failedOpen"] == true {
			t.Fatalf("%s: the open policy: %d %v, want decided", when, code, out)
		}
		if code, out := decide(closed); code != 200 {
			t.Fatalf("%s: the closed policy: %d %v, want decided", when, code, out)
		}
	}
	failing := func(when string) {
		t.Helper()
		if code, out := decide(open); code != 200 || out["failedOpen"] != true {
			t.Fatalf("%s: the open policy: %d %v, want 200 failed open", when, code, out)
		}
		if code, out := decide(closed); code != 503 {
			t.Fatalf("%s: the closed policy: %d %v, want 503 failed closed", when, code, out)
		}
		if code, out := p.call(t, "", "GET", "/readyz", ""); code != 503 {
			t.Fatalf("%s: /readyz %d %v, want 503", when, code, out)
		}
	}
	healthy("before")
	base := goroutines(t, debug)

	if err := r.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	failing("Redis stopped")
	// 64 requests at once on a hung Redis: each ends at its deadline, and
	// with it what it held.
	done := make(chan int, 64)
	client := &http.Client{Timeout: patience}
	for range 64 {
		go func() {
			resp, err := client.Post("http://"+p.addr+"/v1/check", "application/json", strings.NewReader(closed))
			if err != nil {
				done <- 0
				return
			}
			resp.Body.Close()
			done <- resp.StatusCode
		}()
	}
	for range 64 {
		if code := <-done; code != 503 {
			t.Fatalf("a request of the burst on a hung Redis: %d, want 503", code)
		}
	}
	client.CloseIdleConnections()
	// Connections to the hung Redis are closed as their deadlines pass;
	// a few goroutines of the HTTP server may linger on idle keep-alives.
	waitFor(t, "the burst's goroutines to end", func() bool { return goroutines(t, debug) <= base+16 })

	if err := r.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	failing("Redis killed")
	// go-redis's own messages (a failed dial, each try) are the server's
	// log's, at debug: none in its own format at the default level.
	for _, line := range strings.Split(p.log(), "\n") {
		if strings.HasPrefix(line, "redis: ") {
			t.Fatalf("a line of go-redis's own logger in the server's log: %s", line)
		}
	}
	if err := r.Restart(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "/readyz once Redis is back", func() bool {
		code, _ := p.call(t, "", "GET", "/readyz", "")
		return code == 200
	})
	healthy("Redis back")
}

// goroutines is the number of goroutines of the server whose --debug-addr
// is addr.
func goroutines(t *testing.T, addr string) int {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	var n int
	if !sc.Scan() {
		t.Fatal("an empty goroutine profile")
	}
	if _, err := fmt.Sscanf(sc.Text(), "goroutine profile: total %d", &n); err != nil {
		t.Fatalf("goroutine profile: %q: %v", sc.Text(), err)
	}
	return n
}

// TestRedisNodesExact: three servers on one Redis, 16 clients spread over
// them, 300 requests of three policies each (all or nothing): the
// algorithm's at a limit of 100, a token bucket on the same key and a
// fixed window on another at 1000. Exactly 100 are admitted for every
// algorithm, and the two others counted those 100 alone, as every node
// reads them: a request denied by one policy consumed nothing of the
// others.
func TestRedisNodesExact(t *testing.T) {
	r := redistest.StartOwn(t)
	ps := redisNodes(t, 3, "redis://"+r.Addr, "30s")
	loose := func(i int) string {
		return fmt.Sprintf(`{"key":"k","policy":{"name":"bucket%d","algorithm":"token_bucket","limit":1000,"window":"8760h","failMode":"closed"}},`+
			`{"key":"other","policy":{"name":"window%d","algorithm":"fixed_window","limit":1000,"window":"8760h","failMode":"closed"}}`, i, i)
	}
	exactAcrossWith(t, ps, func(i int, alg string) string {
		return fmt.Sprintf(`{"tenant":"acme","checks":[{"key":"k","policy":{"name":"p%d","failMode":"closed",%s}},%s]}`, i, alg, loose(i))
	}, func(t *testing.T, i int) {
		peek := fmt.Sprintf(`{"tenant":"acme","hits":0,"checks":[%s]}`, loose(i))
		for _, p := range ps {
			code, out := p.call(t, "", "POST", "/v1/check", peek)
			if code != 200 {
				t.Fatalf("%s: %d %v", p.addr, code, out)
			}
			for _, d := range out["decisions"].([]any) {
				if d := d.(map[string]any); d["remaining"] != 900.0 {
					t.Errorf("%s: %s has %v remaining, want 900: denied requests consumed it", p.addr, d["policy"], d["remaining"])
				}
			}
		}
	})
}

// TestRedisSurvivesSIGKILL: TestSurvivesSIGKILL on Redis, which holds
// every state: the server is killed with SIGKILL, and so is redis-server,
// which runs with its append-only file synced at every write
// (appendfsync always, docs/redis.md); both restarted, exactly what was
// spent is spent, and the tenant, its key, the block and the audit trail
// are there.
func TestRedisSurvivesSIGKILL(t *testing.T) {
	r := redistest.StartOwn(t, "--appendonly", "yes", "--appendfsync", "always", "--dir", t.TempDir())
	// The example's policies with a deadline for a loaded machine: a
	// decision's fail mode is not what is tested.
	example, err := os.ReadFile("../../examples/sluice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(cfg, []byte(strings.Replace(string(example), "timeout: 50ms", "timeout: 10s", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	survivesKill(t, []string{"--store", "redis", "--redis-url", "redis://" + r.Addr, "--config", cfg}, func() {
		if err := r.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if err := r.Restart(); err != nil {
			t.Fatal(err)
		}
	})
}
