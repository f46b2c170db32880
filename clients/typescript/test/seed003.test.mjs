// docs/typescript.md's example: seed 003's checkRateLimit(userId, endpoint)
// on the example configuration (examples/sluice.yaml: chat, 20 a minute per
// user), with a tenant's API key.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { Sluice, SluiceError } from "../dist/index.js";
import { serve, ADMIN_KEY } from "./server.mjs";

async function admin(baseUrl, method, path, body) {
  const res = await fetch(baseUrl + path, {
    method,
    headers: { Authorization: `Bearer ${ADMIN_KEY}`, "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  assert.ok(res.ok, `${method} ${path}: ${res.status} ${await res.clone().text()}`);
  return res.json();
}

test("seed 003's checkRateLimit, as docs/typescript.md writes it", async (t) => {
  const config = await readFile(new URL("../../../examples/sluice.yaml", import.meta.url), "utf8");
  const baseUrl = await serve(t, config);
  await admin(baseUrl, "POST", "/v1/tenants", { id: "demo" });
  const { token } = await admin(baseUrl, "POST", "/v1/tenants/demo/keys", { name: "lambda" });
  const env = { SLUICE_URL: baseUrl, SLUICE_KEY: token };

  // The five lines of docs/typescript.md, process.env as env.
  const sluice = new Sluice({ baseUrl: env.SLUICE_URL, apiKey: env.SLUICE_KEY, failMode: "open" });
  async function checkRateLimit(userId, endpoint) {
    return sluice.check({ endpoint, key: { user: userId } });
  }

  for (let i = 0; i < 20; i++) {
    const r = await checkRateLimit("auth0|123456", "chat");
    assert.equal(r.allowed, true, `request ${i + 1}`);
    assert.equal(r.limit, 20);
    assert.equal(r.remaining, 19 - i);
  }
  const denied = await checkRateLimit("auth0|123456", "chat");
  assert.equal(denied.allowed, false);
  assert.ok(denied.retryAfter >= 1 && denied.retryAfter <= 60, `retryAfter ${denied.retryAfter}`);
  assert.equal((await checkRateLimit("auth0|other", "chat")).allowed, true);
  assert.equal((await checkRateLimit("auth0|123456", "models")).remaining, 9);

  // A tenant key reaches its own tenant only: 403, thrown.
  await assert.rejects(
    sluice.check({ tenant: "acme", endpoint: "chat", key: { user: "u" } }),
    (err) => err instanceof SluiceError && err.status === 403 && err.code === "forbidden",
  );
  // An endpoint the configuration lacks is a mistake, thrown, not failed open.
  await assert.rejects(checkRateLimit("u", "no-such-endpoint"), (err) => err instanceof SluiceError && err.status === 400);

  // Nothing answering: fails open, as seed 003 does.
  const down = new Sluice({ baseUrl: "http://127.0.0.1:1", apiKey: env.SLUICE_KEY, failMode: "open" });
  const open = await down.check({ endpoint: "chat", key: { user: "u" } });
  assert.equal(open.allowed, true);
  assert.equal(open.failedOpen, true);
});
