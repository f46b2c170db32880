"""Sluice's HTTP API (docs/api.md) from Python, on the standard library alone.

A limit reached (a 429 from /v1/check or /v1/leases, an upstream's
refusal) is a result, never an exception; every other answer that is not
2xx raises a :class:`~sluice.errors.SluiceError` carrying the server's
error body.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import select
import socket
import threading
import time
import urllib.parse
import weakref
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from . import errors
from .errors import LeaseRefused, NotFound, SluiceError
from .models import (
    AcquireResult,
    CheckResult,
    Decision,
    Duration,
    InlineCheck,
    LeaseResult,
    PolicyLike,
    duration_to_wire,
    parse_time,
    policy_to_wire,
)

__all__ = ["Client", "HeldLease", "DEFAULT_TIMEOUT"]

__version__ = "0.1.0"

#: The seconds a call waits for the server by default.
DEFAULT_TIMEOUT = 10.0

_Wire = Dict[str, Any]
_Answer = Tuple[int, _Wire, Dict[str, str]]


class Client:
    """A client of one Sluice server (or the load balancer in front of its nodes).

    Args:
        base_url: the server, e.g. ``"http://127.0.0.1:8080"``; a path is
            kept as a prefix of every route.
        api_key: the admin key or a tenant's API key, sent as
            ``Authorization: Bearer``; None sends none.
        timeout: seconds a call waits to connect and for each of the
            server's reads; a call may override it. ``acquire`` waits
            ``max_wait`` more.
        fail_mode: what ``check`` decides when no decision comes back (the
            server cannot be reached or does not answer in time, or a proxy
            in front answers 502, 503 or 504 without Sluice's body):
            ``"open"`` admits (``failed_open``), ``"closed"`` denies
            (``failed_closed``); inline policies decide by their own
            ``fail_mode`` (default open) whatever this says. The server's
            own 503 (a policy that fails closed could not be decided) is
            denied. None, the default, raises instead. Errors the server
            answers (400, 401, 403, 404) always raise.

    A client is safe to share between threads: each thread keeps its own
    connection, reused from call to call. ``close()`` (or ``with``) closes
    them.
    """

    def __init__(
        self,
        base_url: str,
        api_key: Optional[str] = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        fail_mode: Optional[str] = None,
    ) -> None:
        if not isinstance(base_url, str) or base_url == "":
            raise ValueError("sluice.Client: base_url is required")
        u = urllib.parse.urlsplit(base_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError("sluice.Client: base_url must be an http or https URL, got {!r}".format(base_url))
        if fail_mode not in (None, "open", "closed"):
            raise ValueError('sluice.Client: fail_mode must be "open", "closed" or None, got {!r}'.format(fail_mode))
        if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or not timeout > 0:
            raise ValueError("sluice.Client: timeout must be a positive number of seconds, got {!r}".format(timeout))
        self.base_url = base_url.rstrip("/")
        self.timeout = float(timeout)
        self.fail_mode = fail_mode
        self._api_key = api_key
        self._https = u.scheme == "https"
        self._host = u.hostname
        self._port = u.port
        self._prefix = u.path.rstrip("/")
        self._local = threading.local()
        # Every thread's connection, weakly: a thread's ends with it.
        self._conns: "weakref.WeakSet[http.client.HTTPConnection]" = weakref.WeakSet()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return "sluice.Client({!r})".format(self.base_url)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Closes the connections the client keeps; a later call opens anew."""
        with self._lock:
            conns = list(self._conns)
            self._conns.clear()
        for c in conns:
            c.close()

    # ---- decisions -------------------------------------------------------

    def check(
        self,
        endpoint: Optional[str] = None,
        *,
        key: Optional[Mapping[str, str]] = None,
        policies: Optional[Sequence[str]] = None,
        checks: Optional[Sequence[Union[InlineCheck, Mapping[str, Any]]]] = None,
        tenant: Optional[str] = None,
        hits: Optional[int] = None,
        timeout: Optional[float] = None,
    ) -> CheckResult:
        """POST /v1/check: decide a request.

        Name exactly one of ``endpoint`` (a configured endpoint: its
        policies, in order), ``policies`` (configured policies by name) or
        ``checks`` (inline policies, 1 to 16, all-or-nothing). ``key`` holds
        the key parts of configured policies (``{"user": "u-42"}``); an
        inline check carries its own key. ``tenant`` may be left out with a
        tenant's API key. ``hits`` is the cost, default 1; 0 reads without
        consuming.

        Returns the decision whether admitted (200) or denied (429:
        ``allowed`` false, ``retry_after`` seconds, ``violated_policies``).
        Raises :class:`~sluice.errors.BadRequest` (naming the ``field``),
        ``Unauthorized``, ``Forbidden``... for every other answer.
        """
        named = [n for n, v in (("endpoint", endpoint), ("policies", policies), ("checks", checks)) if v is not None]
        if len(named) != 1:
            raise TypeError("check: name exactly one of endpoint, policies or checks, got {}".format(named or "none"))
        req: _Wire = {}
        if tenant is not None:
            req["tenant"] = tenant
        if hits is not None:
            req["hits"] = hits
        if checks is not None:
            if key is not None:
                raise TypeError("check: an inline check carries its own key: InlineCheck(policy, key=...)")
            if isinstance(checks, (str, bytes, Mapping)):
                raise TypeError("check: checks is a sequence of InlineCheck")
            req["checks"] = [c.to_wire() if isinstance(c, InlineCheck) else dict(c) for c in checks]
        else:
            if endpoint is not None:
                req["endpoint"] = endpoint
            else:
                if isinstance(policies, str):
                    raise TypeError("check: policies is a sequence of names, not a string")
                req["policies"] = list(policies or ())
            if key is not None:
                req["key"] = dict(key)
        try:
            status, body, headers = self._call("POST", "/v1/check", req, (200, 429), timeout, _is_decision)
        except SluiceError as err:
            if self.fail_mode is None:
                raise
            own = err.status == 503 and err.code == "unavailable" and bool(err.body)
            no_decision = err.status == 0 or (err.status in (502, 503, 504) and not err.body)
            if not (own or no_decision):
                raise
            return _failed(req, self.fail_mode, err, own)
        return CheckResult.from_answer(status, body, headers)

    # ---- leases ----------------------------------------------------------

    def acquire_lease(
        self,
        policy: Union[str, PolicyLike],
        *,
        tenant: Optional[str] = None,
        key: Optional[Mapping[str, str]] = None,
        key_value: Optional[str] = None,
        units: Optional[int] = None,
        timeout: Optional[float] = None,
    ) -> LeaseResult:
        """POST /v1/leases: hold ``units`` (default 1) of a concurrency policy.

        ``policy`` is a configured policy's name (keyed by ``key`` parts) or
        an inline :class:`~sluice.models.Policy` (keyed by ``key_value``).
        All units held (429) is a result with ``allowed`` false and no
        lease; otherwise ``result.lease.token`` renews and releases it.
        See also :meth:`lease`, the ``with`` form.
        """
        return self._acquire_lease(_lease_request(policy, tenant, key, key_value), units, timeout)

    def renew_lease(
        self,
        token: str,
        policy: Union[str, PolicyLike],
        *,
        tenant: Optional[str] = None,
        key: Optional[Mapping[str, str]] = None,
        key_value: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> LeaseResult:
        """POST /v1/leases/{token}/renew, with the acquire's policy, tenant
        and key: the lease with its new expiry. A lease released or expired
        raises :class:`~sluice.errors.NotFound`."""
        return self._renew_lease(token, _lease_request(policy, tenant, key, key_value), timeout)

    def release_lease(
        self,
        token: str,
        policy: Union[str, PolicyLike],
        *,
        tenant: Optional[str] = None,
        key: Optional[Mapping[str, str]] = None,
        key_value: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> CheckResult:
        """DELETE /v1/leases/{token}, with the acquire's policy, tenant and
        key: returns its units, answering the units now free. A lease
        released or expired raises :class:`~sluice.errors.NotFound`."""
        return self._release_lease(token, _lease_request(policy, tenant, key, key_value), timeout)

    def lease(
        self,
        policy: Union[str, PolicyLike],
        *,
        tenant: Optional[str] = None,
        key: Optional[Mapping[str, str]] = None,
        key_value: Optional[str] = None,
        units: Optional[int] = None,
        timeout: Optional[float] = None,
    ) -> "HeldLease":
        """A lease as a context manager::

            with client.lease("reports-running", tenant="acme") as lease:
                run_report()      # lease.renew() now and then for long work

        Entering acquires it, raising :class:`~sluice.errors.LeaseRefused`
        (its ``retry_after``, its ``result``) when the units are all held;
        leaving releases it, whether the body returned or raised.
        """
        return HeldLease(self, _lease_request(policy, tenant, key, key_value), units, timeout)

    def _acquire_lease(self, req: _Wire, units: Optional[int], timeout: Optional[float]) -> LeaseResult:
        if units is not None:
            req = dict(req, units=units)
        status, body, headers = self._call("POST", "/v1/leases", req, (200, 429), timeout, _is_decision)
        return LeaseResult.from_answer(status, body, headers)

    def _renew_lease(self, token: str, req: _Wire, timeout: Optional[float]) -> LeaseResult:
        status, body, headers = self._call("POST", "/v1/leases/{}/renew".format(_token(token)), req, (200,), timeout)
        return LeaseResult.from_answer(status, body, headers)

    def _release_lease(self, token: str, req: _Wire, timeout: Optional[float]) -> CheckResult:
        status, body, headers = self._call("DELETE", "/v1/leases/{}".format(_token(token)), req, (200,), timeout)
        return CheckResult.from_answer(status, body, headers)

    # ---- upstream quotas -------------------------------------------------

    def acquire(
        self,
        upstream: str,
        *,
        key: str,
        tenant: Optional[str] = None,
        cost: Optional[int] = None,
        max_wait: Optional[Duration] = None,
        timeout: Optional[float] = None,
    ) -> AcquireResult:
        """POST /v1/upstreams/{upstream}/acquire: wait for a fair share of an
        upstream's quota, for the customer ``key`` of ``tenant``.

        The server holds the call until its turn, at most ``max_wait``
        (seconds, a timedelta or "500ms"; default the upstream's maxWait),
        so the call waits ``timeout`` plus ``max_wait`` for it. Returns
        ``granted`` true, or, refused (the server's 429: a shortage, or the
        customer's queue full), ``granted`` false with the ``reason`` and
        ``retry_after``: like ``threading.Lock.acquire(timeout=...)``, not
        getting it in time is an answer, not an exception. Raises
        :class:`~sluice.errors.NotFound` for an unknown upstream,
        ``BadRequest`` for a bad request.
        """
        req: _Wire = {"key": key}
        if tenant is not None:
            req["tenant"] = tenant
        if cost is not None:
            req["cost"] = cost
        wait = 0.0
        if max_wait is not None:
            req["maxWait"] = duration_to_wire(max_wait)
            wait = _seconds(req["maxWait"])
        status, body, headers = self._call(
            "POST",
            "/v1/upstreams/{}/acquire".format(urllib.parse.quote(upstream, safe="")),
            req,
            (200, 429),
            (timeout if timeout is not None else self.timeout) + wait,
            lambda status, body: status != 429 or body.get("error") == "upstream_quota_short",
        )
        if status == 200:
            return AcquireResult(
                granted=True,
                upstream=upstream,
                waited_ms=_int(body.get("waitedMs")),
                granted_at=parse_time(body.get("grantedAt")),
            )
        ms = _int(body.get("retryAfterMs"))
        header = headers.get("retry-after", "").strip()
        return AcquireResult(
            granted=False,
            upstream=str(body.get("upstream", upstream)),
            reason=str(body.get("reason", "")),
            message=str(body.get("message", "")),
            retry_after=ms / 1000 if ms else float(header) if header.isdigit() else 1.0,
            retry_after_ms=ms,
        )

    # ---- transport -------------------------------------------------------

    def _call(
        self,
        method: str,
        path: str,
        payload: Optional[_Wire],
        ok: Tuple[int, ...],
        timeout: Optional[float],
        is_result: Callable[[int, _Wire], bool] = lambda status, body: True,
    ) -> _Answer:
        t = self.timeout if timeout is None else timeout
        if not t > 0:
            raise ValueError("timeout must be a positive number of seconds, got {!r}".format(timeout))
        status, reason, headers, raw = self._roundtrip(method, self._prefix + path, payload, t)
        body: Optional[_Wire] = None
        try:
            parsed = json.loads(raw.decode("utf-8")) if raw else None
            if isinstance(parsed, dict):
                body = parsed
        except ValueError:
            body = None
        if status in ok and body is not None and is_result(status, body):
            return status, body, headers
        ra = headers.get("retry-after", "").strip()
        text = raw[:200].decode("utf-8", "replace")
        raise errors.error_for(
            status,
            body,
            "sluice: {} {}: {} {}: {}".format(method, path, status, reason, text),
            float(ra) if ra.isdigit() else None,
        )

    def _roundtrip(self, method: str, path: str, payload: Optional[_Wire], timeout: float) -> Tuple[int, str, Dict[str, str], bytes]:
        data = None if payload is None else json.dumps(payload, separators=(",", ":")).encode("utf-8")
        hdrs = {"Accept": "application/json", "User-Agent": "sluice-python/" + __version__}
        if data is not None:
            hdrs["Content-Type"] = "application/json"
        if self._api_key:
            hdrs["Authorization"] = "Bearer " + self._api_key
        for attempt in (0, 1):
            conn, reused = self._conn(timeout)
            try:
                conn.request(method, path, body=data, headers=hdrs)
                resp = conn.getresponse()
                raw = resp.read()
            except socket.timeout as err:
                self._drop(conn)
                raise errors.Timeout(0, "timeout", "sluice: {} {}: no answer within {}s".format(method, path, timeout)) from err
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as err:
                self._drop(conn)
                # A connection kept from an earlier call that the server
                # closed as idle just as this request went out: the server
                # read nothing of it, so it is sent once more, anew.
                if reused and attempt == 0:
                    continue
                raise errors.ConnectionFailed(0, "network", "sluice: {} {}: {}".format(method, path, _describe(err))) from err
            except (OSError, http.client.HTTPException) as err:
                self._drop(conn)
                raise errors.ConnectionFailed(0, "network", "sluice: {} {}: {}".format(method, path, _describe(err))) from err
            headers: Dict[str, str] = {}
            for k, v in resp.getheaders():
                k = k.lower()
                headers[k] = headers[k] + ", " + v if k in headers else v
            if resp.will_close:
                self._drop(conn)
            return resp.status, resp.reason, headers, raw
        raise AssertionError("unreachable")  # pragma: no cover

    def _conn(self, timeout: float) -> Tuple[http.client.HTTPConnection, bool]:
        """This thread's connection, and whether it served an earlier call."""
        held: Optional[Tuple[int, http.client.HTTPConnection]] = getattr(self._local, "conn", None)
        if held is not None:
            pid, conn = held
            if pid == os.getpid() and conn.sock is not None and not _dropped(conn.sock):
                conn.sock.settimeout(timeout)
                return conn, True
            if pid == os.getpid():
                self._drop(conn)
        conn = (
            http.client.HTTPSConnection(self._host, self._port, timeout=timeout)
            if self._https
            else http.client.HTTPConnection(self._host, self._port, timeout=timeout)
        )
        self._local.conn = (os.getpid(), conn)
        with self._lock:
            self._conns.add(conn)
        return conn, False

    def _drop(self, conn: http.client.HTTPConnection) -> None:
        conn.close()
        with self._lock:
            self._conns.discard(conn)
        held = getattr(self._local, "conn", None)
        if held is not None and held[1] is conn:
            self._local.conn = None


class HeldLease:
    """A lease held by ``with client.lease(...) as lease:``; see
    :meth:`Client.lease`. ``result`` is the acquire's answer, ``token`` the
    lease's (None when the store failed and the policy failed open: there is
    nothing to renew or release then, and both do nothing)."""

    def __init__(self, client: Client, request: _Wire, units: Optional[int], timeout: Optional[float]) -> None:
        self._client = client
        self._request = request
        self._units = units
        self._timeout = timeout
        self._released = False
        self.result: Optional[LeaseResult] = None

    @property
    def token(self) -> Optional[str]:
        return self.result.token if self.result is not None else None

    def __enter__(self) -> "HeldLease":
        if self.result is not None:
            raise RuntimeError("a HeldLease is entered once")
        result = self._client._acquire_lease(self._request, self._units, self._timeout)
        if not result.allowed:
            raise LeaseRefused(result)
        self.result = result
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            self.release()
        except SluiceError:
            # With the body's exception in flight, that one is raised: the
            # lease returns its units at its leaseTTL anyway.
            if exc_type is None:
                raise

    def renew(self, timeout: Optional[float] = None) -> Optional[LeaseResult]:
        """Renews the lease for another leaseTTL; raises NotFound once it expired."""
        token = self.token
        if token is None or self._released:
            return None
        return self._client._renew_lease(token, self._request, _or(timeout, self._timeout))

    def release(self, timeout: Optional[float] = None) -> Optional[CheckResult]:
        """Releases the lease (once: again does nothing). A lease that had
        already expired is released all the same: None."""
        token = self.token
        if token is None or self._released:
            return None
        try:
            released: Optional[CheckResult] = self._client._release_lease(token, self._request, _or(timeout, self._timeout))
        except NotFound:
            released = None
        self._released = True
        return released


def _lease_request(
    policy: Union[str, PolicyLike], tenant: Optional[str], key: Optional[Mapping[str, str]], key_value: Optional[str]
) -> _Wire:
    req: _Wire = {}
    if tenant is not None:
        req["tenant"] = tenant
    if isinstance(policy, str):
        if key_value is not None:
            raise TypeError("a configured policy is keyed by key parts (key=...), not key_value")
        req["policy"] = policy
        if key is not None:
            req["key"] = dict(key)
    else:
        if key is not None:
            raise TypeError("an inline policy is keyed by key_value=..., not key parts")
        req["policy"] = policy_to_wire(policy)
        if key_value is not None:
            req["keyValue"] = key_value
    return req


def _token(token: str) -> str:
    if not isinstance(token, str) or token == "":
        raise ValueError("a lease token is a non-empty string, got {!r}".format(token))
    return urllib.parse.quote(token, safe="")


def _is_decision(status: int, body: _Wire) -> bool:
    """A decision (200, or a limit's 429) rather than an error body (a 429
    ``exhausted`` of a shared resource, which is no limit's decision)."""
    return isinstance(body.get("allowed"), bool)


def _failed(req: _Wire, mode: str, err: SluiceError, own: bool) -> CheckResult:
    """check's result when no decision came back. The server's own 503
    denies every policy; otherwise each policy's fail mode decides: an
    inline policy's own (default open), configured ones the client's."""
    now = int(-(-time.time() // 1))

    def decide(name: str, m: str) -> Decision:
        m = "closed" if own else m
        if m == "open":
            return Decision(name, True, 0, 0, now, 0.0, 0, failed_open=True)
        return Decision(name, False, 0, 0, now, 1.0, 1000, failed_closed=True)

    decisions: List[Decision]
    if "checks" in req:
        decisions = []
        for c in req["checks"]:
            p = c.get("policy") if isinstance(c, Mapping) else None
            p = p if isinstance(p, Mapping) else {}
            decisions.append(decide(str(p.get("name", "")), "closed" if p.get("failMode") == "closed" else "open"))
    else:
        names: Iterable[str] = [req["endpoint"]] if "endpoint" in req else req.get("policies", [])
        decisions = [decide(n, mode) for n in names]
    denied = [d for d in decisions if not d.allowed]
    reported = denied[0] if denied else decisions[0] if decisions else decide("", mode)
    return CheckResult(
        policy=reported.policy,
        allowed=reported.allowed,
        limit=0,
        remaining=0,
        reset_at=now,
        retry_after=reported.retry_after,
        retry_after_ms=reported.retry_after_ms,
        failed_open=reported.failed_open,
        failed_closed=reported.failed_closed,
        status=err.status,
        decisions=tuple(decisions),
        violated_policies=tuple(d.policy for d in denied),
        message=err.message,
    )


def _dropped(sock: socket.socket) -> bool:
    """Whether an idle kept connection was closed by the server (or has
    bytes nobody asked for): then it is readable."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


_GO_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def _seconds(d: Union[str, int, float]) -> float:
    """A wire duration's seconds; 0 for one the server will refuse anyway."""
    if isinstance(d, (int, float)):
        return max(0.0, float(d))
    return sum(float(n) * _UNITS[u] for n, u in _GO_DURATION.findall(d))


def _int(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def _or(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return a if a is not None else b


def _describe(err: BaseException) -> str:
    return "{}: {}".format(type(err).__name__, err) if str(err) else type(err).__name__
