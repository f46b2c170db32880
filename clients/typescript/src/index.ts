// @sluice/client: Sluice's HTTP API (docs/api.md) from TypeScript and
// JavaScript, on the platform's fetch alone (Node 20+, browsers, Lambda).
//
// A limit reached (429 from /v1/check or /v1/leases, or an upstream's
// refusal) is a result, never a thrown error; every other answer that is
// not 2xx throws a SluiceError carrying the server's error body.

import { GatewayConnection, type Admission, type ConnectOptions } from "./gateway.js";
import type {
  AcquireBody,
  AcquireGrantBody,
  CheckRequest,
  CheckResponseBody,
  AdmitBody,
  ConnectRefusalBody,
  Decision,
  ErrorBody,
  Lease,
  LeaseAcquireRequest,
  LeaseRequest,
  Session,
  UpstreamShortBody,
} from "./wire.js";
export * from "./gateway.js";
export * from "./wire.js";

/**
 * The answer to a check: the reported decision (when denied, the denying
 * policy that frees up last; when admitted, the one with the fewest hits
 * remaining) and one decision per policy, in order.
 */
export interface CheckResult extends Decision {
  /** On a denial: the names of the denying policies. */
  violatedPolicies: string[];
  /** On a denial: the server's human-readable message (seed 003's body). */
  message?: string;
  decisions: Decision[];
  /** The HTTP status: 200 admitted, 429 denied. */
  status: number;
}

/** The answer to POST /v1/leases: a check's, with the lease and its token when allowed. */
export interface LeaseResult extends CheckResult {
  lease?: Lease & { token: string };
}

/** A fair share of an upstream quota (docs/api.md, "Upstream quotas"). */
export interface AcquireRequest {
  /** May be left out with a tenant's key; the admin must name one. */
  tenant?: string;
  /** The customer within the tenant, 1 to 1024 bytes. */
  key: string;
  /** Units, default 1. */
  cost?: number;
  /** The longest to wait, in milliseconds; default the upstream's maxWait. */
  maxWaitMs?: number;
}

export type AcquireResult =
  | {
      granted: true;
      /** How long the request waited in its queue. */
      waitedMs: number;
      /** The grant's time on the server's clock. */
      grantedAt: Date;
    }
  | {
      granted: false;
      /** Why: its fair wait exceeds maxWait ("shortage"), or the customer's queue is full. */
      reason: "shortage" | "queue full" | string;
      upstream: string;
      message: string;
      /** The estimated wait at the refusal. */
      retryAfterMs: number;
      /** Retry-After: whole seconds, at least 1. */
      retryAfter: number;
    };

/** The error codes of docs/api.md's error body. */
export type ErrorCode =
  | "invalid_request"
  | "unauthorized"
  | "forbidden"
  | "not_found"
  | "method_not_allowed"
  | "conflict"
  | "exhausted"
  | "unavailable"
  | "internal"
  | "network"
  | (string & {});

/**
 * An answer that is neither a result nor a limit reached: 400 (with the
 * field at fault), 401, 403, 404, 409, 413, 503, 5xx; or no answer at all
 * (status 0, code "network", the cause attached).
 */
export class SluiceError extends Error {
  override readonly name = "SluiceError";
  /** The HTTP status; 0 when no answer came back. */
  readonly status: number;
  /** The body's `error`: invalid_request, unauthorized, forbidden... */
  readonly code: ErrorCode;
  /** The field at fault, on a 400 or 413 (e.g. "checks[0].policy.limit", "key.user"). */
  readonly field?: string;
  /** Retry-After in seconds, when the server sent one (503). */
  readonly retryAfter?: number;
  /** The whole body as the server sent it. */
  readonly body?: ErrorBody;

  constructor(status: number, body: ErrorBody, retryAfter?: number, options?: { cause?: unknown }) {
    super(body.message, options);
    this.status = status;
    this.code = body.error;
    if (body.field !== undefined) this.field = body.field;
    if (retryAfter !== undefined) this.retryAfter = retryAfter;
    this.body = body;
  }
}

export interface SluiceOptions {
  /** The server's base URL, e.g. "http://127.0.0.1:8080". */
  baseUrl: string;
  /** The admin key or a tenant's API key, sent as a bearer token. */
  apiKey?: string;
  /** A fetch to use instead of the global one (tests, instrumentation). */
  fetch?: typeof fetch;
  /**
   * What `check` decides when no decision comes back: the server cannot be
   * reached, or a proxy in front answers 502, 503 or 504 without Sluice's
   * body. "open" admits and "closed" denies, with `failedOpen` or
   * `failedClosed` set; inline policies decide by their own `failMode`
   * (default open) whatever this says. The server's own 503 (a policy that
   * fails closed could not be decided) is denied, `failedClosed`. Unset,
   * the default: those throw SluiceError (status 0, code "network", or the
   * status). Errors the server answers (400, 401, 403, 404...) always throw.
   */
  failMode?: "open" | "closed";
}

