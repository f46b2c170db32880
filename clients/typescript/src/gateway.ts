// The WebSocket gateway's client (docs/api.md, "The WebSocket gateway"):
// a connection to a session that sends silo and pooled messages, surfaces
// every frame and close as typed events, and reconnects with backoff,
// asking GET /v1/ws/admit first (browsers hide a refused handshake's
// status) and honouring its Retry-After on 429.

/** The constructor of a WHATWG WebSocket: the platform's (browsers, Node 22+) or an injected one. */
export interface WebSocketLike {
  readonly readyState: number;
  send(data: string): void;
  close(code?: number, reason?: string): void;
  addEventListener(type: "open", listener: () => void): void;
  addEventListener(type: "message", listener: (ev: { data: unknown }) => void): void;
  addEventListener(type: "close", listener: (ev: { code: number; reason: string }) => void): void;
  addEventListener(type: "error", listener: (ev: unknown) => void): void;
}
export type WebSocketConstructor = new (url: string) => WebSocketLike;

/** What GET /v1/ws/admit answers: a connect now would be admitted, or why not. */
export type Admission =
  | { admit: true }
  | {
      admit: false;
      /** 429: a connection limit (retry after retryAfter); 403: an unknown or expired session, or tenant; 503: the store. */
      status: number;
      /** The limit that refused, on 429: gw:tenant-connections, gw:session-connections... */
      limit?: string;
      message: string;
      /** Seconds, from Retry-After. */
      retryAfter?: number;
    };

/** A frame the server sends: an echo, a message or a reply of the session, or a throttle, duplicate or error answer. */
export interface Frame {
  type?: "echo" | "message" | "reply" | string;
  action?: "silo" | "pooled";
  data?: unknown;
  id?: string;
  from?: string;
  to?: string;
  duplicate?: boolean;
  error?: "Too Many Requests" | "Queue Full" | "Not Delivered" | string;
  message?: string;
  retryAfterMs?: number;
  [extra: string]: unknown;
}

/** Why a connection closed, by its code (docs/api.md: "Closes"). */
export type CloseKind =
  | "normal" // 1000: closed by either side, or idle 10 minutes, or 2 hours in all
  | "going_away" // 1001: the server shuts down
  | "abnormal" // 1006: no close frame (the network, a refused handshake)
  | "invalid_utf8" // 1007
  | "too_slow" // 1008: the client fell behind its frames
  | "too_big" // 1009: a message over the server's limit
  | "session_expired" // 4000
  | "session_deleted" // 4001: the session or its tenant was deleted
  | "other";

export function closeKind(code: number): CloseKind {
  switch (code) {
    case 1000:
      return "normal";
    case 1001:
      return "going_away";
    case 1006:
      return "abnormal";
    case 1007:
      return "invalid_utf8";
    case 1008:
      return "too_slow";
    case 1009:
      return "too_big";
    case 4000:
      return "session_expired";
    case 4001:
      return "session_deleted";
    default:
      return "other";
  }
}

export interface CloseDetail {
  code: number;
  reason: string;
  kind: CloseKind;
  /** Whether the connection will try again (reconnecting follows). */
  willReconnect: boolean;
}

export interface ReconnectDetail {
  /** 1 for the first retry after a loss, and so on. */
  attempt: number;
  delayMs: number;
  /** Why: the close that ended the last connection, or the admission that refused. */
  cause: { close: CloseDetail } | { refused: Admission & { admit: false } };
}

/** The events of a GatewayConnection; each a CustomEvent whose detail is as typed here. */
export interface GatewayEvents {
  /** attempt: the connections opened so far, this one included. */
  open: { attempt: number };
  frame: Frame;
  close: CloseDetail;
  reconnecting: ReconnectDetail;
  /** The connection stops for good: closed by close(), a close code not worth retrying, or a connect refused with a 4xx other than 429 (403: a session deleted or expired). */
  end: { cause: { close: CloseDetail } | { refused: Admission & { admit: false } } | { closedByClient: true } };
}

export interface ConnectOptions {
  /** The WebSocket constructor; default globalThis.WebSocket (browsers, Node 22+). */
  WebSocket?: WebSocketConstructor;
  /** Reconnect at all (default true). */
  reconnect?: boolean;
  /** First backoff, ms (default 250); doubled each attempt, with full jitter, up to maxDelayMs. */
  initialDelayMs?: number;
  /** Largest backoff, ms (default 30,000); Retry-After may ask more, and is honoured. */
  maxDelayMs?: number;
  /** Give up after this many attempts in a row without an open (default Infinity). */
  maxAttempts?: number;
  /** Waits ms; tests pass a fake clock's. Default setTimeout. */
  sleep?: (ms: number) => Promise<void>;
  /** Jitter source in [0, 1); default Math.random. */
  random?: () => number;
}

/** Close codes after which reconnecting cannot help. */
const FINAL: ReadonlySet<CloseKind> = new Set<CloseKind>(["session_expired", "session_deleted", "too_big", "invalid_utf8"]);

/**
 * GatewayConnection is one client of a session, kept connected: it
 * dispatches `open`, `frame`, `close`, `reconnecting` and `end` events
 * (CustomEvent, detail as GatewayEvents types them).
 */
export class GatewayConnection extends EventTarget {
  readonly tenant: string;
  readonly session: string;
  #ws: WebSocketLike | undefined;
  #closed = false;
  #opts: Required<Omit<ConnectOptions, "WebSocket">> & { WebSocket: WebSocketConstructor };
  #url: string;
  #admit: () => Promise<Admission>;

