// The gateway client against a real `sluice serve`: a session with two
// connections, silo and pooled messages, a 429 honoured by backoff, and
// close codes as typed events.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Sluice, closeKind } from "../dist/index.js";
import { serve, ADMIN_KEY } from "./server.mjs";

const CONFIG = `
version: 1
tenantDefaults: {connectionsPerSession: 2, tenantConnections: 100, sessionPerMinute: 30, tenantPerMinute: 100, sessionTTL: 300, messagesPerMinute: 120}
tenants:
  acme: {}
`;

// frameMatching resolves with conn's first frame for which pred holds.
function frameMatching(conn, pred) {
  return new Promise((resolve) => {
    const on = (ev) => {
      if (pred(ev.detail)) {
        conn.removeEventListener("frame", on);
        resolve(ev.detail);
      }
    };
    conn.addEventListener("frame", on);
  });
}

test("gateway: a session of two connections, a 429 waited out, a deletion ends them", async (t) => {
  assert.equal(typeof WebSocket, "function", "a global WebSocket (Node 22+, or node --experimental-websocket)");
  const baseUrl = await serve(t, CONFIG);
  const sluice = new Sluice({ baseUrl, apiKey: ADMIN_KEY });
  const session = await sluice.createSession("acme");
  assert.equal(session.tenant, "acme");
  assert.match(session.id, /^[a-z0-9]{26}$/);

  const a = sluice.connect("acme", session.id);
  const b = sluice.connect("acme", session.id);
  t.after(() => {
    a.close();
    b.close();
  });
  await Promise.all([a.next("open"), b.next("open")]);
  assert.equal(a.connected, true);
  const full = await sluice.admit("acme", session.id);
  assert.equal(full.admit, false);
  assert.equal(full.status, 429);
  assert.equal(full.limit, "gw:session-connections");
  assert.ok(full.retryAfter >= 1, `retryAfter ${full.retryAfter}`);

  // silo: the sender gets the echo, the other connection the message.
  const echo = frameMatching(a, (f) => f.type === "echo" && f.id === "m1");
  const got = frameMatching(b, (f) => f.type === "message" && f.id === "m1");
  assert.equal(a.send("silo", { n: 1 }, "m1"), true);
  assert.deepEqual((await echo).data, { n: 1 });
  const m1 = await got;
  assert.equal(m1.action, "silo");
  assert.deepEqual(m1.data, { n: 1 });

  // pooled, the other way.
  const pooled = frameMatching(a, (f) => f.type === "message" && f.id === "m2");
  b.send("pooled", "hello", "m2");
  assert.equal((await pooled).action, "pooled");

  // The same id again is a duplicate, not delivered twice.
  const dup = frameMatching(b, (f) => f.duplicate === true);
  b.send("pooled", "hello", "m2");
  assert.equal((await dup).id, "m2");

  // A third connection is refused (connectionsPerSession: 2) with a
  // Retry-After: it waits at least that long (a fake sleep records the
  // wait, and frees a place by closing a), then connects.
  const slept = [];
  let freed = false;
  const c = sluice.connect("acme", session.id, {
    sleep: async (ms) => {
      slept.push(ms);
      if (!freed) {
        freed = true;
        const ended = a.next("end");
        a.close();
        await ended;
      } else {
        await new Promise((r) => setTimeout(r, 20));
      }
    },
  });
  t.after(() => c.close());
  const retry = await c.next("reconnecting");
  assert.equal(retry.attempt, 1);
  assert.equal(retry.cause.refused.status, 429);
  assert.equal(retry.cause.refused.limit, "gw:session-connections");
  assert.ok(retry.cause.refused.retryAfter >= 1, `retryAfter ${retry.cause.refused.retryAfter}`);
  assert.ok(retry.delayMs >= retry.cause.refused.retryAfter * 1000, `delay ${retry.delayMs} honours Retry-After ${retry.cause.refused.retryAfter}s`);
  await c.next("open");
  assert.equal(slept[0], retry.delayMs);
  assert.equal(a.connected, false);

  // b and c share the session: c's messages reach b.
  const fromC = frameMatching(b, (f) => f.type === "message" && f.id === "m3");
  c.send("silo", 3, "m3");
  assert.equal((await fromC).data, 3);

  // Deleting the session closes both with 4001, typed, and ends them: no reconnect.
  const closes = Promise.all([b.next("close"), c.next("close")]);
  const ends = Promise.all([b.next("end"), c.next("end")]);
  await sluice.deleteSession("acme", session.id);
  for (const close of await closes) {
    assert.equal(close.code, 4001);
    assert.equal(close.kind, "session_deleted");
    assert.equal(close.willReconnect, false);
  }
  for (const end of await ends) assert.equal(end.cause.close.kind, "session_deleted");

  // A connect to a session that is gone is refused (403) and ends at once.
  const late = sluice.connect("acme", session.id);
  const end = await late.next("end");
  assert.equal(end.cause.refused.status, 403);
  assert.equal(late.connected, false);
});

