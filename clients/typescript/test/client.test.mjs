// The client against a real `sluice serve` (test/server.mjs).
import { test } from "node:test";
import assert from "node:assert/strict";
import { Sluice, SluiceError } from "../dist/index.js";
import { serve, ADMIN_KEY } from "./server.mjs";

const CONFIG = `
version: 1
policies:
  chat: {algorithm: fixed_window, limit: 2, window: 60s, key: [user]}
  reports-running: {algorithm: concurrency, limit: 1, leaseTTL: 60s}
endpoints:
  chat: [chat]
tenants:
  acme: {}
upstreams:
  partner-api: {rate: 100, window: 1s, burst: 10}
  scarce: {rate: 1, window: 1h, burst: 1, maxWait: 2s}
`;

test("@sluice/client against sluice serve", async (t) => {
  const baseUrl = await serve(t, CONFIG);
  const sluice = new Sluice({ baseUrl, apiKey: ADMIN_KEY });

  await t.test("an endpoint admits to its limit, then answers 429 as a result with retryAfter", async () => {
    for (const remaining of [1, 0]) {
      const r = await sluice.check({ tenant: "acme", endpoint: "chat", key: { user: "u-1" } });
      assert.equal(r.allowed, true);
      assert.equal(r.status, 200);
      assert.equal(r.policy, "chat");
      assert.equal(r.limit, 2);
      assert.equal(r.remaining, remaining);
      assert.equal(r.retryAfter, 0);
    }
    const denied = await sluice.check({ tenant: "acme", endpoint: "chat", key: { user: "u-1" } });
    assert.equal(denied.allowed, false);
    assert.equal(denied.status, 429);
    assert.equal(denied.remaining, 0);
    assert.ok(denied.retryAfter >= 1 && denied.retryAfter <= 60, `retryAfter ${denied.retryAfter}`);
    assert.ok(denied.retryAfterMs > 0 && denied.retryAfterMs <= 60_000, `retryAfterMs ${denied.retryAfterMs}`);
    assert.ok(denied.resetAt * 1000 > Date.now() - 1000, `resetAt ${denied.resetAt}`);
    assert.deepEqual(denied.violatedPolicies, ["chat"]);
    assert.equal(denied.decisions.length, 1);
    assert.equal(denied.decisions[0].allowed, false);
    assert.match(denied.message ?? "", /Too many requests/);

    // Another user has a counter of its own.
    const other = await sluice.check({ tenant: "acme", policies: ["chat"], key: { user: "u-2" } });
    assert.equal(other.allowed, true);
    assert.equal(other.remaining, 1);
  });

  await t.test("inline policies: all-or-nothing, one decision per check", async () => {
    const checks = [
      { key: "tenant", policy: { name: "ts-per-minute", algorithm: "sliding_window", limit: 100, window: "1m" } },
      { key: "user-42", policy: { name: "ts-per-hour", algorithm: "token_bucket", limit: 1, window: "1h" } },
    ];
    const first = await sluice.check({ tenant: "acme", hits: 1, checks });
    assert.equal(first.allowed, true);
    assert.deepEqual(
      first.decisions.map((d) => [d.policy, d.allowed, d.remaining]),
      [
        ["ts-per-minute", true, 99],
        ["ts-per-hour", true, 0],
      ],
    );
    const second = await sluice.check({ tenant: "acme", checks });
    assert.equal(second.allowed, false);
    assert.equal(second.policy, "ts-per-hour");
    assert.deepEqual(second.violatedPolicies, ["ts-per-hour"]);
    assert.ok(second.retryAfter >= 1, `retryAfter ${second.retryAfter}`);
    // Denied, so the minute's policy consumed nothing.
    assert.equal(second.decisions[0].remaining, 99);
  });

  await t.test("a 400 throws SluiceError naming the field", async () => {
    await assert.rejects(
      sluice.check({ tenant: "acme", endpoint: "chat" }),
      (err) => {
        assert.ok(err instanceof SluiceError, String(err));
        assert.equal(err.status, 400);
        assert.equal(err.code, "invalid_request");
        assert.equal(err.field, "key.user");
        assert.match(err.message, /key\.user/);
        assert.equal(err.body?.field, "key.user");
        return true;
      },
    );
    await assert.rejects(
      sluice.check({ tenant: "acme", checks: [{ key: "k", policy: { name: "bad", algorithm: "fixed_window", limit: 0, window: "1s" } }] }),
      (err) => err instanceof SluiceError && err.status === 400 && err.field === "checks[0].policy.limit",
    );
  });

  await t.test("a wrong key throws SluiceError 401", async () => {
    const wrong = new Sluice({ baseUrl, apiKey: "sk_acme.nope.nope" });
    await assert.rejects(
      wrong.check({ tenant: "acme", endpoint: "chat", key: { user: "u-1" } }),
      (err) => {
        assert.ok(err instanceof SluiceError, String(err));
        assert.equal(err.status, 401);
        assert.equal(err.code, "unauthorized");
        assert.equal(err.field, undefined);
        return true;
      },
    );
  });

  await t.test("a lease: acquire, held, renew, release, released", async () => {
    const req = { tenant: "acme", policy: "reports-running" };
    const held = await sluice.acquireLease({ ...req, units: 1 });
    assert.equal(held.allowed, true);
    const token = held.lease?.token;
    assert.ok(token, "a lease token");
    assert.ok(held.lease.expiresAtMs > Date.now(), `expiresAtMs ${held.lease.expiresAtMs}`);

    const full = await sluice.acquireLease(req);
    assert.equal(full.allowed, false);
    assert.equal(full.status, 429);
    assert.equal(full.lease, undefined);

    const renewed = await sluice.renewLease(token, req);
    assert.equal(renewed.allowed, true);
    assert.ok(renewed.lease.expiresAtMs >= held.lease.expiresAtMs, "renewal keeps or extends the expiry");
    // The answer is the lease's one decision (a Decision, not a check's body).
    assert.deepEqual(renewed.decisions.map((d) => [d.policy, d.allowed, d.lease?.token]), [["reports-running", true, token]]);
    assert.deepEqual(renewed.violatedPolicies, []);

    const released = await sluice.releaseLease(token, req);
    assert.equal(released.remaining, 1);
    assert.equal(released.decisions.length, 1);
    await assert.rejects(sluice.releaseLease(token, req), (err) => err instanceof SluiceError && err.status === 404 && err.code === "not_found");
    await assert.rejects(sluice.renewLease(token, req), (err) => err instanceof SluiceError && err.status === 404);

    const again = await sluice.acquireLease(req);
    assert.equal(again.allowed, true);
    await sluice.releaseLease(again.lease.token, req);
  });

  await t.test("an inline concurrency lease with keyValue", async () => {
    const req = { tenant: "acme", policy: { name: "ts-jobs", algorithm: "concurrency", limit: 2 }, keyValue: "u-9" };
    const a = await sluice.acquireLease({ ...req, units: 2 });
    assert.equal(a.allowed, true);
    const b = await sluice.acquireLease(req);
    assert.equal(b.allowed, false);
    await sluice.releaseLease(a.lease.token, req);
    const c = await sluice.acquireLease(req);
    assert.equal(c.allowed, true);
  });

  await t.test("an upstream acquire: granted, then refused as a result", async () => {
    const ok = await sluice.acquire("partner-api", { tenant: "acme", key: "u-1", cost: 1, maxWaitMs: 500 });
    assert.equal(ok.granted, true);
    assert.ok(ok.waitedMs >= 0 && ok.waitedMs <= 500, `waitedMs ${ok.waitedMs}`);
    assert.ok(ok.grantedAt instanceof Date && !Number.isNaN(ok.grantedAt.getTime()));

    // One unit an hour: the first takes it, the next cannot be granted within 10ms.
    const first = await sluice.acquire("scarce", { tenant: "acme", key: "u-1" });
    assert.equal(first.granted, true);
    const refused = await sluice.acquire("scarce", { tenant: "acme", key: "u-1", maxWaitMs: 10 });
    assert.equal(refused.granted, false);
    assert.equal(refused.reason, "shortage");
    assert.equal(refused.upstream, "scarce");
    assert.ok(refused.retryAfterMs > 10, `retryAfterMs ${refused.retryAfterMs}`);
    assert.ok(refused.retryAfter >= 1, `retryAfter ${refused.retryAfter}`);

    await assert.rejects(
      sluice.acquire("no-such-upstream", { tenant: "acme", key: "u-1" }),
      (err) => err instanceof SluiceError && err.status === 404 && err.code === "not_found",
    );
    await assert.rejects(
      sluice.acquire("partner-api", { tenant: "acme", key: "" }),
      (err) => err instanceof SluiceError && err.status === 400 && err.field === "key",
    );
  });

  await t.test("an injected fetch carries every call", async () => {
    const seen = [];
    const spy = new Sluice({
      baseUrl: baseUrl + "/",
      apiKey: ADMIN_KEY,
      fetch: (url, init) => {
        seen.push([String(url), init?.method, new Headers(init?.headers).get("Authorization")]);
        return fetch(url, init);
      },
    });
    const r = await spy.check({ tenant: "acme", endpoint: "chat", key: { user: "u-3" } });
    assert.equal(r.allowed, true);
    assert.deepEqual(seen, [[`${baseUrl}/v1/check`, "POST", `Bearer ${ADMIN_KEY}`]]);
  });
});

