package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

const testAdminKey = "test-admin-key-0123456789"

func (p *process) call(t *testing.T, key, method, path, body string) (int, map[string]any) {
	t.Helper()
	code, b := p.raw(t, key, method, path, body)
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%s %s: %s", method, path, b)
	}
	return code, out
}

// raw sends a request to p with key as its bearer token (none if empty),
// and returns the answer's status and body as sent.
func (p *process) raw(t *testing.T, key, method, path, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+p.addr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// kill9 kills the process with SIGKILL and waits for it.
func (p *process) kill9(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	err := <-p.done
	p.done <- err // for the cleanup
}

// TestSurvivesSIGKILL: with the default (Pebble) store, 7 of a 10-per-hour
// policy are spent, the server is killed with SIGKILL and restarted on the
// same data, and exactly 3 are left; the tenant and its API key made before
// the kill still work, as do an operator's block and the audit trail.
func TestSurvivesSIGKILL(t *testing.T) {
	survivesKill(t, []string{"--data-dir", t.TempDir()}, nil)
}

// survivesKill is TestSurvivesSIGKILL's run, on the store of args (the
// same for both servers; a --config of theirs wins over the example's),
// with meanwhile, if set, called between the kill and the restart.
func survivesKill(t *testing.T, args []string, meanwhile func()) {
	t.Helper()
	addr := freeAddr(t)
	args = append([]string{"--admin-key", testAdminKey, "--config", "../../examples/sluice.yaml"}, args...)
	p := startAt(t, addr, args...)

	if code, out := p.call(t, testAdminKey, "POST", "/v1/tenants", `{"id":"acme","tier":"premium"}`); code != 201 {
		t.Fatalf("create tenant: %d %v", code, out)
	}
	code, out := p.call(t, testAdminKey, "POST", "/v1/tenants/acme/keys", `{}`)
	if code != 201 {
		t.Fatalf("create key: %d %v", code, out)
	}
	key := out["token"].(string)
	body := `{"checks":[{"key":"u1","policy":{"name":"hourly","algorithm":"sliding_log","limit":10,"window":"1h"}}]}`
	for i := range 7 {
		if code, out := p.call(t, key, "POST", "/v1/check", body); code != 200 {
			t.Fatalf("request %d: %d %v", i, code, out)
		}
	}
	// A block and its audit trail, answered before the kill.
	if code, out := p.call(t, testAdminKey, "POST", "/v1/tenants/acme/blocks", `{"policy":"chat","parts":{"user":"mallory"},"seconds":3600}`); code != 201 {
		t.Fatalf("block: %d %v", code, out)
	}
	p.kill9(t)
	if meanwhile != nil {
		meanwhile()
	}

	p = startAt(t, addr, args...)
	if code, _ := p.call(t, key, "POST", "/v1/check", `{"endpoint":"chat","key":{"user":"mallory"}}`); code != 429 {
		t.Fatalf("the block after SIGKILL: %d, want 429", code)
	}
	code, out = p.call(t, key, "GET", "/v1/tenants/acme/audit", "")
	if entries, _ := out["entries"].([]any); code != 200 || len(entries) != 3 || entries[0].(map[string]any)["action"] != "block" {
		t.Fatalf("the audit trail after SIGKILL: %d %v, want block, key.create, tenant.create", code, out)
	}
	peek := strings.Replace(body, `{"checks"`, `{"hits":0,"checks"`, 1)
	code, out = p.call(t, key, "POST", "/v1/check", peek)
	if code != 200 || out["remaining"] != 3.0 {
		t.Fatalf("after SIGKILL: %d remaining %v, want 3", code, out["remaining"])
	}
	for i := range 3 {
		if code, _ := p.call(t, key, "POST", "/v1/check", body); code != 200 {
			t.Fatalf("request %d after restart: %d", i, code)
		}
	}
	if code, _ := p.call(t, key, "POST", "/v1/check", body); code != 429 {
		t.Fatalf("eleventh request in the hour: %d, want 429", code)
	}
	if code, out := p.call(t, key, "GET", "/v1/tenants/acme", ""); code != 200 || out["tier"] != "premium" {
		t.Fatalf("tenant after SIGKILL: %d %v", code, out)
	}
}

// TestConfigReload: a changed file applies without a restart and without
// losing counters; a bad file is rejected and the old one stays; SIGHUP
// reloads.
func TestConfigReload(t *testing.T) {
	file := filepath.Join(t.TempDir(), "sluice.yaml")
	// replace writes the file whole, as docs/configuration.md asks:
	// another file renamed over it.
	replace := func(y string) {
		t.Helper()
		tmp := file + ".new"
		if err := os.WriteFile(tmp, []byte(y), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, file); err != nil {
			t.Fatal(err)
		}
	}
	write := func(limit string) {
		t.Helper()
		replace("policies:\n  chat: {algorithm: fixed_window, limit: " + limit + ", window: 8760h, key: [user]}\nendpoints:\n  chat: [chat]\n")
	}
	write("5")
	p := start(t, "--config", file, "--config-poll", "20ms")
	chat := `{"tenant":"acme","endpoint":"chat","key":{"user":"u"}}`
	for range 2 {
		if code, out := p.call(t, "", "POST", "/v1/check", chat); code != 200 {
			t.Fatal(code, out)
		}
	}
	waitLimit := func(want float64) map[string]any {
		t.Helper()
		var out map[string]any
		waitFor(t, fmt.Sprintf("the limit to become %v", want), func() bool {
			_, out = p.call(t, "", "POST", "/v1/check", `{"tenant":"acme","endpoint":"chat","key":{"user":"u"},"hits":0}`)
			return out["limit"] == want
		})
		return out
	}
	write("8")
	if out := waitLimit(8); out["limit"] != 8.0 || out["remaining"] != 6.0 {
		t.Fatalf("after the change: %v, want limit 8 with 6 remaining (2 spent carried over)", out)
	}
	// A bad file: rejected, logged, the old configuration stays.
	replace("policies:\n  chat: {algorithm: fixed_window, limit: -1, window: 1h}\n")
	waitFor(t, "the bad file's rejection in the logs", func() bool { return strings.Contains(p.log(), "configuration rejected") })
	if out := waitLimit(8); out["limit"] != 8.0 {
		t.Fatalf("after a bad file: %v", out)
	}
	// SIGHUP reloads too: with polling too slow to notice, the change
	// applies only through the signal.
	write("4")
	p = start(t, "--config", file, "--config-poll", "1h")
	write("3")
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if out := waitLimit(3); out["limit"] != 3.0 {
		t.Fatalf("after SIGHUP: %v", out)
	}
}

// TestWriteBehind: with --write-behind, the durable counters are written
// at its interval, and what it promises holds across kill -9 and a
// graceful stop, with a real process:
//   - what was written before the kill is there after it;
//   - what was not (an interval that never came) is forgotten, the bound
//     docs/operations.md states, while the tenants made meanwhile are not
//     (they are synced before their answer either way);
//   - a graceful stop (SIGTERM) writes what is left, and forgets nothing.
func TestWriteBehind(t *testing.T) {
	body := `{"tenant":"acme","checks":[{"key":"u1","policy":{"name":"hourly","algorithm":"sliding_log","limit":10,"window":"1h"}}]}`
	peek := strings.Replace(body, `{"tenant"`, `{"hits":0,"tenant"`, 1)
	spend := func(t *testing.T, p *process, key string, n int) {
		t.Helper()
		for i := range n {
			if code, out := p.call(t, key, "POST", "/v1/check", body); code != 200 {
				t.Fatalf("request %d: %d %v", i, code, out)
			}
		}
	}
	remaining := func(t *testing.T, p *process, key string) any {
		t.Helper()
		code, out := p.call(t, key, "POST", "/v1/check", peek)
		if code != 200 {
			t.Fatalf("peek: %d %v", code, out)
		}
		return out["remaining"]
	}
	metric := func(t *testing.T, p *process, name string) float64 {
		t.Helper()
		samples, _ := scrape(t, p)
		s := find(samples, name, nil)
		if len(s) != 1 {
			t.Fatalf("%s: %d samples", name, len(s))
		}
		return s[0].value
	}

	t.Run("written, then killed", func(t *testing.T) {
		addr, dir := freeAddr(t), t.TempDir()
		p := startAt(t, addr, "--data-dir", dir, "--write-behind", "20ms")
		spend(t, p, "", 7)
		waitFor(t, "the write behind", func() bool {
			return metric(t, p, "sluice_store_write_behind_pending") == 0 && metric(t, p, "sluice_store_write_behind_written_total") >= 1
		})
		if last := metric(t, p, "sluice_store_write_behind_last_success_timestamp_seconds"); last <= 0 {
			t.Fatalf("last success %v after a write", last)
		}
		p.kill9(t)
		p = startAt(t, addr, "--data-dir", dir, "--write-behind", "20ms")
		if r := remaining(t, p, ""); r != 3.0 {
			t.Fatalf("after kill -9 past a write: remaining %v, want 3", r)
		}
	})
	t.Run("killed before the interval", func(t *testing.T) {
		addr, dir := freeAddr(t), t.TempDir()
		p := startAt(t, addr, "--data-dir", dir, "--write-behind", "1m", "--admin-key", testAdminKey)
		spend(t, p, testAdminKey, 7)
		if n := metric(t, p, "sluice_store_write_behind_pending"); n != 1 {
			t.Fatalf("pending %v, want the one counter", n)
		}
		if code, out := p.call(t, testAdminKey, "POST", "/v1/tenants", `{"id":"globex"}`); code != 201 {
			t.Fatalf("create tenant: %d %v", code, out)
		}
		p.kill9(t)
		p = startAt(t, addr, "--data-dir", dir, "--write-behind", "1m", "--admin-key", testAdminKey)
		if r := remaining(t, p, testAdminKey); r != 10.0 {
			t.Fatalf("after kill -9 within the interval: remaining %v, want 10 (the interval forgotten)", r)
		}
		if code, out := p.call(t, testAdminKey, "GET", "/v1/tenants/globex", ""); code != 200 {
			t.Fatalf("a tenant made within the interval, after kill -9: %d %v", code, out)
		}
	})
	t.Run("stopped gracefully", func(t *testing.T) {
		addr, dir := freeAddr(t), t.TempDir()
		p := startAt(t, addr, "--data-dir", dir, "--write-behind", "1m")
		spend(t, p, "", 7)
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := <-p.done; err != nil {
			t.Fatalf("exit on SIGTERM: %v\n%s", err, p.log())
		}
		p.done <- nil // for the cleanup
		p = startAt(t, addr, "--data-dir", dir, "--write-behind", "1m")
		if r := remaining(t, p, ""); r != 3.0 {
			t.Fatalf("after SIGTERM: remaining %v, want 3", r)
		}
	})
}
