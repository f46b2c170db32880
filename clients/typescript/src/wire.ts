// The bodies on the wire, as openapi/openapi.json describes them: the
// requests the client sends as they are sent, and the answers it parses as
// the server sends them, before the client makes its friendlier results
// (CheckResult, AcquireResult, Admission) of them. test/wire.test.mjs
// compares every type exported here with its schema in the document.

/** The algorithms of a policy (docs/algorithms.md). `gcra` is `token_bucket`. */
export type Algorithm =
  | "fixed_window"
  | "sliding_window"
  | "sliding_log"
  | "token_bucket"
  | "gcra"
  | "concurrency"
  | "quota";

/** A duration as the server reads it: a Go duration string ("60s", "1h", "500ms") or a number of seconds. */
export type Duration = string | number;

/**
 * An inline policy's penalty box: a key denied `after` times in a row is blocked for `base`, doubling up
 * to `max`. All three are required: none has a default.
 */
export interface Penalty {
  after: number;
  base: Duration;
  max: Duration;
}

/** An inline policy (docs/api.md, "Inline policies"). */
export interface Policy {
  name: string;
  algorithm: Algorithm;
  limit: number;
  window?: Duration;
  burst?: number;
  leaseTTL?: Duration;
  buckets?: number;
  calendar?: "month";
  shadow?: boolean;
  failMode?: "open" | "closed";
  leased?: boolean;
  scope?: "global" | "regional";
  penalty?: Penalty;
}

/** One inline check: a policy and the key of its counter within the tenant. */
export interface InlineCheck {
  key?: string;
  policy: Policy;
}

/** Key parts of configured policies: `user`, `ip` or any descriptor. */
export type KeyParts = Record<string, string>;

interface CheckCommon {
  /** The tenant; may be left out with a tenant's API key (it is the key's). */
  tenant?: string;
  /** The request's cost, default 1; 0 reads the state without consuming. */
  hits?: number;
}

/** A check of a configured endpoint: its policies, in order; tier and overrides apply. */
export interface EndpointCheck extends CheckCommon {
  endpoint: string;
  key?: KeyParts;
}

/** A check of configured policies by name. */
export interface PoliciesCheck extends CheckCommon {
  policies: string[];
  key?: KeyParts;
}

/** A check of inline policies (1 to 16), all-or-nothing. */
export interface InlineChecks extends CheckCommon {
  checks: InlineCheck[];
}

/** The body of POST /v1/check, sent as it is. */
export type CheckRequest = EndpointCheck | PoliciesCheck | InlineChecks;

/** A lease's policy: a configured one by name with key parts, or an inline one with its key (the body of renew and release). */
export type LeaseRequest = {
  tenant?: string;
} & (
  | { policy: string; key?: KeyParts; keyValue?: never }
  | { policy: Policy; keyValue?: string; key?: never }
);

/** The body of POST /v1/leases: a lease's policy and the units to hold (default 1). */
export type LeaseAcquireRequest = LeaseRequest & { units?: number };

/** A concurrency lease granted by a check or POST /v1/leases. */
export interface Lease {
  /** Present on the leases routes: the opaque token to renew or release it with. */
  token?: string;
  id: string;
  expiresAtMs: number;
}

/** One policy's decision; also the answer to renewing or releasing a lease. */
export interface Decision {
  policy: string;
  allowed: boolean;
  /** The policy's capacity (a token bucket's burst). */
  limit: number;
  /** Hits that would be admitted now, after this decision. */
  remaining: number;
  /** Epoch seconds, rounded up, at which remaining is back to limit. */
  resetAt: number;
  /** For a denial, whole seconds, rounded up, until the same request would be admitted; 0 when admitted. */
  retryAfter: number;
  retryAfterMs: number;
  lease?: Lease;
  shadowed?: boolean;
  failedOpen?: boolean;
  failedClosed?: boolean;
}

/** The answer to POST /v1/check and POST /v1/leases (200 or 429), as sent. */
export interface CheckResponseBody extends Decision {
  /** On a denial: "Too Many Requests". */
  error?: string;
  /** On a denial: a human-readable message (seed 003's body). */
  message?: string;
  /** On a denial: the names of the denying policies. */
  "violated-policies"?: string[];
  decisions: Decision[];
}

/** The body of POST /v1/upstreams/{name}/acquire. */
export interface AcquireBody {
  tenant?: string;
  key: string;
  cost?: number;
  maxWait?: Duration;
}

/** The answer to an upstream acquire granted (200). */
export interface AcquireGrantBody {
  granted: boolean;
  /** The wait as a Go duration ("1.5ms"). */
  waited: string;
  waitedMs: number;
  /** RFC 3339, UTC. */
  grantedAt: string;
}

/** The answer to an upstream acquire refused (429). */
export interface UpstreamShortBody {
  error: string;
  message: string;
  upstream: string;
  reason: string;
  retryAfterMs: number;
}

/** A session (PUT /v1/tenants/{id}/sessions, GET /v1/tenants/{id}/sessions/{session}). */
export interface Session {
  tenant: string;
  id: string;
  /** RFC 3339. */
  createdAt: string;
  /** RFC 3339. */
  expiresAt: string;
}

/** GET /v1/ws/admit's 200: a connect now would be admitted. */
export interface AdmitBody {
  admit: true;
}

/** A connect refused by the gateway's limits (429 of GET /v1/ws/admit and GET /v1/ws). */
export interface ConnectRefusalBody {
  error: string;
  message: string;
  /** The limit that refused: gw:tenant-connections, gw:session-connections... */
  limit?: string;
  /** Seconds, as Retry-After. */
  retryAfter?: number;
}

/** The server's error body. */
export interface ErrorBody {
  error: string;
  field?: string;
  message: string;
  [extra: string]: unknown;
}
