package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sluicehq/sluice/config"
)

// numbersConfig: "login" lets two a user an hour through (a token bucket:
// no window turns during the test) and boxes a user denied twice in a
// row for an hour; "export" is a shadow policy of one an hour; "api" and
// "search" are checked together by the endpoint "find". initech, the
// file's tenant, is of tier gold (api 2,000) and has its own search limit.
const numbersConfig = `version: 1
policies:
  api:    {algorithm: fixed_window, limit: 1000, window: 1h, key: [user]}
  export: {algorithm: token_bucket, limit: 1, window: 1h, key: [user], shadow: true}
  login:  {algorithm: token_bucket, limit: 2, window: 1h, key: [user], penalty: {after: 2, base: 1h, max: 2h}}
  search: {algorithm: fixed_window, limit: 50, window: 1m, key: [user]}
endpoints:
  find: [search, api]
tiers:
  free: {}
  gold: {api: {limit: 2000}}
tenants:
  initech: {tier: gold, overrides: {search: {limit: 7}}}
`

// TestDashboardNumbersInBrowser sends known traffic to a real server and
// checks each number the dashboard shows against it, in headless Chromium:
//
//   - denied counts every refusal: the policy's, its penalty box's and an
//     operator's block's (all 429), in total, per tenant and per policy;
//     a shadow policy's would-be denials are admits, shown apart;
//   - the abuse view opens on the policy with the most denials;
//   - the top tenants by denials, and the tenants stacked;
//   - the store's latencies are labelled as bucket bounds, and are;
//   - each tenant's enforced limits and endpoints are the configuration's;
//   - after a SIGKILL and a restart on the same data dir, once the history
//     was written (at most a minute after the traffic), the history's
//     range shows the same numbers.
func TestDashboardNumbersInBrowser(t *testing.T) {
	bin := chromium(t)
	const admin = "an-admin-key-for-the-dashboard-test"
	dir := t.TempDir()
	cfgPath := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(cfgPath, []byte(numbersConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	args := []string{"--admin-key", admin, "--config", cfgPath, "--data-dir", dir, "--history-save", "1s"}
	p := startAt(t, addr, args...)
	for _, id := range []string{"acme", "globex"} {
		if code, out := p.call(t, admin, "POST", "/v1/tenants", `{"id":"`+id+`"}`); code != 201 {
			t.Fatal(code, out)
		}
	}
	if code, out := p.call(t, admin, "POST", "/v1/tenants/acme/blocks", `{"policy":"login","parts":{"user":"eve"},"seconds":3600}`); code != 201 {
		t.Fatal(code, out)
	}

	// The traffic, each answer tallied.
	type tally struct{ allowed, refused, shadowed int }
	var total tally
	byTenant := map[string]*tally{"acme": {}, "globex": {}, "initech": {}}
	send := func(tenant, policy, user string, n int) (statuses []int) {
		t.Helper()
		for range n {
			status, body := checkBody(t, p, admin, tenant, policy, user)
			statuses = append(statuses, status)
			tt := byTenant[tenant]
			switch {
			case status == 429:
				total.refused++
				tt.refused++
			case strings.Contains(body, `"shadowed":true`):
				total.shadowed++
				tt.shadowed++
			default:
				total.allowed++
				tt.allowed++
			}
		}
		return statuses
	}
	send("acme", "api", "alice", 10)
	// mallory: two let through, two denied by the bucket, then boxed.
	if got := fmt.Sprint(send("acme", "login", "mallory", 30)); got != "[200 200"+strings.Repeat(" 429", 28)+"]" {
		t.Fatalf("mallory's answers: %s", got)
	}
	if got := fmt.Sprint(send("acme", "login", "eve", 3)); got != "[429 429 429]" {
		t.Fatalf("eve's answers while blocked: %s", got)
	}
	send("globex", "login", "gus", 5) // 2 allowed, 2 denied, 1 penalised
	send("globex", "api", "gina", 4)
	send("globex", "export", "bob", 5) // 1 allowed, 4 would-be denials, admitted
	send("initech", "api", "ian", 2)
	trafficEnd := time.Now()
	const penalised = 26 + 3 + 1 // mallory's boxed, eve's blocked, gus's boxed
	if total != (tally{allowed: 21, refused: 34, shadowed: 4}) {
		t.Fatalf("the traffic's answers: %+v", total)
	}
	decisions := func(tt *tally) int { return tt.allowed + tt.refused + tt.shadowed }

	ctx := newBrowser(t, bin)
	run := func(what string, actions ...chromedp.Action) {
		t.Helper()
		if err := chromedp.Run(ctx, actions...); err != nil {
			var dump string
			dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			chromedp.Run(dctx, chromedp.Evaluate(`[...document.querySelectorAll("[role=alert],#who,#hist-note,[data-testid$=-range],#top-tenants,#abuse-policy")].map(e => (e.id || e.dataset.testid) + "=" + (e.value || e.textContent)).join(" | ")`, &dump))
			cancel()
			t.Fatalf("%s: %v (page: %s)", what, err, dump)
		}
	}
	tiles := func(allowed, denied, pen, admitted int) chromedp.Action {
		return poll(tileIs("allowed-range", allowed) + " && " + tileIs("denied-range", denied) + " && " +
			tileIs("penalised-range", pen) + " && " + tileIs("admitted-range", admitted))
	}
	// The top tenants by denials: acme, globex, then initech (none).
	topTenants := `[...document.querySelectorAll("#top-tenants tbody tr")].map(r => r.dataset.tenant + ":" + r.querySelector("[data-testid=denied]").dataset.value + "/" + r.querySelector("[data-testid=decisions]").dataset.value).join(",") === ` +
		jsString(fmt.Sprintf("acme:%d/%d,globex:%d/%d,initech:0/%d", byTenant["acme"].refused, decisions(byTenant["acme"]),
			byTenant["globex"].refused, decisions(byTenant["globex"]), decisions(byTenant["initech"])))
	// The abuse view opens on login, the policy with the most denials
	// (api is first by name), mallory first with her 28.
	abusePolicy := poll(`document.getElementById("abuse-policy").value === "login" && document.getElementById("abuse-policy").dataset.picked === "most-denied"`)

	run("sign in as the admin",
		chromedp.Navigate("http://"+p.addr+"/dashboard"),
		poll(`!document.getElementById("login").hidden`),
		chromedp.SetValue(`#login-key`, admin, chromedp.ByID),
		chromedp.Click(`#login-submit`, chromedp.ByID),
		poll(`document.getElementById("who").textContent === "admin"`),
	)
	run("denied counts every refusal; shadow is admitted, apart",
		poll(selectOption("ov-range", "3600")),
		tiles(total.allowed, total.refused, penalised, total.shadowed),
		poll(`[...document.querySelectorAll("#ov-chart .u-legend .u-label")].map(e => e.textContent).includes("denied (every refusal)")`),
		poll(selectOption("ov-series", "tenant:acme")),
		tiles(byTenant["acme"].allowed, byTenant["acme"].refused, 26+3, 0),
		poll(selectOption("ov-series", "tenant:globex")),
		tiles(byTenant["globex"].allowed, byTenant["globex"].refused, 1, 4),
		poll(selectOption("ov-series", "policy:login")),
		tiles(4, 34, penalised, 0),
		poll(selectOption("ov-series", "policy:export")),
		tiles(1, 0, 0, 4),
		poll(selectOption("ov-series", "total")),
	)
	run("the top tenants by denials", poll(topTenants))
	stacked := func(names ...string) string {
		return `[...document.querySelectorAll("#stack-chart .u-legend .u-label")].slice(1).map(e => e.textContent).join() === ` + jsString(strings.Join(names, ","))
	}
	run("the tenants stacked",
		poll(stacked("other", "globex", "acme")), // by denials; initech denied none
		poll(selectOption("stack-kind", "decisions")),
		poll(stacked("other", "initech", "globex", "acme")),
		poll(selectOption("stack-kind", "denied")),
	)
	run("the default abuse policy",
		chromedp.Click(`[data-testid="tab-abuse"]`),
		abusePolicy,
		poll(`(() => { const r = document.querySelector("#abuse-denials tbody tr"); return !!r && (r.dataset.label || "").includes("mallory") && r.querySelector("[data-testid=count]").textContent === "28" })()`),
		chromedp.Click(`[data-testid="tab-overview"]`),
	)

	// The store's latencies are bucket bounds: labelled so, and each a
	// bound (10 µs times a power of √2, rounded up to the µs: the nearest
	// power, since bounds are √2 apart and the rounding adds under 1 µs;
	// compared with a tolerance, as 0.01·√2¹² is 0.6400000000000006 in
	// floating point and its rounding 0.64).
	run("the store's latencies are bounds",
		poll(`document.getElementById("store-p99").textContent.startsWith("≤ ") && document.getElementById("store-p99").dataset.value !== ""`),
		poll(`(() => { const v = Number(document.getElementById("store-p99").dataset.value), b = 0.01 * Math.SQRT2 ** Math.round(2 * Math.log2(v / 0.01)); return v > 0 && v >= b - 1e-9 && v < b + 0.001 })()`),
		// The text, rounded for the eye, is rounded up: still a bound.
		poll(`(() => { const e = document.getElementById("store-p99"), v = Number(e.dataset.value), shown = Number(e.textContent.slice(2).replace(/,/g, "")); return shown >= v && shown < v * 1.01 })()`),
		poll(`document.getElementById("store-legend").textContent.startsWith("Bucket bounds, not exact figures")`),
		poll(`document.getElementById("store-p99").parentElement.title.includes("upper bound")`),
	)
	if code, out := p.call(t, admin, "GET", "/v1/insight?seconds=60", ""); code != 200 || !storeFieldsAreBounds(out) {
		t.Fatalf("the store's latencies in the API: %d %v", code, out["store"])
	}

	// The enforced limits and endpoints of each tenant, as the file
	// configures them.
	for _, tenant := range []string{"acme", "globex", "initech"} {
		actions := []chromedp.Action{chromedp.Click(`[data-testid="tab-limits"]`), poll(selectOption("limits-tenant", tenant))}
		for name := range cfg.Policies {
			want, endpoints := enforcedFromConfig(cfg, tenant, name)
			actions = append(actions,
				poll(`(document.querySelector('[data-testid="enforced:`+name+`"]') || {}).textContent === `+jsString(want)),
				poll(`(document.querySelector('[data-testid="endpoints:`+name+`"]') || {}).textContent === `+jsString(endpoints)))
		}
		run("the limits of "+tenant, actions...)
	}
	run("back to the overview", chromedp.Click(`[data-testid="tab-overview"]`))

	// The history: written a second (--history-save) after the traffic.
	// Then a SIGKILL, and a restart on the same data dir.
	file := filepath.Join(dir, "insight-history")
	deadline := time.Now().Add(3 * time.Minute)
	for {
		if st, err := os.Stat(file); err == nil && st.ModTime().After(trafficEnd) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the history was not written within 3 minutes of the traffic")
		}
		time.Sleep(200 * time.Millisecond) // the poll's period
	}
	p.kill9(t)
	p = startAt(t, addr, args...)
	run("the history after a restart",
		chromedp.Navigate("http://"+p.addr+"/dashboard"), // signed in: the key is in the tab's session
		poll(`document.getElementById("who").textContent === "admin"`),
		poll(selectOption("ov-range", "21600")),
		poll(`document.getElementById("ov-chart-title").textContent.startsWith("Decisions per minute")`),
		poll(`document.getElementById("hist-note").textContent.includes("across restarts")`),
		tiles(total.allowed, total.refused, penalised, total.shadowed),
		poll(selectOption("ov-series", "tenant:acme")),
		tiles(byTenant["acme"].allowed, byTenant["acme"].refused, 26+3, 0),
		poll(selectOption("ov-series", "total")),
		poll(topTenants),
		poll(stacked("other", "globex", "acme")),
	)
	// The heaviest keys are of this process's hour (docs/dashboard.md); the
	// policy with the most denials is the history's.
	run("the default abuse policy after a restart", chromedp.Click(`[data-testid="tab-abuse"]`), abusePolicy)
	code, out := p.call(t, admin, "GET", "/v1/insight/history?minutes=60", "")
	if got := fmt.Sprint(out["topTenants"]); code != 200 || got != fmt.Sprintf("[map[decisions:%d denied:%d tenant:acme] map[decisions:%d denied:%d tenant:globex] map[decisions:%d denied:0 tenant:initech]]",
		decisions(byTenant["acme"]), byTenant["acme"].refused, decisions(byTenant["globex"]), byTenant["globex"].refused, decisions(byTenant["initech"])) {
		t.Fatalf("the history's top tenants after a restart: %d %s", code, got)
	}
}

// checkBody checks one hit of a configured policy for a user of a tenant
// and returns the status and the body.
func checkBody(t *testing.T, p *process, admin, tenant, policy, user string) (int, string) {
	t.Helper()
	body := fmt.Sprintf(`{"tenant":%q,"policies":[%q],"key":{"user":%q}}`, tenant, policy, user)
	req, err := http.NewRequest("POST", "http://"+p.addr+"/v1/check", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+admin)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 && resp.StatusCode != 429 {
		t.Fatalf("check %s: %s %s", body, resp.Status, b)
	}
	return resp.StatusCode, string(b)
}

// enforcedFromConfig is what the limits view should show of policy for
// tenant, from the configuration alone: its limit and window, and whose
// they are (the tenant's file overrides, its tier's, the policy's); and
// the endpoints that check it.
func enforcedFromConfig(cfg *config.Config, tenant, policy string) (enforced, endpoints string) {
	p := cfg.Policies[policy].Policy
	from := "the policy's"
	tier := cfg.Tenants[tenant].Tier
	if o, ok := cfg.Tiers[tier][policy]; ok && o.Limit != nil {
		p.Limit, from = *o.Limit, "tier "+tier
	}
	if o, ok := cfg.Tenants[tenant].Overrides[policy]; ok && o.Limit != nil {
		p.Limit, from = *o.Limit, "the file's"
	}
	var eps []string
	for name, ps := range cfg.Endpoints {
		if slices.Contains(ps, policy) {
			eps = append(eps, name)
		}
	}
	slices.Sort(eps)
	endpoints = strings.Join(eps, ", ")
	if endpoints == "" {
		endpoints = "–"
	}
	return strconv.FormatInt(p.Limit, 10) + " / " + p.Window.String() + " (" + from + ")", endpoints
}

// storeFieldsAreBounds reports whether the insight answer's store
// latencies are named as bounds (p99AtMost), and not as exact figures.
func storeFieldsAreBounds(out map[string]any) bool {
	pts, _ := out["store"].([]any)
	for _, pt := range pts {
		m := pt.(map[string]any)
		if _, ok := m["p99"]; ok {
			return false
		}
		if _, ok := m["p99AtMost"]; !ok {
			return false
		}
	}
	return len(pts) > 0
}
