// Sluice's operator dashboard: plain JavaScript over the /v1 routes (see
// docs/api.md and docs/dashboard.md). The key stays in this tab's session
// storage and goes only to this server; every text from the server is set
// with textContent, never parsed as HTML.
"use strict";
(() => {
  const $ = (id) => document.getElementById(id);
  const enc = encodeURIComponent;
  const fmt = new Intl.NumberFormat("en");
  const COLORS = {
    allowed: "#2da44e", denied: "#cf222e", penalised: "#bc4c00",
    shadow_denied: "#8250df", failed_open: "#6e7781", failed_closed: "#953800",
  };
  const HOUR = 3600;

  const state = {
    key: sessionStorage.getItem("sluice.key") || "",
    actor: sessionStorage.getItem("sluice.actor") || "",
    signedIn: false,
    admin: false,
    tenant: "", // a tenant key's own tenant
    kinds: ["allowed", "denied", "penalised", "shadow_denied", "failed_open", "failed_closed"],
    // The kinds that refused a request, whose sum is "denied" everywhere
    // on the page, and those that admitted it (the answers' refused and
    // admitted).
    refused: ["denied", "penalised", "failed_closed"],
    admitted: ["allowed", "shadow_denied", "failed_open"],
    // The history: counts per minute (GET .../insight/history), for the
    // ranges past the hour and the tenants compared.
    hist: { tenants: new Map(), policies: new Map(), top: [], kept: "", span: 1440, minutes: 0 },
    endpoints: {}, // endpoint -> its policies (GET /v1/policies)
    abusePicked: false, // the operator picked the abuse view's policy
    tenants: new Map(), // tenant -> Map(second -> counts by kind)
    policies: new Map(), // policy -> Map(second -> counts by kind)
    store: new Map(), // second -> {p50AtMost, p90AtMost, p99AtMost, n}: bucket bounds
    nodes: null,
    skew: 0, // the server's clock minus ours, in seconds, when it matters
    policyList: [], // GET /v1/policies
    tiers: [],
    ownLimits: {}, // a tenant key's own tenant's enforced limits, by policy (GET /v1/tenants/{id}/limits)
    view: "",
    viewTimer: 0,
    stream: null, // the stream's AbortController
    charts: {},
  };

  // ---- the API ----

  function nowSec() { return Math.floor(Date.now() / 1000 + state.skew); }

  function noteClock(resp) {
    const d = Date.parse(resp.headers.get("Date") || "");
    if (!isNaN(d)) {
      const skew = d / 1000 - Date.now() / 1000;
      // The header has whole seconds: a skew under two is its rounding.
      state.skew = Math.abs(skew) > 2 ? Math.round(skew) : 0;
    }
  }

  function authHeaders() {
    return state.key ? { Authorization: "Bearer " + state.key } : {};
  }

  // api calls a route and answers {status, ok, body}; a write carries the
  // operator's name. A 401 after signing in means the key went: sign out.
  async function api(path, { method = "GET", body, signal } = {}) {
    const headers = authHeaders();
    if (method !== "GET" && state.actor) {
      headers["X-Sluice-Actor"] = /^[\x20-\x7e]*$/.test(state.actor) ? state.actor : enc(state.actor);
    }
    if (body !== undefined) headers["Content-Type"] = "application/json";
    let resp;
    try {
      resp = await fetch(path, { method, headers, signal, cache: "no-store", body: body === undefined ? undefined : JSON.stringify(body) });
    } catch (e) {
      return { status: 0, ok: false, body: { message: "the server cannot be reached: " + e.message } };
    }
    noteClock(resp);
    let out = null;
    try { out = await resp.json(); } catch { out = null; }
    if (resp.status === 401 && state.signedIn) signOut("The key was refused: sign in again.");
    return { status: resp.status, ok: resp.ok, body: out };
  }

  function errText(r) {
    if (r.status === 0) return r.body.message;
    const m = r.body && r.body.message ? r.body.message : "";
    return r.status + (r.body && r.body.error ? " " + r.body.error : "") + (m ? ": " + m : "");
  }

  // The routes of the tenant in view: the admin's over every tenant, a
  // tenant key's over its own.
  function insightBase() {
    return state.admin ? "/v1/insight" : "/v1/tenants/" + enc(state.tenant) + "/insight";
  }

  // tenantOfKey is a tenant key's tenant: sk_<tenant>.<id>.<secret>.
  function tenantOfKey(key) {
    if (!key.startsWith("sk_")) return "";
    const last = key.lastIndexOf(".");
    const prev = last > 0 ? key.lastIndexOf(".", last - 1) : -1;
    return prev > 3 ? key.slice(3, prev) : "";
  }

  // ---- small DOM helpers ----

  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "text") e.textContent = v;
      else if (k === "class") e.className = v;
      else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v === true ? "" : v);
    }
    for (const k of kids) if (k !== null && k !== undefined) e.append(k);
    return e;
  }

  function setText(id, text) { $(id).textContent = text; }

  function setNum(id, n) {
    const e = $(id);
    e.textContent = n === null || n === undefined ? "–" : fmt.format(n);
    e.dataset.value = n === null || n === undefined ? "" : String(n);
  }

  function time(s) {
    const d = new Date(s);
    return isNaN(d) ? String(s) : d.toLocaleTimeString() + (Date.now() - d > 86400e3 ? " " + d.toLocaleDateString() : "");
  }

  function fillSelect(sel, items, keep) {
    const old = keep ? sel.value : "";
    sel.replaceChildren(...items.map(([value, label]) => el("option", { value, text: label })));
    if (items.some(([v]) => v === old)) sel.value = old;
  }

  // label is a key readable: the server's label; else a configured
  // policy's key parts, each name and value length-prefixed (uvarints), as
  // name=value; else the key with its control bytes shown as spaces.
  function label(item) {
    if (item.label) return item.label;
    const b = new TextEncoder().encode(item.key || "");
    const dec = new TextDecoder("utf-8", { fatal: true });
    const parts = [];
    let i = 0;
    const next = () => {
      let n = 0, shift = 0;
      for (;;) {
        if (i >= b.length || shift > 28) throw new Error("short");
        const c = b[i++];
        n += (c & 0x7f) * 2 ** shift;
        if (c < 0x80) break;
        shift += 7;
      }
      if (i + n > b.length) throw new Error("short");
      i += n;
      return dec.decode(b.subarray(i - n, i));
    };
    try {
      while (i < b.length) parts.push(next() + "=" + next());
      if (parts.length) return parts.join(", ");
    } catch { /* not a configured policy's key */ }
    return (item.key || "").replace(/[\x00-\x1f\x7f]+/g, " ").trim() || "(empty key)";
  }

  // ---- signing in ----

  async function signIn() {
    $("login-error").textContent = "";
    let r = await api("/v1/insight?seconds=" + HOUR);
    if (r.status === 401) return showLogin(state.key ? "This key was refused." : "");
    if (r.status === 0) return showLogin(r.body.message);
    if (r.status === 403) {
      const t = tenantOfKey(state.key);
      const tr = t ? await api("/v1/tenants/" + enc(t)) : null;
      if (!tr || !tr.ok) return showLogin("This key reaches neither the admin's routes nor a tenant's" + (tr ? " (" + errText(tr) + ")" : "") + ".");
      state.admin = false;
      state.tenant = t;
      r = await api(insightBase() + "?seconds=" + HOUR);
    } else {
      state.admin = true;
    }
    state.signedIn = true;
    $("login").hidden = true;
    $("tabs").hidden = false;
    $("signout").hidden = !state.key;
    $("actor-box").hidden = !state.admin; // a tenant's key changes nothing
    $("actor").value = state.actor;
    setText("who", state.admin ? "admin" : "tenant " + state.tenant);
    for (const e of document.querySelectorAll(".admin-only")) e.hidden = !state.admin;
    ingest(r);
    const pr = await api("/v1/policies");
    if (pr.ok) {
      state.policyList = pr.body.policies || [];
      state.tiers = pr.body.tiers || [];
      state.endpoints = pr.body.endpoints || {};
    }
    if (!state.admin) state.ownLimits = await enforcedLimits(state.tenant);
    fillSeriesSelect();
    renderOverview();
    streamLoop();
    loadHistory();
    setInterval(refreshInsight, 5000);
    setInterval(loadHistory, 15000);
    setInterval(renderOverview, 1000);
    const want = location.hash.slice(1);
    showView(views[want] && (state.admin || want !== "gateway") ? want : "overview");
  }

  function showLogin(msg) {
    state.signedIn = false;
    state.key = "";
    sessionStorage.removeItem("sluice.key");
    $("login").hidden = false;
    $("login-error").textContent = msg || "";
    $("login-key").value = "";
    $("login-actor").value = state.actor;
    $("login-key").focus();
    setText("who", "not signed in");
  }

  function signOut(msg) {
    sessionStorage.removeItem("sluice.key");
    sessionStorage.removeItem("sluice.actor");
    if (msg) sessionStorage.setItem("sluice.message", msg);
    location.hash = "";
    location.reload();
  }

  // ---- the counts: history, refresh and stream ----

  function merge(map, name, points) {
    let m = map.get(name);
    if (!m) map.set(name, (m = new Map()));
    for (const p of points || []) m.set(p.t, p.n);
  }

  function prune() {
    const lo = nowSec() - HOUR;
    for (const map of [state.tenants, state.policies]) {
      for (const m of map.values()) for (const t of m.keys()) if (t < lo) m.delete(t);
    }
    for (const t of state.store.keys()) if (t < lo) state.store.delete(t);
  }

  // ingest takes an insight answer: the admin's every tenant and policy, or
  // a tenant's own series.
  function ingest(r) {
    if (!r || !r.ok || !r.body) {
      if (r && r.status === 404) setText("ov-error", "This server keeps no insight.");
      else if (r && r.status) setText("ov-error", "Insight: " + errText(r));
      return;
    }
    setText("ov-error", "");
    const b = r.body;
    if (Array.isArray(b.kinds) && b.kinds.length) state.kinds = b.kinds;
    if (Array.isArray(b.refused)) state.refused = b.refused;
    if (Array.isArray(b.admitted)) state.admitted = b.admitted;
    for (const s of b.tenants || []) merge(state.tenants, s.name, s.points);
    for (const s of b.policies || []) merge(state.policies, s.name, s.points);
    if (b.tenant) merge(state.tenants, b.tenant.name, b.tenant.points);
    for (const p of b.store || []) state.store.set(p.t, p);
    if (Array.isArray(b.nodes)) {
      state.nodes = b.nodes;
      setText("nodes", b.nodes.length === 1 ? "node " + b.nodes[0] : b.nodes.length + " nodes: " + b.nodes.join(", "));
    }
    prune();
  }

  async function refreshInsight() {
    const r = await api(insightBase() + "?seconds=70");
    ingest(r);
    fillSeriesSelect();
  }

  // streamLoop reads the per-second stream with fetch (an EventSource
  // cannot send the key), reconnecting with a growing backoff.
  async function streamLoop() {
    let backoff = 1000;
    while (state.signedIn) {
      const ctl = new AbortController();
      state.stream = ctl;
      try {
        const resp = await fetch(insightBase() + "/stream", { headers: authHeaders(), signal: ctl.signal, cache: "no-store" });
        if (resp.status === 401) return signOut("The key was refused: sign in again.");
        if (!resp.ok || !resp.body) throw new Error("status " + resp.status);
        setText("ov-live", "live");
        const reader = resp.body.getReader();
        const dec = new TextDecoder();
        let buf = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += dec.decode(value, { stream: true }).replace(/\r\n?/g, "\n");
          let i;
          while ((i = buf.indexOf("\n\n")) >= 0) {
            onFrame(buf.slice(0, i));
            buf = buf.slice(i + 2);
            backoff = 1000;
          }
        }
      } catch (e) {
        if (ctl.signal.aborted) return;
      }
      setText("ov-live", "stream lost: reconnecting…");
      await new Promise((ok) => setTimeout(ok, backoff * (1 + Math.random() / 2)));
      backoff = Math.min(backoff * 2, 30000);
    }
  }

  function onFrame(frame) {
    let event = "message";
    const data = [];
    for (const line of frame.split("\n")) {
      if (line === "" || line.startsWith(":")) continue;
      const c = line.indexOf(":");
      const field = c < 0 ? line : line.slice(0, c);
      const value = c < 0 ? "" : line.slice(c + 1).replace(/^ /, "");
      if (field === "event") event = value;
      else if (field === "data") data.push(value);
    }
    if (event !== "second" || !data.length) return;
    let d;
    try { d = JSON.parse(data.join("\n")); } catch { return; }
    // An array of series; or an object with them under "tenants" (and
    // perhaps the store's latencies).
    const series = Array.isArray(d) ? d : d.tenants || [];
    for (const s of series) {
      if (state.admin || s.name === state.tenant) merge(state.tenants, s.name, s.points);
    }
    if (!Array.isArray(d)) for (const p of d.store || []) state.store.set(p.t, p);
    setText("ov-live", "live · " + new Date().toLocaleTimeString());
  }

  // ---- overview ----

  function fillSeriesSelect() {
    const items = [];
    if (state.admin) {
      items.push(["total", "all tenants"]);
      // Those of the seconds and of the history (after a restart, the
      // history's alone).
      const names = (a, b) => [...new Set([...a.keys(), ...b.keys()])].sort();
      for (const t of names(state.tenants, state.hist.tenants)) items.push(["tenant:" + t, "tenant " + t]);
      for (const p of names(state.policies, state.hist.policies)) items.push(["policy:" + p, "policy " + p]);
    } else {
      items.push(["tenant:" + state.tenant, "tenant " + state.tenant]);
    }
    const sel = $("ov-series");
    const now = [...sel.options].map((o) => o.value).join("\n");
    if (now !== items.map(([v]) => v).join("\n")) fillSelect(sel, items, true);
  }

  // selectedMaps returns the series picked, of src: the seconds (state)
  // or the minutes (state.hist).
  function selectedMaps(src) {
    const v = $("ov-series").value || (state.admin ? "total" : "tenant:" + state.tenant);
    if (v === "total") return [...src.tenants.values()];
    const i = v.indexOf(":");
    const m = (v.slice(0, i) === "policy" ? src.policies : src.tenants).get(v.slice(i + 1));
    return m ? [m] : [];
  }

  // sumOf adds up the counts of kinds names in c (counts by state.kinds).
  function sumOf(c, names) {
    let n = 0;
    for (const name of names) {
      const k = state.kinds.indexOf(name);
      if (k >= 0) n += c[k] || 0;
    }
    return n;
  }

  // The history of the range shown: per minute, as far back as the range
  // (the tenants compared; the chart past the hour). A range changed
  // meanwhile asks again.
  async function loadHistory() {
    if (!state.signedIn) return;
    const range = $("ov-range").value;
    const minutes = Math.max(1, Math.min(state.hist.span || 1440, Math.ceil((Number(range) || HOUR) / 60)));
    const r = await api(insightBase() + "/history?minutes=" + minutes);
    if ($("ov-range").value !== range) return;
    if (!r.ok || !r.body) {
      setText("hist-note", r.status === 404 ? "" : "History: " + errText(r));
      return;
    }
    const b = r.body, h = state.hist;
    h.tenants = new Map();
    h.policies = new Map();
    for (const s of b.tenants || []) merge(h.tenants, s.name, s.points);
    for (const s of b.policies || []) merge(h.policies, s.name, s.points);
    if (b.tenant) merge(h.tenants, b.tenant.name, b.tenant.points);
    h.top = b.topTenants || [];
    h.kept = b.kept;
    h.span = b.span || h.span;
    h.minutes = b.minutes;
    fillSeriesSelect();
    const day = h.span % 1440 === 0 ? h.span / 1440 + (h.span === 1440 ? " day" : " days") : h.span + " minutes";
    setText("hist-note", "History per minute, " + day + " back: " + (b.kept === "file"
      ? "kept in a file of this server's data dir, across restarts (the last minute may be lost to a crash)."
      : "kept in memory only (--store memory): a restart forgets it."));
    renderOverview();
  }

  function countsAt(maps, t, out) {
    out.fill(0);
    for (const m of maps) {
      const n = m.get(t);
      if (n) for (let k = 0; k < out.length; k++) out[k] += n[k] || 0;
    }
    return out;
  }

  const CHART = [
    // [label, kinds summed, color]
    ["allowed", ["allowed"], "#2da44e"],
    ["denied (every refusal)", null, "#cf222e"],
    ["by the limit", ["denied"], "#ff8182"],
    ["penalised or blocked", ["penalised"], "#bc4c00"],
    ["failed closed", ["failed_closed"], "#953800"],
    ["shadow (admitted)", ["shadow_denied"], "#8250df"],
    ["failed open (admitted)", ["failed_open"], "#6e7781"],
  ];

  function renderOverview() {
    if (!state.signedIn) return;
    const now = nowSec();
    const span = Number($("ov-range").value) || HOUR;
    const n = state.kinds.length;
    const c = new Array(n);
    const anyway = state.admitted.filter((k) => k !== "allowed");
    // The tiles of the last seconds: this process's seconds.
    const secs = selectedMaps(state);
    const sum10 = new Array(n).fill(0), sum60 = new Array(n).fill(0);
    for (let t = now - 59; t <= now; t++) {
      countsAt(secs, t, c);
      for (let k = 0; k < n; k++) {
        sum60[k] += c[k];
        if (t > now - 10) sum10[k] += c[k];
      }
    }
    setNum("allowed-10s", sumOf(sum10, ["allowed"]));
    setNum("denied-10s", sumOf(sum10, state.refused));
    setNum("allowed-60s", sumOf(sum60, ["allowed"]));
    setNum("denied-60s", sumOf(sum60, state.refused));
    setNum("penalised-60s", sumOf(sum60, ["penalised"]));
    setNum("admitted-60s", sumOf(sum60, anyway));
    // The range: per second up to the hour, per minute past it (the
    // history, kept across restarts).
    const perMinute = span > HOUR;
    const step = perMinute ? 60 : 1;
    const maps = perMinute ? selectedMaps(state.hist) : secs;
    const last = perMinute ? Math.floor(now / 60) * 60 : now;
    const xs = [];
    const ys = CHART.map(() => []);
    const range = new Array(n).fill(0);
    for (let t = last - span + step; t <= last; t += step) {
      countsAt(maps, t, c);
      xs.push(t);
      for (let k = 0; k < n; k++) range[k] += c[k];
      CHART.forEach(([, kinds], i) => ys[i].push(sumOf(c, kinds || state.refused)));
    }
    setNum("allowed-range", sumOf(range, ["allowed"]));
    setNum("denied-range", sumOf(range, state.refused));
    setNum("penalised-range", sumOf(range, ["penalised"]));
    setNum("admitted-range", sumOf(range, anyway));
    const rangeName = $("ov-range").selectedOptions[0] ? $("ov-range").selectedOptions[0].textContent : "";
    setText("allowed-range-label", "allowed, last " + rangeName);
    setText("denied-range-label", "denied, last " + rangeName);
    setText("ov-chart-title", perMinute ? "Decisions per minute (the history)" : "Decisions per second");
    chart("ov-chart", perMinute ? "decisions / min" : "decisions / s", CHART.map(([l]) => l), [xs, ...ys], CHART.map(([, , col]) => col));
    renderCompare(now, span);

    // The store's latencies: per second; over 60 s the calls' weighted
    // mean of p50, and the worst second's p90 and p99. Each is a
    // bucket's upper bound (p99 ≤ x ms), not an exact figure.
    const sx = [], s50 = [], s90 = [], s99 = [];
    let calls = 0, w50 = 0, m90 = 0, m99 = 0;
    for (const t of [...state.store.keys()].sort((a, b) => a - b)) {
      if (t <= now - Math.min(span, HOUR)) continue;
      const p = state.store.get(t);
      sx.push(t); s50.push(p.p50AtMost); s90.push(p.p90AtMost); s99.push(p.p99AtMost);
      if (t > now - 60 && p.n > 0) {
        calls += p.n; w50 += p.p50AtMost * p.n; m90 = Math.max(m90, p.p90AtMost); m99 = Math.max(m99, p.p99AtMost);
      }
    }
    const ms = (v) => (calls ? v : null);
    setBound("store-p50", ms(calls ? w50 / calls : 0));
    setBound("store-p90", ms(m90));
    setBound("store-p99", ms(m99));
    setNum("store-n", calls);
    $("store-chart").hidden = !sx.length;
    setText("store-note", sx.length ? "" : "No store latencies from this server yet.");
    if (sx.length) chart("store-chart", "ms (at most)", ["p50 ≤", "p90 ≤", "p99 ≤"], [sx, s50, s90, s99], ["#0969da", "#bf8700", "#cf222e"]);
  }

  // setBound shows a percentile's bucket bound: "≤ 2.5". The text is
  // rounded up, to three significant digits, so that it stays a bound;
  // data-value holds the bound itself.
  const boundFmt = new Intl.NumberFormat("en", { maximumSignificantDigits: 3, roundingMode: "ceil" });
  function setBound(id, v) {
    const e = $(id);
    e.textContent = v === null || v === undefined ? "–" : "≤ " + boundFmt.format(v);
    e.dataset.value = v === null || v === undefined ? "" : String(v);
  }

  // renderCompare draws the tenants compared over the range (the admin's):
  // the five heaviest by the measure picked, stacked, the rest as
  // "other"; and the top tenants by denials, as the server ranks them.
  const STACK = ["#cf222e", "#0969da", "#bf8700", "#2da44e", "#8250df", "#6e7781"];
  function renderCompare(now, span) {
    if (!state.admin) return;
    $("compare").hidden = false;
    const measure = $("stack-kind").value;
    const last = Math.floor(now / 60) * 60;
    const xs = [];
    for (let t = last - Math.max(60, Math.ceil(span / 60) * 60) + 60; t <= last; t += 60) xs.push(t);
    const valueAt = (m, t) => {
      const p = m.get(t);
      if (!p) return 0;
      return measure === "denied" ? sumOf(p, state.refused) : p.reduce((a, b) => a + (b || 0), 0);
    };
    const totals = [];
    for (const [name, m] of state.hist.tenants) {
      let tot = 0;
      for (const t of xs) tot += valueAt(m, t);
      totals.push([name, tot, m]);
    }
    totals.sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1));
    const top = totals.filter(([name, tot]) => tot > 0 && name !== "(other)").slice(0, 5);
    const rest = totals.filter((x) => !top.includes(x));
    // Stacked: each band is drawn as the sum of itself and those below,
    // the widest (every tenant) first so the narrower paint over it.
    const layers = [...top.map(([name, , m]) => [name, (t) => valueAt(m, t)]),
      ["other", (t) => rest.reduce((a, [, , m]) => a + valueAt(m, t), 0)]];
    const cum = xs.map(() => 0);
    const bands = layers.map(([name, f]) => [name, xs.map((t, i) => (cum[i] += f(t)))]);
    bands.reverse();
    const colors = layers.map((_, i) => (i === layers.length - 1 ? "#d0d7de" : STACK[i % STACK.length])).reverse();
    chart("stack-chart", measure + " / min", bands.map(([name]) => name), [xs, ...bands.map(([, v]) => v)], colors, true);
    const rows = (state.hist.top || []).map((x) => el("tr", { "data-tenant": x.tenant },
      el("td", { text: x.tenant }),
      el("td", { class: "num", "data-testid": "denied", "data-value": String(x.denied), text: fmt.format(x.denied) }),
      el("td", { class: "num", "data-testid": "decisions", "data-value": String(x.decisions), text: fmt.format(x.decisions) }),
      el("td", { class: "num", text: x.decisions ? Math.round(1000 * x.denied / x.decisions) / 10 + "%" : "–" })));
    if (!rows.length) rows.push(el("tr", {}, el("td", { colspan: 4, class: "muted", text: "no decisions over the range" })));
    $("top-tenants").tBodies[0].replaceChildren(...rows);
  }

  // chart draws data in the element id, making its uPlot once.
  function chart(id, unit, names, data, colors, filled) {
    const box = $(id);
    if (typeof uPlot === "undefined" || box.offsetParent === null) return;
    const width = Math.max(300, box.clientWidth - 10);
    let u = state.charts[id];
    if (u && (u.series.length !== names.length + 1 || u.series.some((s, i) => i > 0 && s.label !== names[i - 1]))) { u.destroy(); u = null; }
    if (!u) {
      u = new uPlot({
        width, height: id === "ov-chart" ? 260 : 160,
        scales: { x: { time: true } },
        series: [{}, ...names.map((name, i) => ({
          label: name, stroke: colors ? colors[i] : COLORS[name] || "#444", width: 1.5,
          fill: filled ? (colors ? colors[i] : "#888") + "99" : undefined,
          value: (_, v) => (v === null || v === undefined ? "–" : fmt.format(v)),
        }))],
        axes: [{}, { label: unit, size: 60 }],
      }, data, box);
      state.charts[id] = u;
      return;
    }
    if (Math.abs(u.width - width) > 4) u.setSize({ width, height: u.height });
    u.setData(data);
  }

  // ---- abuse ----

  const DURATIONS = [["60", "1m"], ["600", "10m"], ["3600", "1h"], ["86400", "1d"]];

  function policyNames() {
    const names = new Set(state.policyList.map((p) => p.name));
    if (state.admin) for (const p of state.policies.keys()) names.add(p);
    return [...names].sort();
  }

  // mostDenied is the policy with the most denials (every refusal) over
  // the last hour of seconds, else over the history's minutes; null if
  // none denied anything (or a tenant's key, which sees no policy's
  // series).
  function mostDenied(names) {
    for (const src of [state.policies, state.hist.policies]) {
      let best = null, most = 0;
      for (const p of names) {
        let n = 0;
        for (const c of (src.get(p) || new Map()).values()) n += sumOf(c, state.refused);
        if (n > most) { best = p; most = n; }
      }
      if (best) return best;
    }
    return null;
  }

  async function loadAbuse() {
    const sel = $("abuse-policy");
    const names = policyNames();
    fillSelect(sel, names.map((p) => [p, p]), true);
    if (!state.abusePicked) {
      const most = mostDenied(names);
      if (most) sel.value = most;
      sel.dataset.picked = most ? "most-denied" : "first";
    }
    const policy = sel.value;
    if (!policy) return setText("abuse-error", "No policies yet.");
    const r = await api(insightBase() + "/top?policy=" + enc(policy) + "&n=20&state=1");
    if (sel.value !== policy) return; // another policy was picked meanwhile
    if (!r.ok) return setText("abuse-error", "Top keys: " + errText(r));
    setText("abuse-error", "");
    const top = r.body;
    setText("abuse-updated", "updated " + new Date().toLocaleTimeString());
    // A tenant's view has no bounds: they are of every tenant's traffic,
    // and its counts are its own keys' alone (at least what is shown).
    const bounded = top.hitsBound !== undefined;
    setText("abuse-denials-bound", bounded ? "Any key denied more than " + fmt.format(top.denialsBound || 0) + " times is listed; no count is over by more." : "Counts are at least what is shown.");
    setText("abuse-hits-bound", bounded ? "Any key with more than " + fmt.format(top.hitsBound || 0) + " hits is listed; no count is over by more." : "");
    abuseRows("abuse-denials", policy, top.denials || []);
    abuseRows("abuse-hits", policy, top.hits || []);
  }

  function abuseRows(id, policy, items) {
    const rows = items.map((it) => {
      const st = it.state;
      const stateText = st ? fmt.format(st.remaining) + " of " + fmt.format(st.limit) + " left" + (st.allowed ? "" : ", denying") + (st.resetAt ? " · resets " + time(st.resetAt) : "") : "–";
      const marks = [];
      if (it.blockedUntil) marks.push("blocked until " + time(it.blockedUntil));
      if (it.penaltyUntil) marks.push("penalty until " + time(it.penaltyUntil));
      let action = null;
      if (state.admin) {
        const dur = el("select", { "data-testid": "block-duration", "aria-label": "block for" }, ...DURATIONS.map(([v, l]) => el("option", { value: v, text: l })));
        dur.value = "600";
        action = el("td", {},
          dur, " ",
          el("button", { "data-testid": "block", onclick: () => block(policy, it, Number(dur.value)) , text: "Block" }), " ",
          el("button", { "data-testid": "lift", onclick: () => lift(policy, it.tenant, it.key), text: "Lift" }));
      }
      return el("tr", { "data-tenant": it.tenant, "data-label": label(it) },
        el("td", { text: it.tenant }),
        el("td", { class: "key", text: label(it) }),
        el("td", { class: "num", "data-testid": "count", text: fmt.format(it.count) + (it.error ? " ± " + fmt.format(it.error) : "") }),
        el("td", { "data-testid": "state", text: stateText }),
        el("td", { class: marks.length ? "blocked" : "", "data-testid": "marks", text: marks.join(" · ") || "–" }),
        action);
    });
    if (!rows.length) rows.push(el("tr", {}, el("td", { colspan: state.admin ? 6 : 5, class: "muted", text: "no keys yet" })));
    $(id).tBodies[0].replaceChildren(...rows);
  }

  async function block(policy, it, seconds) {
    setText("abuse-status", "blocking " + label(it) + "…");
    const r = await api("/v1/tenants/" + enc(it.tenant) + "/blocks", {
      method: "POST", body: { policy, key: it.key, seconds, reason: "blocked from the dashboard" },
    });
    if (!r.ok) { setText("abuse-status", ""); return setText("abuse-error", "Block: " + errText(r)); }
    setText("abuse-error", "");
    setText("abuse-status", "blocked " + label(it) + " (" + it.tenant + ", " + policy + ") until " + time(r.body && r.body.until));
    loadAbuse();
  }

  async function lift(policy, tenant, key, then) {
    const r = await api("/v1/tenants/" + enc(tenant) + "/blocks?policy=" + enc(policy) + "&key=" + enc(key), { method: "DELETE" });
    if (!r.ok) return setText(then ? "limits-error" : "abuse-error", "Lift: " + errText(r));
    setText("abuse-error", "");
    setText("abuse-status", "lifted " + label({ key }) + " (" + tenant + ", " + policy + ")");
    (then || loadAbuse)();
  }

  // ---- limits ----

  const SETTINGS = ["connectionsPerSession", "tenantConnections", "sessionPerMinute", "tenantPerMinute", "sessionTTL", "messagesPerMinute"];
  let loadedTenant = null;

  async function loadLimits() {
    const sel = $("limits-tenant");
    if (state.admin) {
      const r = await api("/v1/tenants");
      if (!r.ok) return setText("limits-error", "Tenants: " + errText(r));
      fillSelect(sel, (r.body.tenants || []).map((t) => [t.id, t.id]), true);
    } else {
      fillSelect(sel, [[state.tenant, state.tenant]], true);
      sel.disabled = true;
    }
    $("limits-readonly").hidden = state.admin;
    if (sel.value) await loadTenant(sel.value);
  }

  // enforcedLimits returns a tenant's limits as its requests are decided,
  // tier and overrides applied, by policy: {limit, from, ...}.
  async function enforcedLimits(id) {
    const r = await api("/v1/tenants/" + enc(id) + "/limits");
    const out = {};
    if (r.ok) for (const l of r.body.limits || []) out[l.name] = l;
    return out;
  }

  // loadTenant shows tenant id in the limits view. Of two loads at once
  // (the view's first tenant still loading when another is chosen), only
  // the later one is shown: a late answer for the first would otherwise
  // show its form under the second's name.
  let tenantLoads = 0;
  async function loadTenant(id) {
    const seq = ++tenantLoads;
    clearFieldErrors();
    setText("limits-error", "");
    const [r, enforced] = await Promise.all([api("/v1/tenants/" + enc(id)), enforcedLimits(id)]);
    if (seq !== tenantLoads) return;
    if (!r.ok) {
      loadedTenant = null;
      setText("limits-error", "Tenant " + id + ": " + errText(r));
    } else {
      loadedTenant = r.body;
      renderTenantForm(r.body, enforced);
      if (r.body.source === "file") setText("limits-error", "Tenant " + id + " is the configuration file's: its limits are changed in that file (shown read-only).");
    }
    loadBlocks(id);
    loadAudit(id);
  }

  let readOnly = true; // the form's tenant cannot be changed here: a tenant's key, or a tenant of the file

  function input(field, value, placeholder) {
    return el("input", { "data-field": field, "data-testid": field, size: 8, value: value === undefined || value === null ? "" : String(value), placeholder, disabled: readOnly, autocomplete: "off" });
  }

  function fieldError(field) { return el("span", { class: "field-error", "data-error-for": field, "data-testid": "error:" + field }); }

  function renderTenantForm(t, enforced) {
    readOnly = !state.admin || t.source === "file";
    $("limits-save").disabled = readOnly;
    fillSelect($("limits-tier"), [["", "(default tier)"], ...state.tiers.map((x) => [x, x])]);
    $("limits-tier").value = t.tier || "";
    $("limits-tier").disabled = readOnly;
    const s = t.settings || {};
    $("limits-settings").replaceChildren(...SETTINGS.map((name) => {
      const f = "settings." + name;
      return el("label", {}, name, input(f, s[name] || "", "default"), fieldError(f));
    }));
    const ov = t.overrides || {};
    $("limits-overrides").tBodies[0].replaceChildren(...state.policyList.map((p) => {
      const o = ov[p.name] || {};
      const f = "overrides." + p.name + ".";
      const bursty = p.algorithm === "token_bucket" || p.algorithm === "gcra";
      const shadow = el("select", { "data-field": f + "shadow", "data-testid": f + "shadow", disabled: readOnly },
        el("option", { value: "", text: p.shadow ? "(shadow)" : "(enforced)" }),
        el("option", { value: "true", text: "shadow" }), el("option", { value: "false", text: "enforce" }));
      shadow.value = o.shadow === undefined ? "" : String(o.shadow);
      const burst = input(f + "burst", o.burst, bursty ? "= limit" : "n/a");
      if (!bursty && o.burst === undefined) burst.disabled = true;
      return el("tr", { "data-policy": p.name },
        el("td", { text: p.name }),
        el("td", { class: "muted", text: p.algorithm }),
        el("td", {}, input(f + "limit", o.limit, String(p.limit)), fieldError(f + "limit")),
        el("td", {}, input(f + "window", o.window, p.window || "–"), fieldError(f + "window")),
        el("td", {}, burst, fieldError(f + "burst")),
        el("td", {}, shadow, fieldError(f + "shadow")),
        el("td", { "data-testid": "enforced:" + p.name, text: enforcedText(enforced && enforced[p.name]) }),
        el("td", { "data-testid": "endpoints:" + p.name, class: "muted", text: endpointsOf(p.name).join(", ") || "–" }));
    }));
  }

  // endpointsOf lists the endpoints (of the configuration) that check
  // policy, all-or-nothing with their other policies.
  function endpointsOf(policy) {
    return Object.entries(state.endpoints).filter(([, ps]) => (ps || []).includes(policy)).map(([e]) => e).sort();
  }

  // enforcedText shows an enforced limit and where it comes from.
  function enforcedText(l) {
    if (!l) return "–";
    const from = { policy: "the policy's", tier: "tier " + (loadedTenant && loadedTenant.tier || "default"), file: "the file's", tenant: "this tenant's" }[l.from] || l.from;
    return l.limit + (l.window ? " / " + l.window : "") + " (" + from + ")";
  }

  function clearFieldErrors() {
    for (const e of document.querySelectorAll("#view-limits .field-error")) e.textContent = "";
    for (const e of document.querySelectorAll("#view-limits .invalid")) e.classList.remove("invalid");
  }

  // showFieldError puts msg next to the input of field, or the nearest
  // one above it ("overrides.api" for "overrides.api.window.x"); else in
  // the form's error line.
  function showFieldError(field, msg) {
    for (let f = field; f; f = f.includes(".") ? f.slice(0, f.lastIndexOf(".")) : "") {
      const slot = document.querySelector('#view-limits [data-error-for="' + CSS.escape(f) + '"]');
      if (slot) {
        slot.textContent = msg;
        const inp = document.querySelector('#view-limits [data-field="' + CSS.escape(f) + '"]');
        if (inp) { inp.classList.add("invalid"); inp.focus(); }
        return;
      }
    }
    setText("limits-error", (field ? field + ": " : "") + msg);
  }

  // tenantBody reads the form into a PUT body, keeping what the form does
  // not show (an override's leaseTTL, overrides of policies it lacks).
  function tenantBody() {
    const t = loadedTenant;
    const out = { id: t.id, settings: {}, overrides: JSON.parse(JSON.stringify(t.overrides || {})) };
    if ($("limits-tier").value) out.tier = $("limits-tier").value;
    let bad = false;
    const int = (e) => {
      const v = e.value.trim();
      if (v === "") return undefined;
      if (!/^-?\d+$/.test(v)) { showFieldError(e.dataset.field, "must be a whole number"); bad = true; return undefined; }
      return Number(v);
    };
    for (const name of SETTINGS) {
      const v = int(document.querySelector('[data-field="settings.' + name + '"]'));
      if (v !== undefined) out.settings[name] = v;
    }
    for (const p of state.policyList) {
      const o = Object.assign({}, out.overrides[p.name] || {});
      const get = (f) => document.querySelector('[data-field="' + CSS.escape("overrides." + p.name + "." + f) + '"]');
      for (const f of ["limit", "burst"]) {
        const v = int(get(f));
        if (v === undefined) delete o[f]; else o[f] = v;
      }
      const w = get("window").value.trim();
      if (w === "") delete o.window; else o.window = /^\d+$/.test(w) ? Number(w) : w;
      const sh = get("shadow").value;
      if (sh === "") delete o.shadow; else o.shadow = sh === "true";
      if (Object.keys(o).length) out.overrides[p.name] = o; else delete out.overrides[p.name];
    }
    return bad ? null : out;
  }

  async function saveLimits(ev) {
    ev.preventDefault();
    if (readOnly || !loadedTenant) return;
    clearFieldErrors();
    setText("limits-error", "");
    setText("limits-status", "");
    const body = tenantBody();
    if (!body) return;
    const id = loadedTenant.id;
    const r = await api("/v1/tenants/" + enc(id), { method: "PUT", body });
    if (r.status === 400 && r.body) return showFieldError(r.body.field || "", r.body.message || "invalid");
    if (!r.ok) return setText("limits-error", "Save: " + errText(r));
    setText("limits-status", "saved " + id + " at " + new Date().toLocaleTimeString());
    loadedTenant = r.body;
    renderTenantForm(r.body, await enforcedLimits(id));
    loadAudit(id);
  }

  // fillTable fills table tableId with a row per item of list in what
  // path answers, or says in noteId why not (what names it) or that there
  // is none (empty).
  // fillTable fills a table from path; of two loads of one table at once
  // (a tenant chosen while another's still loads), the later one wins.
  const tableLoads = {};
  async function fillTable(path, tableId, noteId, what, empty, list, row) {
    const seq = (tableLoads[tableId] = (tableLoads[tableId] || 0) + 1);
    const r = await api(path);
    if (tableLoads[tableId] !== seq) return;
    const body = $(tableId).tBodies[0];
    if (!r.ok) {
      body.replaceChildren();
      return setText(noteId, what + ": " + errText(r));
    }
    const items = list(r.body) || [];
    setText(noteId, items.length ? "" : empty);
    body.replaceChildren(...items.map(row));
  }

  function loadBlocks(id) {
    return fillTable("/v1/tenants/" + enc(id) + "/blocks", "blocks", "blocks-note", "Blocks", "No operator blocks.", (b) => b.blocks,
      (b) => el("tr", { "data-label": label(b) },
        el("td", { text: b.policy }),
        el("td", { class: "key", text: label(b) }),
        el("td", { text: time(b.until) }),
        el("td", { text: b.reason || "" }),
        el("td", { text: b.by || "" }),
        state.admin ? el("td", {}, el("button", { "data-testid": "lift", text: "Lift", onclick: () => lift(b.policy, id, b.key, () => loadBlocks(id)) })) : null));
  }

  // flatten lists an object's leaves by path, for the audit's changes.
  function flatten(v, path, out) {
    if (v !== null && typeof v === "object" && !Array.isArray(v)) {
      for (const [k, x] of Object.entries(v)) flatten(x, path ? path + "." + k : k, out);
    } else if (path) {
      out[path] = v;
    }
    return out;
  }

  const show = (x) => (x === undefined ? "–" : typeof x === "string" ? x.replace(/[\x00-\x1f\x7f]+/g, " ").trim() : JSON.stringify(x));

  // summary is one item of a list in the trail: a block, or any object.
  function summary(x) {
    if (x && typeof x === "object" && "policy" in x && "key" in x) {
      return x.policy + " " + label(x) + (x.until ? " until " + time(x.until) : "") + (x.reason ? " (" + x.reason + ")" : "");
    }
    return x && typeof x === "object" ? Object.entries(x).map(([k, v]) => k + "=" + show(v)).join(", ") : show(x);
  }

  // change tells what an audit entry changed: the leaves that differ, or
  // the items a list (the blocks) gained and lost.
  function change(before, after) {
    if (Array.isArray(before) || Array.isArray(after)) {
      const b = (before || []).map((x) => JSON.stringify(x)), a = (after || []).map((x) => JSON.stringify(x));
      return [...(after || []).filter((_, i) => !b.includes(a[i])).map((x) => "+ " + summary(x)),
        ...(before || []).filter((_, i) => !a.includes(b[i])).map((x) => "− " + summary(x))].join("\n") || "(no change)";
    }
    const skip = new Set(["updatedAt", "createdAt"]);
    const b = flatten(before, "", {}), a = flatten(after, "", {});
    const lines = [];
    for (const k of [...new Set([...Object.keys(b), ...Object.keys(a)])].sort()) {
      if (skip.has(k) || JSON.stringify(b[k]) === JSON.stringify(a[k])) continue;
      lines.push(k + ": " + show(b[k]) + " → " + show(a[k]));
    }
    return lines.join("\n") || "(no change)";
  }

  function loadAudit(id) {
    return fillTable("/v1/tenants/" + enc(id) + "/audit?n=50", "audit", "audit-note", "Audit", "No changes recorded.", (b) => b.entries,
      (e) => el("tr", { "data-action": e.action },
        el("td", { text: time(e.at) }),
        el("td", { text: e.actor || "" }),
        el("td", { text: e.action }),
        el("td", {}, el("pre", { class: "change", text: change(e.before, e.after) }))));
  }

  // ---- try a limit ----

  function fillTry() {
    const sel = $("try-policy");
    fillSelect(sel, policyNames().map((p) => [p, p]), true);
    presetTry();
  }

  function presetTry() {
    const p = state.policyList.find((x) => x.name === $("try-policy").value);
    if (!p) return;
    if ([...$("try-algorithm").options].some((o) => o.value === p.algorithm)) $("try-algorithm").value = p.algorithm;
    const own = state.ownLimits[p.name]; // a tenant's own enforced limit, not the policy's base
    $("try-limit").value = own ? own.limit : p.limit;
    $("try-window").value = p.window || "";
    $("try-burst").value = "";
  }

  async function runTry(ev) {
    ev.preventDefault();
    setText("try-error", "");
    const policy = { name: $("try-policy").value, algorithm: $("try-algorithm").value, limit: Number($("try-limit").value) };
    const w = $("try-window").value.trim();
    if (w) policy.window = /^\d+$/.test(w) ? Number(w) : w;
    if ($("try-burst").value.trim()) policy.burst = Number($("try-burst").value);
    const r = await api(insightBase() + "/try", { method: "POST", body: { policy, seconds: Number($("try-seconds").value) || 3600, top: 20 } });
    if (!r.ok) {
      $("try-result").hidden = true;
      return setText("try-error", (r.body && r.body.field ? r.body.field + ": " : "") + errText(r));
    }
    const t = r.body;
    setText("try-denied", "≈ " + fmt.format(Math.round(t.denied)) + " ± " + fmt.format(Math.round(t.stdErr)));
    $("try-denied").dataset.value = String(t.denied);
    setNum("try-events", t.events);
    setText("try-keys", fmt.format(t.keys) + " (" + fmt.format(t.heavyKeys) + ")");
    setText("try-rate", Math.round(t.rate * 1000) / 10 + "%");
    const who = t.who || [];
    $("try-who").tBodies[0].replaceChildren(...(who.length ? who.map((k) => el("tr", { "data-label": label(k) },
      el("td", { text: k.tenant }), el("td", { class: "key", text: label(k) }), el("td", { class: "num", text: fmt.format(k.count) })))
      : [el("tr", {}, el("td", { colspan: 3, class: "muted", text: "nobody in the sample would be denied" }))]));
    $("try-result").hidden = false;
  }

  // ---- gateway and upstreams ----

  async function loadGateway() {
    if (!state.admin) return;
    const [g, u] = await Promise.all([api("/v1/insight/gateway"), api("/v1/upstreams")]);
    if (g.ok) {
      setText("gw-note", "");
      $("gw-tiles").replaceChildren(...[["connections", "connections"], ["sessions", "sessions"], ["silos", "silo queues"], ["siloDepth", "waiting in silos"], ["pooledDepth", "waiting in the pool"]].map(([k, l]) =>
        el("div", { class: "tile" }, el("span", { class: "n", "data-testid": "gw-" + k, "data-value": String(g.body[k] ?? ""), text: g.body[k] === undefined ? "–" : fmt.format(g.body[k]) }), el("span", { text: l }))),
        // Throttles since the start: connects and messages refused, by why.
        ...Object.entries(g.body.refused || {}).sort().map(([k, v]) =>
          el("div", { class: "tile" }, el("span", { class: "n", "data-testid": "gw-refused-" + k, "data-value": String(v), text: fmt.format(v) }), el("span", { text: k.replace(":", " refused: ") + " (since start)" }))));
    } else {
      $("gw-tiles").replaceChildren();
      setText("gw-note", g.status === 404 ? "This server reports no gateway figures." : "Gateway: " + errText(g));
    }
    if (!u.ok) return setText("gw-error", "Upstreams: " + errText(u));
    setText("gw-error", "");
    const ups = u.body.upstreams || [];
    if (!ups.length) return $("upstreams").replaceChildren(el("p", { class: "muted", text: "No upstreams configured." }));
    const num = (v, digits) => (v === undefined || v === null ? "–" : digits ? (Math.round(v * 10 ** digits) / 10 ** digits).toString() : fmt.format(v));
    const head = ["upstream", "rate", "burst", "max queue", "waiting", "customers", "granted", "utilisation", "share", "nodes", "fair level"];
    const table = el("table", { "data-testid": "upstreams-table" },
      el("thead", {}, el("tr", {}, ...head.map((h) => el("th", { text: h })))),
      el("tbody", {}, ...ups.map((x) => {
        const s = x.state || {};
        return el("tr", { "data-upstream": x.name },
          el("td", { text: x.name }),
          el("td", { class: "num", text: fmt.format(x.rate) + " / " + x.window + (x.cap ? " (cap " + x.cap + ")" : "") }),
          el("td", { class: "num", text: num(x.burst) }),
          el("td", { class: "num", text: num(x.maxQueue) }),
          el("td", { class: "num", "data-testid": "waiting", text: num(s.waiting) }),
          el("td", { class: "num", text: num(s.customers) }),
          el("td", { class: "num", "data-testid": "granted", text: num(s.granted) }),
          el("td", { class: "num", text: s.utilisation === undefined ? "–" : Math.round(s.utilisation * 1000) / 10 + "%" }),
          el("td", { class: "num", text: num(s.share, 2) }),
          el("td", { class: "num", text: num(s.nodes) }),
          el("td", { class: "num", text: num(s.fairLevel, 2) }));
      })));
    const queues = ups.filter((x) => (x.queues || []).length).map((x) => el("div", {},
      el("h2", { text: "Longest queues of " + x.name }),
      el("table", {}, el("thead", {}, el("tr", {}, ...["tenant", "key", "weight", "waiting", "backlog"].map((h) => el("th", { text: h })))),
        el("tbody", {}, ...x.queues.slice(0, 10).map((q) => el("tr", {},
          el("td", { text: q.tenant }), el("td", { class: "key", text: q.key }), el("td", { class: "num", text: num(q.weight) }),
          el("td", { class: "num", text: num(q.waiting) }), el("td", { class: "num", text: num(q.backlog) })))))));
    $("upstreams").replaceChildren(table, ...queues);
  }

  // ---- views ----

  const views = {
    overview: { load: renderOverview },
    abuse: { load: loadAbuse, every: 5000 },
    limits: { load: loadLimits },
    try: { load: fillTry },
    gateway: { load: loadGateway, every: 2000, admin: true },
  };

  function showView(name) {
    if (views[name].admin && !state.admin) name = "overview"; // the admin's alone
    state.view = name;
    clearInterval(state.viewTimer);
    for (const b of document.querySelectorAll("#tabs button")) b.setAttribute("aria-selected", String(b.dataset.view === name));
    for (const v of Object.keys(views)) $("view-" + v).hidden = v !== name;
    if (location.hash.slice(1) !== name) history.replaceState(null, "", "#" + name);
    views[name].load();
    if (views[name].every) {
      state.viewTimer = setInterval(() => {
        // Not while the operator is picking something in the view.
        if (!$("view-" + name).contains(document.activeElement) || document.activeElement.tagName === "BUTTON") views[name].load();
      }, views[name].every);
    }
  }

  function init() {
    const msg = sessionStorage.getItem("sluice.message");
    sessionStorage.removeItem("sluice.message");
    $("login").addEventListener("submit", (ev) => {
      ev.preventDefault();
      state.key = $("login-key").value.trim();
      state.actor = $("login-actor").value.trim();
      sessionStorage.setItem("sluice.key", state.key);
      sessionStorage.setItem("sluice.actor", state.actor);
      $("login-key").value = "";
      signIn();
    });
    $("signout").addEventListener("click", () => signOut());
    $("actor").addEventListener("change", () => {
      state.actor = $("actor").value.trim();
      sessionStorage.setItem("sluice.actor", state.actor);
    });
    for (const b of document.querySelectorAll("#tabs button")) b.addEventListener("click", () => showView(b.dataset.view));
    $("ov-series").addEventListener("change", renderOverview);
    $("ov-range").addEventListener("change", () => { renderOverview(); loadHistory(); });
    $("stack-kind").addEventListener("change", renderOverview);
    $("abuse-policy").addEventListener("change", () => { state.abusePicked = true; loadAbuse(); });
    $("abuse-refresh").addEventListener("click", loadAbuse);
    $("limits-tenant").addEventListener("change", () => loadTenant($("limits-tenant").value));
    $("limits-form").addEventListener("submit", saveLimits);
    $("try-policy").addEventListener("change", presetTry);
    $("try-form").addEventListener("submit", runTry);
    window.addEventListener("resize", () => state.view === "overview" && renderOverview());
    if (msg) { showLogin(msg); return; }
    signIn();
  }

  init();
})();