  /** @internal Use Sluice.connect. */
  constructor(url: string, tenant: string, session: string, admit: () => Promise<Admission>, opts: ConnectOptions) {
    super();
    const WS = opts.WebSocket ?? (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket;
    if (typeof WS !== "function") {
      throw new TypeError("Sluice.connect: no WebSocket: pass options.WebSocket on a platform without a global one (Node 20: --experimental-websocket, or the ws package)");
    }
    this.#url = url;
    this.tenant = tenant;
    this.session = session;
    this.#admit = admit;
    this.#opts = {
      WebSocket: WS,
      reconnect: opts.reconnect ?? true,
      initialDelayMs: opts.initialDelayMs ?? 250,
      maxDelayMs: opts.maxDelayMs ?? 30_000,
      maxAttempts: opts.maxAttempts ?? Infinity,
      sleep: opts.sleep ?? ((ms) => new Promise((r) => setTimeout(r, ms))),
      random: opts.random ?? Math.random,
    };
    void this.#run();
  }

  /** Whether a WebSocket is open now. */
  get connected(): boolean {
    return this.#ws !== undefined && this.#ws.readyState === 1;
  }

  /**
   * Sends a message to the session's silo or pooled queue; its answers come
   * back as `frame` events (an echo to this connection, a throttle, a
   * duplicate). Returns false when not connected (nothing sent).
   */
  send(action: "silo" | "pooled", data: unknown, id?: string): boolean {
    if (!this.connected || this.#ws === undefined) return false;
    const msg: Record<string, unknown> = { action, data };
    if (id !== undefined) msg.id = id;
    this.#ws.send(JSON.stringify(msg));
    return true;
  }

  /** Closes for good: no reconnect follows. */
  close(code = 1000, reason = ""): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#ws?.close(code, reason);
    if (this.#ws === undefined) this.#emit("end", { cause: { closedByClient: true } });
  }

  /** Resolves with the next event of type, or rejects on `end` (unless waiting for end). */
  next<K extends keyof GatewayEvents>(type: K): Promise<GatewayEvents[K]> {
    return new Promise((resolve, reject) => {
      const on = (ev: Event) => {
        this.removeEventListener(type, on);
        this.removeEventListener("end", onEnd);
        resolve((ev as CustomEvent<GatewayEvents[K]>).detail);
      };
      const onEnd = (ev: Event) => {
        this.removeEventListener(type, on);
        this.removeEventListener("end", onEnd);
        reject(Object.assign(new Error(`gateway connection ended waiting for ${type}`), { detail: (ev as CustomEvent).detail }));
      };
      this.addEventListener(type, on);
      if (type !== "end") this.addEventListener("end", onEnd);
    });
  }

  #emit<K extends keyof GatewayEvents>(type: K, detail: GatewayEvents[K]): void {
    this.dispatchEvent(new CustomEvent(type, { detail }));
  }

  async #run(): Promise<void> {
    let attempt = 0; // attempts since the last open
    let total = 0;
    for (;;) {
      if (this.#closed) return;
      let admission: Admission;
      try {
        admission = await this.#admit();
      } catch {
        admission = { admit: false, status: 0, message: "admission check failed" };
      }
      if (this.#closed) return; // close() told "end"
      let cause: ReconnectDetail["cause"];
      let retryAfterMs = 0;
      if (!admission.admit) {
        cause = { refused: admission };
        if (admission.status >= 400 && admission.status < 500 && admission.status !== 429) {
          return this.#emit("end", { cause });
        }
        retryAfterMs = (admission.retryAfter ?? 0) * 1000;
      } else {
        total++;
        const close = await this.#connectOnce(total);
        if (close.opened) attempt = 0;
        const willReconnect = !this.#closed && this.#opts.reconnect && !FINAL.has(close.detail.kind);
        close.detail.willReconnect = willReconnect && attempt + 1 <= this.#opts.maxAttempts;
        this.#emit("close", close.detail);
        if (!close.detail.willReconnect) {
          return this.#emit("end", { cause: this.#closed ? { closedByClient: true } : { close: close.detail } });
        }
        cause = { close: close.detail };
      }
      attempt++;
      if (!this.#opts.reconnect || attempt > this.#opts.maxAttempts) {
        return this.#emit("end", { cause });
      }
      const backoff = Math.min(this.#opts.maxDelayMs, this.#opts.initialDelayMs * 2 ** (attempt - 1));
      const delayMs = Math.max(retryAfterMs, Math.floor(this.#opts.random() * backoff));
      this.#emit("reconnecting", { attempt, delayMs, cause });
      await this.#opts.sleep(delayMs);
    }
  }

  // connectOnce opens one WebSocket and resolves when it closes.
  #connectOnce(total: number): Promise<{ opened: boolean; detail: CloseDetail }> {
    return new Promise((resolve) => {
      let opened = false;
      let ws: WebSocketLike;
      try {
        ws = new this.#opts.WebSocket(this.#url);
      } catch (err) {
        // A constructor that throws (a URL it refuses) is a connect that failed.
        resolve({ opened, detail: { code: 1006, reason: String(err), kind: "abnormal", willReconnect: false } });
        return;
      }
      this.#ws = ws;
      ws.addEventListener("open", () => {
        opened = true;
        if (this.#closed) {
          ws.close(1000, "");
          return;
        }
        this.#emit("open", { attempt: total });
      });
      ws.addEventListener("message", (ev) => {
        if (typeof ev.data !== "string") return;
        let frame: Frame;
        try {
          frame = JSON.parse(ev.data) as Frame;
        } catch {
          return;
        }
        this.#emit("frame", frame);
      });
      ws.addEventListener("error", () => {});
      ws.addEventListener("close", (ev) => {
        this.#ws = undefined;
        resolve({ opened, detail: { code: ev.code, reason: ev.reason, kind: closeKind(ev.code), willReconnect: false } });
      });
    });
  }
}