test("no server: a SluiceError with status 0 and code network", async () => {
  // A port nothing listens on: the server's own, after it is gone, is not
  // guaranteed free; port 1 on loopback refuses.
  const sluice = new Sluice({ baseUrl: "http://127.0.0.1:1", apiKey: ADMIN_KEY });
  await assert.rejects(
    sluice.check({ tenant: "acme", endpoint: "chat", key: { user: "u" } }),
    (err) => err instanceof SluiceError && err.status === 0 && err.code === "network" && err.cause !== undefined,
  );
});

test("options are checked", () => {
  assert.throws(() => new Sluice({}), TypeError);
});

test("failMode decides when no decision comes back, and only then", async (t) => {
  const baseUrl = await serve(t, CONFIG);
  const named = { tenant: "acme", endpoint: "chat", key: { user: "u-f" } };
  const inline = {
    tenant: "acme",
    checks: [
      { key: "k", policy: { name: "ts-open", algorithm: "fixed_window", limit: 5, window: "1s" } },
      { key: "k", policy: { name: "ts-closed", algorithm: "fixed_window", limit: 5, window: "1s", failMode: "closed" } },
    ],
  };
  const down = "http://127.0.0.1:1";

  const open = await new Sluice({ baseUrl: down, failMode: "open" }).check(named);
  assert.equal(open.allowed, true);
  assert.equal(open.failedOpen, true);
  assert.equal(open.status, 0);
  assert.equal(open.policy, "chat");

  const closed = await new Sluice({ baseUrl: down, failMode: "closed" }).check(named);
  assert.equal(closed.allowed, false);
  assert.equal(closed.failedClosed, true);
  assert.deepEqual(closed.violatedPolicies, ["chat"]);

  // Inline policies decide by their own mode, whatever the client's.
  const mixed = await new Sluice({ baseUrl: down, failMode: "open" }).check(inline);
  assert.equal(mixed.allowed, false);
  assert.deepEqual(
    mixed.decisions.map((d) => [d.policy, d.allowed]),
    [
      ["ts-open", true],
      ["ts-closed", false],
    ],
  );

  // A proxy's 502 page is no decision; Sluice's own 503 is failed closed.
  const proxy = (status, body, type) => async () => new Response(body, { status, headers: { "Content-Type": type } });
  const bad = await new Sluice({ baseUrl, failMode: "open", fetch: proxy(502, "<html>bad gateway</html>", "text/html") }).check(named);
  assert.equal(bad.allowed, true);
  assert.equal(bad.status, 502);
  const own = await new Sluice({
    baseUrl,
    failMode: "open",
    fetch: proxy(503, JSON.stringify({ error: "unavailable", message: "store failed" }), "application/json"),
  }).check(named);
  assert.equal(own.allowed, false);
  assert.equal(own.failedClosed, true);

  // Errors the server answers are thrown whatever the mode; without a mode, so is no answer.
  await assert.rejects(new Sluice({ baseUrl, apiKey: ADMIN_KEY, failMode: "open" }).check({ tenant: "acme", endpoint: "chat" }), (err) => err instanceof SluiceError && err.status === 400);
  await assert.rejects(new Sluice({ baseUrl: down }).check(named), (err) => err instanceof SluiceError && err.status === 0);
  await assert.rejects(new Sluice({ baseUrl, fetch: proxy(502, "bad gateway", "text/plain") }).check(named), (err) => err instanceof SluiceError && err.status === 502);
  assert.throws(() => new Sluice({ baseUrl, failMode: "ajar" }), TypeError);

  // A real server answers as ever.
  const real = await new Sluice({ baseUrl, apiKey: ADMIN_KEY, failMode: "closed" }).check(named);
  assert.equal(real.allowed, true);
  assert.equal(real.failedClosed, undefined);
});

test("an aborted call rejects with the signal's reason, not a SluiceError", async (t) => {
  const baseUrl = await serve(t, CONFIG);
  const sluice = new Sluice({ baseUrl, apiKey: ADMIN_KEY, failMode: "open" });
  const reason = new Error("gave up");
  await assert.rejects(
    sluice.check({ tenant: "acme", endpoint: "chat", key: { user: "u" } }, { signal: AbortSignal.abort(reason) }),
    (err) => err === reason,
  );
});

test("a 429 that is no decision (exhausted) throws", async () => {
  const sluice = new Sluice({
    baseUrl: "http://127.0.0.1:1",
    fetch: async () =>
      new Response(JSON.stringify({ error: "exhausted", message: "no room" }), { status: 429, headers: { "Retry-After": "2" } }),
  });
  await assert.rejects(
    sluice.check({ tenant: "acme", endpoint: "chat", key: { user: "u" } }),
    (err) => err instanceof SluiceError && err.status === 429 && err.code === "exhausted" && err.retryAfter === 2,
  );
});