/** Per-call options. */
export interface CallOptions {
  signal?: AbortSignal;
}

type Wire = Record<string, unknown>;

/** A client of one Sluice server (or the load balancer in front of its nodes). */
export class Sluice {
  readonly baseUrl: string;
  readonly #apiKey: string | undefined;
  readonly #fetch: typeof fetch;
  readonly #failMode: "open" | "closed" | undefined;

  constructor(options: SluiceOptions) {
    if (!options || typeof options.baseUrl !== "string" || options.baseUrl === "") {
      throw new TypeError("Sluice: baseUrl is required");
    }
    this.baseUrl = options.baseUrl.replace(/\/+$/, "");
    this.#apiKey = options.apiKey;
    const f = options.fetch ?? globalThis.fetch;
    if (typeof f !== "function") {
      throw new TypeError("Sluice: no fetch: pass options.fetch on a platform without a global one");
    }
    this.#fetch = f;
    if (options.failMode !== undefined && options.failMode !== "open" && options.failMode !== "closed") {
      throw new TypeError(`Sluice: failMode must be "open" or "closed", got ${JSON.stringify(options.failMode)}`);
    }
    this.#failMode = options.failMode;
  }

  /**
   * POST /v1/check. Resolves with the decision whether admitted (200) or
   * denied (429: `allowed` false, `retryAfter` set); throws SluiceError for
   * anything else.
   */
  async check(req: CheckRequest, opts?: CallOptions): Promise<CheckResult> {
    let answer;
    try {
      answer = await this.#call<CheckResponseBody>("POST", "/v1/check", req, [200, 429], opts, isDecision);
    } catch (err) {
      if (this.#failMode === undefined || !(err instanceof SluiceError)) throw err;
      const own = err.status === 503 && err.code === "unavailable" && sluiceBody(err);
      const noDecision = err.status === 0 || ((err.status === 502 || err.status === 503 || err.status === 504) && !sluiceBody(err));
      if (own || noDecision) return failed(req, this.#failMode, err, own);
      throw err;
    }
    return toCheckResult(answer.status, answer.body);
  }

  /** POST /v1/leases: hold units of a concurrency policy. A 429 (all held) is a result with `allowed` false. */
  async acquireLease(req: LeaseAcquireRequest, opts?: CallOptions): Promise<LeaseResult> {
    const { status, body } = await this.#call<CheckResponseBody>("POST", "/v1/leases", req, [200, 429], opts, isDecision);
    return toCheckResult(status, body) as LeaseResult;
  }

  /** POST /v1/leases/{token}/renew. A lease released or expired throws SluiceError with code "not_found". */
  async renewLease(token: string, req: LeaseRequest, opts?: CallOptions): Promise<LeaseResult> {
    const { status, body } = await this.#call<Decision>("POST", `/v1/leases/${encodeURIComponent(token)}/renew`, req, [200], opts, isDecision);
    return fromDecision(status, body) as LeaseResult;
  }

  /** DELETE /v1/leases/{token}: return its units. A lease released or expired throws SluiceError with code "not_found". */
  async releaseLease(token: string, req: LeaseRequest, opts?: CallOptions): Promise<CheckResult> {
    const { status, body } = await this.#call<Decision>("DELETE", `/v1/leases/${encodeURIComponent(token)}`, req, [200], opts, isDecision);
    return fromDecision(status, body);
  }

  /**
   * POST /v1/upstreams/{name}/acquire: wait for a fair share of an upstream
   * quota. Resolves `granted: true` when granted, `granted: false` with the
   * reason and the estimated wait when refused (429); throws SluiceError for
   * anything else (404 for an unknown upstream, 400 for a bad body).
   */
  async acquire(upstream: string, req: AcquireRequest, opts?: CallOptions): Promise<AcquireResult> {
    const wire: AcquireBody = { key: req.key };
    if (req.tenant !== undefined) wire.tenant = req.tenant;
    if (req.cost !== undefined) wire.cost = req.cost;
    if (req.maxWaitMs !== undefined) wire.maxWait = `${req.maxWaitMs}ms`;
    const { status, body, headers } = await this.#call<AcquireGrantBody | UpstreamShortBody>(
      "POST",
      `/v1/upstreams/${encodeURIComponent(upstream)}/acquire`,
      wire,
      [200, 429],
      opts,
      (status, body) => status !== 429 || body.error === "upstream_quota_short",
    );
    if (status === 200) {
      const grant = body as AcquireGrantBody;
      return {
        granted: true,
        waitedMs: num(grant.waitedMs),
        grantedAt: new Date(String(grant.grantedAt)),
      };
    }
    const short = body as UpstreamShortBody;
    return {
      granted: false,
      reason: String(short.reason ?? ""),
      upstream: String(short.upstream ?? upstream),
      message: String(short.message ?? ""),
      retryAfterMs: num(short.retryAfterMs),
      retryAfter: retryAfterHeader(headers) ?? Math.max(1, Math.ceil(num(short.retryAfterMs) / 1000)),
    };
  }

  /** PUT /v1/tenants/{id}/sessions: a new session of the tenant's WebSocket gateway. */
  async createSession(tenant: string, opts?: CallOptions): Promise<Session> {
    const { body } = await this.#call<Session>("PUT", `/v1/tenants/${encodeURIComponent(tenant)}/sessions`, undefined, [201, 200], opts);
    return body;
  }

  /** DELETE /v1/tenants/{id}/sessions/{session}: its connections close with 4001. */
  async deleteSession(tenant: string, session: string, opts?: CallOptions): Promise<void> {
    await this.#call("DELETE", `/v1/tenants/${encodeURIComponent(tenant)}/sessions/${encodeURIComponent(session)}`, undefined, [200], opts);
  }

  /** GET /v1/ws/admit: what a connect would get now, consuming nothing. */
  async admit(tenant: string, session: string, opts?: CallOptions): Promise<Admission> {
    const q = `tenant=${encodeURIComponent(tenant)}&session=${encodeURIComponent(session)}`;
    try {
      const { body } = await this.#call<AdmitBody>("GET", `/v1/ws/admit?${q}`, undefined, [200], opts);
      return { admit: body.admit };
    } catch (err) {
      if (!(err instanceof SluiceError) || err.status === 0 || !err.body) throw err;
      const refused: Admission = { admit: false, status: err.status, message: err.message };
      const body: Partial<ConnectRefusalBody> = err.body;
      if (typeof body.limit === "string") refused.limit = body.limit;
      const ra = err.retryAfter ?? (typeof body.retryAfter === "number" ? body.retryAfter : undefined);
      if (ra !== undefined) refused.retryAfter = ra;
      return refused;
    }
  }

  /**
   * Connects to a session of the WebSocket gateway and keeps it connected:
   * each (re)connect asks admit first and waits out a 429's Retry-After;
   * losses are retried with exponential backoff and full jitter; a session
   * deleted (4001) or expired (4000), or refused (403), ends it.
   */
  connect(tenant: string, session: string, options: ConnectOptions = {}): GatewayConnection {
    const q = `tenant=${encodeURIComponent(tenant)}&session=${encodeURIComponent(session)}`;
    const url = `${this.baseUrl.replace(/^http/, "ws")}/v1/ws?${q}`;
    return new GatewayConnection(url, tenant, session, () => this.admit(tenant, session), options);
  }

  // call sends payload and resolves with an answer whose status is in ok
  // and whose body isResult tells is T (the wire type of that answer);
  // anything else throws SluiceError.
  async #call<T extends object>(
    method: string,
    path: string,
    payload: unknown,
    ok: number[],
    opts: CallOptions | undefined,
    isResult: (status: number, body: Wire) => boolean = () => true,
  ): Promise<{ status: number; body: T; headers: Headers }> {
    const headers: Record<string, string> = { "Content-Type": "application/json", Accept: "application/json" };
    if (this.#apiKey) headers.Authorization = `Bearer ${this.#apiKey}`;
    let res: Response;
    try {
      const init: RequestInit = { method, headers };
      if (payload !== undefined) init.body = JSON.stringify(payload);
      else delete headers["Content-Type"];
      if (opts?.signal) init.signal = opts.signal;
      res = await this.#fetch(this.baseUrl + path, init);
    } catch (err) {
      if (opts?.signal?.aborted) throw err;
      throw new SluiceError(0, { error: "network", message: `sluice: ${method} ${path}: ${describe(err)}` }, undefined, {
        cause: err,
      });
    }
    const text = await res.text();
    let body: Wire | undefined;
    try {
      const parsed: unknown = text === "" ? undefined : JSON.parse(text);
      if (parsed !== null && typeof parsed === "object" && !Array.isArray(parsed)) body = parsed as Wire;
    } catch {
      body = undefined;
    }
    if (ok.includes(res.status) && body !== undefined && isResult(res.status, body)) {
      return { status: res.status, body: body as T, headers: res.headers };
    }
    const errBody: ErrorBody =
      body !== undefined && typeof body.error === "string"
        ? (body as ErrorBody)
        : {
            [NOT_SLUICE]: true,
            error: res.status >= 500 ? "unavailable" : "internal",
            message: `sluice: ${method} ${path}: ${res.status} ${res.statusText}: ${text.slice(0, 200)}`,
          };
    if (typeof errBody.message !== "string") errBody.message = String(errBody.error);
    throw new SluiceError(res.status, errBody, retryAfterHeader(res.headers));
  }
}

// isDecision tells a decision (200, or a limit's 429) from an error body
// (a 429 "exhausted" of a shared resource, which is no limit's decision).
function isDecision(_status: number, body: Wire): boolean {
  return typeof body.allowed === "boolean";
}

// NOT_SLUICE marks an error body the client made up, for an answer without
// Sluice's (a proxy's 502 page).
const NOT_SLUICE = Symbol("not sluice");

function sluiceBody(err: SluiceError): boolean {
  return err.body !== undefined && !(NOT_SLUICE in err.body);
}

// failed is check's result when no decision came back. The server's own
// 503 (own) denies every policy; otherwise each policy's fail mode decides:
// an inline policy's own (default open), configured ones the client's.
function failed(req: CheckRequest, mode: "open" | "closed", err: SluiceError, own: boolean): CheckResult {
  const now = Math.ceil(Date.now() / 1000);
  const decide = (name: string, m: "open" | "closed") => failedDecision(name, own ? "closed" : m, now);
  const decisions: Decision[] =
    "checks" in req
      ? req.checks.map((c) => decide(c.policy.name, c.policy.failMode === "closed" ? "closed" : "open"))
      : ("endpoint" in req ? [req.endpoint] : req.policies).map((name) => decide(name, mode));
  const reported = decisions.find((d) => !d.allowed) ?? decisions[0] ?? decide("", mode);
  return {
    ...reported,
    status: err.status,
    violatedPolicies: decisions.filter((d) => !d.allowed).map((d) => d.policy),
    decisions,
    message: err.message,
  };
}

function failedDecision(policy: string, mode: "open" | "closed", now: number): Decision {
  const d: Decision = { policy, allowed: mode === "open", limit: 0, remaining: 0, resetAt: now, retryAfter: 0, retryAfterMs: 0 };
  if (mode === "open") d.failedOpen = true;
  else {
    d.failedClosed = true;
    d.retryAfter = 1;
    d.retryAfterMs = 1000;
  }
  return d;
}

function toCheckResult(status: number, body: CheckResponseBody): CheckResult {
  const decisions = Array.isArray(body.decisions) ? body.decisions : [];
  const result: CheckResult = {
    status,
    allowed: body.allowed === true,
    policy: String(body.policy ?? ""),
    limit: num(body.limit),
    remaining: num(body.remaining),
    resetAt: num(body.resetAt),
    retryAfter: num(body.retryAfter),
    retryAfterMs: num(body.retryAfterMs),
    violatedPolicies: Array.isArray(body["violated-policies"]) ? body["violated-policies"] : [],
    decisions,
  };
  if (typeof body.message === "string") result.message = body.message;
  if (body.lease !== undefined) result.lease = body.lease;
  if (body.shadowed === true) result.shadowed = true;
  if (body.failedOpen === true) result.failedOpen = true;
  if (body.failedClosed === true) result.failedClosed = true;
  return result;
}

// fromDecision is the result of renewing or releasing a lease, whose answer
// is the lease's one decision.
function fromDecision(status: number, d: Decision): CheckResult {
  return toCheckResult(status, { ...d, "violated-policies": d.allowed ? [] : [d.policy], decisions: [d] });
}

function num(v: unknown): number {
  return typeof v === "number" ? v : 0;
}

function retryAfterHeader(h: Headers): number | undefined {
  const v = h.get("Retry-After");
  if (v === null || !/^\d+$/.test(v.trim())) return undefined;
  return Number(v.trim());
}

function describe(err: unknown): string {
  if (err instanceof Error) {
    const cause = (err as { cause?: unknown }).cause;
    return cause instanceof Error ? `${err.message}: ${cause.message}` : err.message;
  }
  return String(err);
}