test("gateway: a lost connection reconnects with backoff", async (t) => {
  const baseUrl = await serve(t, CONFIG);
  const sluice = new Sluice({ baseUrl, apiKey: ADMIN_KEY });
  const session = await sluice.createSession("acme");
  const delays = [];
  const conn = sluice.connect("acme", session.id, {
    initialDelayMs: 100,
    random: () => 0.5,
    sleep: async (ms) => {
      delays.push(ms);
    },
  });
  t.after(() => conn.close());
  await conn.next("open");

  // The server closes it (the management API's DELETE with 4500): it comes back.
  const conns = await listConnection(baseUrl, session.id, conn);
  const closed = conn.next("close");
  const res = await fetch(`${baseUrl}/v1/tenants/acme/connections/${conns}?code=4500&reason=test`, {
    method: "DELETE",
    headers: { Authorization: `Bearer ${ADMIN_KEY}` },
  });
  assert.equal(res.status, 200);
  const close = await closed;
  assert.equal(close.code, 4500);
  assert.equal(close.kind, "other");
  assert.equal(close.willReconnect, true);
  const again = await conn.next("open");
  assert.equal(again.attempt, 2);
  assert.deepEqual(delays, [50]); // half of the first backoff, 100ms
});

// listConnection finds conn's id: the echo of a message carries none, so
// it asks the other side; a message's "from" names the sender.
async function listConnection(baseUrl, session, conn) {
  const sluice = new Sluice({ baseUrl, apiKey: ADMIN_KEY });
  const peer = sluice.connect("acme", session);
  await peer.next("open");
  const from = frameMatching(peer, (f) => f.type === "message" && f.id === "who");
  conn.send("silo", null, "who");
  const id = (await from).from;
  const ended = peer.next("end");
  peer.close();
  await ended;
  return id;
}

test("close codes have kinds", () => {
  assert.deepEqual(
    [1000, 1001, 1006, 1007, 1008, 1009, 4000, 4001, 4999].map(closeKind),
    ["normal", "going_away", "abnormal", "invalid_utf8", "too_slow", "too_big", "session_expired", "session_deleted", "other"],
  );
});

test("gateway: a WebSocket constructor that throws is a failed connect, retried then given up", async () => {
  const sluice = new Sluice({ baseUrl: "http://127.0.0.1:1", fetch: async () => new Response('{"admit":true}', { status: 200 }) });
  const delays = [];
  const conn = sluice.connect("acme", "s", {
    WebSocket: class {
      constructor() {
        throw new Error("refused URL");
      }
    },
    maxAttempts: 2,
    initialDelayMs: 100,
    random: () => 0.99,
    sleep: async (ms) => void delays.push(ms),
  });
  const end = await conn.next("end");
  assert.equal(end.cause.close.kind, "abnormal");
  assert.match(end.cause.close.reason, /refused URL/);
  assert.deepEqual(delays, [99, 198]); // full jitter under 100ms, then 200ms
});
