package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// profileDir returns a new directory for a browser's profile, removed after
// the test as far as it can be: a browser's helper processes may still be
// writing to it as the test ends, which must not fail the test (as
// t.TempDir's cleanup would).
func profileDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sluice-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for range 10 {
			if os.RemoveAll(dir) == nil {
				return
			}
			time.Sleep(100 * time.Millisecond) // the browser's last writes, not a handshake
		}
	})
	return dir
}

// chromium returns the browser's path, failing with CI=true if there is
// none (make deps installs Debian's chromium), skipping otherwise.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("no chromium: run make deps (CI=true: a missing browser is a failure)")
	}
	t.Skip("no chromium: run make deps")
	return ""
}

// TestDemoPageInBrowser clicks through the demo page in headless Chromium:
// create a session, connect from two tabs, send silo and pooled messages
// (the other tab receives them), get throttled, get a connect refused with
// its 429 shown, disconnect, and delete the session, which closes the other
// tab's connection.
func TestDemoPageInBrowser(t *testing.T) {
	bin := chromium(t)
	cfg := filepath.Join(t.TempDir(), "sluice.yaml")
	os.WriteFile(cfg, []byte("tenants:\n  demo:\n    settings: {connectionsPerSession: 2, messagesPerMinute: 3, sessionTTL: 300}\n  other: {}\n"), 0o600)
	p := start(t, "--config", cfg)
	url := "http://" + p.addr + "/"

	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(bin), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.NoFirstRun,
	}
	// Each tab is a browser of its own: tabs of one headless browser
	// stall in the background.
	browser := func() (context.Context, context.CancelFunc) {
		o := append(append([]chromedp.ExecAllocatorOption{}, opts...), chromedp.UserDataDir(profileDir(t)))
		actx, cancelA := chromedp.NewExecAllocator(context.Background(), o...)
		tab, cancelT := chromedp.NewContext(actx)
		return tab, func() { cancelT(); cancelA() }
	}
	tab1, cancel1 := browser()
	defer cancel1()
	ctx, cancelT := context.WithTimeout(tab1, 6*patience)
	defer cancelT()

	logHas := func(ctx context.Context, want string) chromedp.Action {
		return chromedp.Poll(`document.getElementById("log").textContent.includes(`+jsString(want)+`)`, nil, chromedp.WithPollingTimeout(patience))
	}
	// recvHas waits for a received frame holding every one of parts.
	recvHas := func(parts ...string) chromedp.Action {
		conds := make([]string, len(parts))
		for i, p := range parts {
			conds[i] = "l.textContent.includes(" + jsString(p) + ")"
		}
		return chromedp.Poll(`[...document.querySelectorAll("#log .recv")].some(l => `+strings.Join(conds, " && ")+`)`, nil, chromedp.WithPollingTimeout(patience))
	}
	statusHas := func(ctx context.Context, want string) chromedp.Action {
		return chromedp.Poll(`document.getElementById("status").textContent.includes(`+jsString(want)+`)`, nil, chromedp.WithPollingTimeout(patience))
	}
	var shared string
	if err := chromedp.Run(ctx,
		chromedp.Navigate(url),
		chromedp.Poll(`document.querySelector('#tenant option[value="demo"]') !== null`, nil, chromedp.WithPollingTimeout(patience)),
		chromedp.SetValue(`#tenant`, "demo", chromedp.ByID),
		chromedp.Click(`#create`, chromedp.ByID),
		chromedp.Poll(`document.getElementById("session").textContent !== "none"`, nil, chromedp.WithPollingTimeout(patience)),
		chromedp.Click(`#connect`, chromedp.ByID),
		statusHas(ctx, "connected"),
		chromedp.Location(&shared),
	); err != nil {
		t.Fatalf("tab 1, connect: %v", err)
	}
	if !strings.Contains(shared, "session=") {
		t.Fatalf("the address does not carry the session: %s", shared)
	}

	// A second tab joins the session from the address.
	tab2, cancel2 := browser()
	defer cancel2()
	ctx2, cancelT2 := context.WithTimeout(tab2, 4*patience)
	defer cancelT2()
	if err := chromedp.Run(ctx2,
		chromedp.Navigate(shared),
		chromedp.Poll(`document.getElementById("session").textContent !== "none" && !document.getElementById("connect").disabled`, nil, chromedp.WithPollingTimeout(patience)),
		chromedp.Click(`#connect`, chromedp.ByID),
		statusHas(ctx2, "connected"),
	); err != nil {
		t.Fatalf("tab 2, join: %v", err)
	}

	// A third tab is refused: two connections per session; the page shows
	// the 429.
	tab3, cancel3 := browser()
	defer cancel3()
	ctx3, cancelT3 := context.WithTimeout(tab3, 2*patience)
	defer cancelT3()
	if err := chromedp.Run(ctx3,
		chromedp.Navigate(shared),
		chromedp.Poll(`!document.getElementById("connect").disabled`, nil, chromedp.WithPollingTimeout(patience)),
		chromedp.Click(`#connect`, chromedp.ByID),
		statusHas(ctx3, "refused: 429"),
		logHas(ctx3, "Throttled: connect refused 429"),
	); err != nil {
		var st, lg, loc string
		dctx, dcancel := context.WithTimeout(tab3, 5*time.Second)
		derr := chromedp.Run(dctx, chromedp.Location(&loc), chromedp.Evaluate(`document.getElementById("status").textContent`, &st), chromedp.Evaluate(`document.getElementById("log").textContent + " connect disabled=" + document.getElementById("connect").disabled`, &lg))
		dcancel()
		t.Fatalf("tab 3, refused connect: %v (location %q status %q, log %q, %v)", err, loc, st, lg, derr)
	}

	// Send silo and pooled from tab 1: tab 1 gets its echoes, tab 2 the
	// messages and replies; past 3 in the minute a message is throttled.
	// The minute is a sliding window (docs/algorithms.md): 3 in one aligned
	// minute at most, and up to 6 if the sends straddle two, so of 7 one
	// is throttled wherever the clock is.
	sends := []chromedp.Action{
		chromedp.Click(`#silo`, chromedp.ByID),
		recvHas(`"action":"silo"`, `"type":"echo"`),
		chromedp.Click(`#pooled`, chromedp.ByID),
		recvHas(`"action":"pooled"`, `"type":"echo"`),
	}
	for i := range 5 {
		sends = append(sends, chromedp.Click([]string{`#silo`, `#pooled`}[i%2], chromedp.ByID))
	}
	if err := chromedp.Run(ctx, append(sends, logHas(ctx, "Throttled: message throttled"))...); err != nil {
		// What the page saw, for the next reader of a failure.
		var st, lg string
		dctx, dcancel := context.WithTimeout(tab1, 5*time.Second)
		derr := chromedp.Run(dctx, chromedp.Evaluate(`document.getElementById("status").textContent`, &st), chromedp.Evaluate(`document.getElementById("log").textContent`, &lg))
		dcancel()
		t.Fatalf("tab 1, send: %v (status %q, log %q, %v)", err, st, lg, derr)
	}
	if err := chromedp.Run(ctx2,
		recvHas(`"action":"silo"`, `"type":"message"`),
		recvHas(`"action":"pooled"`, `"type":"reply"`),
	); err != nil {
		t.Fatalf("tab 2, fan-out: %v", err)
	}

	// Disconnect tab 1; delete the session, which closes tab 2's
	// connection at once.
	if err := chromedp.Run(ctx,
		chromedp.Click(`#disconnect`, chromedp.ByID),
		statusHas(ctx, "disconnected"),
		chromedp.Click(`#delete`, chromedp.ByID),
		logHas(ctx, "session deleted: 200"),
	); err != nil {
		t.Fatalf("tab 1, disconnect and delete: %v", err)
	}
	if err := chromedp.Run(ctx2, statusHas(ctx2, "4001 session deleted")); err != nil {
		t.Fatalf("tab 2 after the deletion: %v", err)
	}
}

