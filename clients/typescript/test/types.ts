// Compiled by `npm test` (tsc --noEmit -p test): the types let the calls of
// docs/typescript.md through and refuse what the server would refuse.
import { Sluice, SluiceError, type CheckResult, type AcquireResult, type Frame, type CloseDetail, type CloseKind } from "../src/index.js";

const sluice = new Sluice({ baseUrl: "http://127.0.0.1:8080", apiKey: "k" });

export async function uses(): Promise<void> {
  const r: CheckResult = await sluice.check({ tenant: "acme", endpoint: "chat", key: { user: "u-1" } });
  const wait: number = r.retryAfter;
  void wait;
  await sluice.check({ policies: ["chat"], key: { user: "u" }, hits: 2 });
  await sluice.check({ checks: [{ key: "u", policy: { name: "p", algorithm: "token_bucket", limit: 10, window: "1s", burst: 20 } }] });
  // @ts-expect-error: an unknown algorithm
  await sluice.check({ checks: [{ key: "u", policy: { name: "p", algorithm: "leaky", limit: 1 } }] });
  // @ts-expect-error: neither an endpoint, policies nor checks
  await sluice.check({ tenant: "acme", key: { user: "u" } });

  const lease = await sluice.acquireLease({ tenant: "acme", policy: "reports-running", units: 1 });
  if (lease.allowed && lease.lease) await sluice.releaseLease(lease.lease.token, { tenant: "acme", policy: "reports-running" });
  // @ts-expect-error: keyValue goes with an inline policy, key parts with a named one
  await sluice.acquireLease({ policy: "reports-running", keyValue: "u" });

  const a: AcquireResult = await sluice.acquire("partner-api", { key: "u-1", maxWaitMs: 500 });
  if (a.granted) {
    const at: Date = a.grantedAt;
    void at;
  } else {
    const ms: number = a.retryAfterMs;
    void ms;
    // @ts-expect-error: a refusal has no grant time
    void a.grantedAt;
  }

  try {
    await sluice.check({ endpoint: "chat" });
  } catch (err) {
    if (err instanceof SluiceError) {
      const f: string | undefined = err.field;
      const s: number = err.status;
      void f, s;
    }
  }
}

// docs/typescript.md's "Calls", as written there.
export async function docCalls(key: string): Promise<void> {
  const sluice = new Sluice({ baseUrl: "http://127.0.0.1:8080", apiKey: key });
  const r = await sluice.check({ tenant: "acme", endpoint: "search", key: { user: "u-42" }, hits: 1 });
  if (!r.allowed) console.log(`retry in ${r.retryAfter}s; denied by ${r.violatedPolicies}`);
  await sluice.check({
    tenant: "acme",
    checks: [
      { key: "tenant", policy: { name: "tenant-per-minute", algorithm: "sliding_window", limit: 600, window: "1m" } },
      { key: "user-42", policy: { name: "user-per-second", algorithm: "token_bucket", limit: 10, window: "1s", burst: 20 } },
    ],
  });
  const req = { tenant: "acme", policy: "reports-running" };
  const held = await sluice.acquireLease({ ...req, units: 1 });
  if (held.allowed && held.lease) {
    try {
      await sluice.renewLease(held.lease.token, req);
    } finally {
      await sluice.releaseLease(held.lease.token, req);
    }
  }
  const share = await sluice.acquire("partner-api", { tenant: "acme", key: "u-42", cost: 1, maxWaitMs: 500 });
  if (!share.granted) console.log(`${share.reason}: retry in ${share.retryAfterMs}ms`);
  await sluice.check({ tenant: "acme", endpoint: "chat", key: { user: "u" } }, { signal: AbortSignal.timeout(200) });
}

// The gateway, as docs/typescript.md writes it.
export async function gateway(sluice: Sluice): Promise<void> {
  const session = await sluice.createSession("acme");
  const conn = sluice.connect("acme", session.id, { maxDelayMs: 10_000 });
  conn.addEventListener("frame", (ev) => {
    const frame = (ev as CustomEvent<Frame>).detail;
    if (frame.type === "message") console.log(frame.from, frame.data);
  });
  const close: CloseDetail = await conn.next("close");
  const kind: CloseKind = close.kind;
  void kind;
  await conn.next("open");
  conn.send("silo", { text: "hi" }, "m-1");
  // @ts-expect-error: the gateway's queues are silo and pooled
  conn.send("fifo", {});
  conn.close();
}

// docs/typescript.md's demo page flow.
export async function demo(sluice: Sluice, log: (f: Frame) => void): Promise<void> {
  const { id } = await sluice.createSession("acme");
  const admission = await sluice.admit("acme", id);
  if (!admission.admit) console.log(admission.limit, admission.retryAfter);
  const conn = sluice.connect("acme", id);
  conn.addEventListener("frame", (ev) => log((ev as CustomEvent<Frame>).detail));
  await conn.next("open");
  conn.send("silo", "hello");
  conn.send("pooled", "hello");
  conn.close();
  await sluice.deleteSession("acme", id);
}