func jsString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// TestDemoPageWithAdminKey: on a node with an admin key, the demo page
// asks for a key instead of stopping at a 401, keeps it in memory only,
// and with a tenant's key lists that tenant alone and runs the session's
// flow.
func TestDemoPageWithAdminKey(t *testing.T) {
	bin := chromium(t)
	const admin = "an-admin-key-for-the-demo-page"
	p := start(t, "--admin-key", admin)
	for _, id := range []string{"acme", "beta"} {
		if code, out := p.call(t, admin, "POST", "/v1/tenants", `{"id":"`+id+`"}`); code != 201 {
			t.Fatal(code, out)
		}
	}
	code, out := p.call(t, admin, "POST", "/v1/tenants/acme/keys", `{}`)
	if code != 201 {
		t.Fatal(code, out)
	}
	key := out["token"].(string)

	o := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(bin), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.NoFirstRun, chromedp.UserDataDir(profileDir(t)),
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), o...)
	defer cancelA()
	tab, cancelT := chromedp.NewContext(actx)
	defer cancelT()
	ctx, cancel := context.WithTimeout(tab, 4*patience)
	defer cancel()
	poll := func(js string) chromedp.Action {
		return chromedp.Poll(js, nil, chromedp.WithPollingTimeout(patience))
	}
	var tenants []string
	var kept bool
	if err := chromedp.Run(ctx,
		chromedp.Navigate("http://"+p.addr+"/"),
		poll(`!document.getElementById("auth").hidden && document.getElementById("status").textContent.includes("needs an API key")`),
		chromedp.SetValue(`#key`, key, chromedp.ByID),
		chromedp.Click(`#usekey`, chromedp.ByID),
		poll(`document.querySelector('#tenant option[value="acme"]') !== null`),
		chromedp.Evaluate(`[...document.querySelectorAll("#tenant option")].map(o => o.value)`, &tenants),
		chromedp.Click(`#create`, chromedp.ByID),
		poll(`document.getElementById("session").textContent !== "none"`),
		chromedp.Click(`#connect`, chromedp.ByID),
		poll(`document.getElementById("status").textContent === "connected"`),
		chromedp.Click(`#pooled`, chromedp.ByID),
		poll(`[...document.querySelectorAll("#log .recv")].some(l => l.textContent.includes('"type":"echo"'))`),
		chromedp.Evaluate(`localStorage.length > 0 || sessionStorage.length > 0 || location.href.includes(`+jsString(key)+`) || document.cookie.includes(`+jsString(key)+`) || document.getElementById("key").value !== ""`, &kept),
	); err != nil {
		var status string
		chromedp.Run(ctx, chromedp.Text(`#status`, &status, chromedp.ByID))
		t.Fatalf("the demo page with a key: %v (status %q)", err, status)
	}
	if len(tenants) != 1 || tenants[0] != "acme" {
		t.Fatalf("a tenant's key lists %v, want [acme] alone", tenants)
	}
	if kept {
		t.Fatal("the key was kept outside the page's memory, or left in its field")
	}
}
