"""The requests and results of Sluice's HTTP API (docs/api.md), as
dataclasses with snake_case fields; ``to_wire`` and ``from_wire`` map them
to and from the server's camelCase JSON."""

from __future__ import annotations

import datetime as _dt
import math
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

__all__ = [
    "Duration",
    "Penalty",
    "Policy",
    "InlineCheck",
    "Lease",
    "Decision",
    "RateLimitItem",
    "RateLimitHeaders",
    "CheckResult",
    "LeaseResult",
    "AcquireResult",
]

#: A duration as the server reads it: a Go duration string ("60s", "1h",
#: "500ms"), a number of seconds, or a ``datetime.timedelta``.
Duration = Union[str, int, float, _dt.timedelta]


def duration_to_wire(d: Duration) -> Union[str, int, float]:
    """A duration as the server reads it: a timedelta becomes a Go duration
    string, exact to the microsecond; strings and numbers pass as they are."""
    if isinstance(d, _dt.timedelta):
        us = (d.days * 86400 + d.seconds) * 1_000_000 + d.microseconds
        if us % 1_000_000 == 0:
            return "{}s".format(us // 1_000_000)
        if us % 1000 == 0:
            return "{}ms".format(us // 1000)
        return "{}us".format(us)
    if isinstance(d, bool) or not isinstance(d, (str, int, float)):
        raise TypeError("a duration is a string like '60s', a number of seconds or a timedelta, got {!r}".format(d))
    return d


@dataclass(frozen=True)
class Penalty:
    """A policy's penalty box: a key denied ``after`` times in a row is
    blocked for ``base``, doubling up to ``max``. All three are required:
    none has a default."""

    after: int
    base: Duration
    max: Duration

    def to_wire(self) -> Dict[str, Any]:
        return {"after": self.after, "base": duration_to_wire(self.base), "max": duration_to_wire(self.max)}


@dataclass(frozen=True)
class Policy:
    """An inline policy (docs/api.md, "Inline policies"). Fields left None
    are left out, so the server's defaults apply."""

    name: str
    algorithm: str
    """fixed_window, sliding_window, sliding_log, token_bucket (gcra), concurrency or quota."""
    limit: int
    window: Optional[Duration] = None
    burst: Optional[int] = None
    lease_ttl: Optional[Duration] = None
    buckets: Optional[int] = None
    calendar: Optional[str] = None
    shadow: Optional[bool] = None
    fail_mode: Optional[str] = None
    """"open" (the server's default) or "closed": the decision when the store fails."""
    leased: Optional[bool] = None
    scope: Optional[str] = None
    penalty: Optional[Penalty] = None

    def to_wire(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"name": self.name, "algorithm": self.algorithm, "limit": self.limit}
        for attr, wire in (("window", "window"), ("lease_ttl", "leaseTTL")):
            v = getattr(self, attr)
            if v is not None:
                out[wire] = duration_to_wire(v)
        for attr, wire in (
            ("burst", "burst"),
            ("buckets", "buckets"),
            ("calendar", "calendar"),
            ("shadow", "shadow"),
            ("fail_mode", "failMode"),
            ("leased", "leased"),
            ("scope", "scope"),
        ):
            v = getattr(self, attr)
            if v is not None:
                out[wire] = v
        if self.penalty is not None:
            out["penalty"] = self.penalty.to_wire()
        return out


PolicyLike = Union[Policy, Mapping[str, Any]]
"""An inline policy: a Policy, or a mapping sent as it is (the wire's names)."""


def policy_to_wire(p: PolicyLike) -> Dict[str, Any]:
    if isinstance(p, Policy):
        return p.to_wire()
    if isinstance(p, Mapping):
        return dict(p)
    raise TypeError("an inline policy is a sluice.Policy or a mapping, got {!r}".format(p))


@dataclass(frozen=True)
class InlineCheck:
    """One inline check: a policy and the key of its counter within the tenant."""

    policy: PolicyLike
    key: str = ""

    def to_wire(self) -> Dict[str, Any]:
        return {"key": self.key, "policy": policy_to_wire(self.policy)}


@dataclass(frozen=True)
class Lease:
    """A concurrency lease: ``token`` (from the leases routes) renews or
    releases it."""

    id: str
    expires_at_ms: int
    token: Optional[str] = None

    @property
    def expires_at(self) -> _dt.datetime:
        """The expiry as an aware UTC datetime."""
        return _dt.datetime.fromtimestamp(self.expires_at_ms / 1000, tz=_dt.timezone.utc)

    @classmethod
    def from_wire(cls, w: Any) -> Optional["Lease"]:
        if not isinstance(w, Mapping):
            return None
        token = w.get("token")
        return cls(id=str(w.get("id", "")), expires_at_ms=_int(w.get("expiresAtMs")), token=token if isinstance(token, str) else None)


@dataclass(frozen=True)
class Decision:
    """One policy's decision.

    ``retry_after`` is in seconds, a float exact to the millisecond (the
    body's ``retryAfterMs`` / 1000); 0 when admitted. ``reset_at`` is epoch
    seconds, rounded up, at which ``remaining`` is back to ``limit``.
    """

    policy: str
    allowed: bool
    limit: int
    remaining: int
    reset_at: int
    retry_after: float
    retry_after_ms: int
    lease: Optional[Lease] = None
    shadowed: bool = False
    failed_open: bool = False
    failed_closed: bool = False

    @classmethod
    def from_wire(cls, w: Mapping[str, Any]) -> "Decision":
        return cls(**_decision_fields(w))


def _decision_fields(w: Mapping[str, Any]) -> Dict[str, Any]:
    ms = _int(w.get("retryAfterMs"))
    return {
        "policy": str(w.get("policy", "")),
        "allowed": w.get("allowed") is True,
        "limit": _int(w.get("limit")),
        "remaining": _int(w.get("remaining")),
        "reset_at": _int(w.get("resetAt")),
        "retry_after": ms / 1000 if ms else float(_int(w.get("retryAfter"))),
        "retry_after_ms": ms,
        "lease": Lease.from_wire(w.get("lease")),
        "shadowed": w.get("shadowed") is True,
        "failed_open": w.get("failedOpen") is True,
        "failed_closed": w.get("failedClosed") is True,
    }


@dataclass(frozen=True)
class RateLimitItem:
    """One policy of the IETF ``RateLimit-Policy`` and ``RateLimit`` headers:
    ``quota`` (q), ``window`` seconds (w; None for a concurrency policy),
    ``remaining`` (r) and ``reset`` seconds until remaining is back to quota
    (t). A policy in one header and not the other has None for the other's."""

    name: str
    quota: Optional[int] = None
    window: Optional[int] = None
    remaining: Optional[int] = None
    reset: Optional[int] = None


@dataclass(frozen=True)
class RateLimitHeaders:
    """The rate-limit headers of an answer, parsed: the reported decision's
    ``X-RateLimit-Limit``, ``-Remaining`` and ``-Reset`` (epoch seconds), the
    ``Retry-After`` whole seconds (on a 429), one item per policy of the IETF
    headers, and the headers as sent (``raw``, lower-case names)."""

    limit: Optional[int] = None
    remaining: Optional[int] = None
    reset: Optional[int] = None
    retry_after: Optional[int] = None
    policies: Tuple[RateLimitItem, ...] = ()
    raw: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, headers: Mapping[str, str]) -> "RateLimitHeaders":
        """From an answer's headers, keyed by lower-case name."""
        raw = {
            k: v
            for k, v in headers.items()
            if k in ("ratelimit", "ratelimit-policy", "retry-after") or k.startswith("x-ratelimit-")
        }
        items: Dict[str, Dict[str, Optional[int]]] = {}
        for header, params in (("ratelimit-policy", (("q", "quota"), ("w", "window"))), ("ratelimit", (("r", "remaining"), ("t", "reset")))):
            for name, ps in _sf_list(raw.get(header, "")):
                item = items.setdefault(name, {})
                for p, attr in params:
                    if p in ps:
                        item[attr] = ps[p]
        return cls(
            limit=_header_int(raw.get("x-ratelimit-limit")),
            remaining=_header_int(raw.get("x-ratelimit-remaining")),
            reset=_header_int(raw.get("x-ratelimit-reset")),
            retry_after=_header_int(raw.get("retry-after")),
            policies=tuple(RateLimitItem(name=n, **v) for n, v in items.items()),
            raw=raw,
        )

    def policy(self, name: str) -> Optional[RateLimitItem]:
        """The item of the policy named, or None."""
        for item in self.policies:
            if item.name == name:
                return item
        return None


@dataclass(frozen=True)
class CheckResult(Decision):
    """The answer to a check: the reported decision (when denied, the denying
    policy that frees up last; when admitted, the one with the fewest hits
    remaining), one decision per policy in ``decisions``, in order, and the
    rate-limit headers in ``headers``.

    ``status`` is the HTTP status: 200 admitted, 429 denied; with a client
    ``fail_mode``, 0 (no answer) or the 5xx that carried no decision.
    """

    status: int = 0
    decisions: Tuple[Decision, ...] = ()
    violated_policies: Tuple[str, ...] = ()
    """On a denial, the names of the denying policies."""
    message: Optional[str] = None
    """On a denial, the server's human-readable message (seed 003's body)."""
    headers: RateLimitHeaders = field(default_factory=RateLimitHeaders)

    @classmethod
    def from_answer(cls, status: int, body: Mapping[str, Any], headers: Mapping[str, str]) -> "CheckResult":
        decisions = body.get("decisions")
        violated = body.get("violated-policies")
        message = body.get("message")
        return cls(
            status=status,
            decisions=tuple(Decision.from_wire(d) for d in decisions if isinstance(d, Mapping)) if isinstance(decisions, list) else (),
            violated_policies=tuple(str(v) for v in violated) if isinstance(violated, list) else (),
            message=message if isinstance(message, str) else None,
            headers=RateLimitHeaders.parse(headers),
            **_decision_fields(body),
        )


@dataclass(frozen=True)
class LeaseResult(CheckResult):
    """The answer to ``acquire_lease`` or ``renew_lease``: a check's, with
    ``lease`` (and its ``token``) when allowed. A 429 (the units all held)
    is ``allowed`` false and ``lease`` None; so is a store failure that
    failed open (``failed_open``), which holds nothing to renew or release."""

    @property
    def token(self) -> Optional[str]:
        """The lease's token, or None when none was granted."""
        return self.lease.token if self.lease is not None else None


@dataclass(frozen=True)
class AcquireResult:
    """The answer to ``acquire``, granted or refused.

    Granted: ``waited_ms`` it waited in its queue and ``granted_at`` (the
    server's clock, an aware UTC datetime). Refused (the server's 429):
    ``reason`` ("shortage": the fair wait exceeds ``max_wait``, or "queue
    full"), the server's ``message``, and ``retry_after`` seconds (a float,
    the body's ``retryAfterMs`` / 1000) and ``retry_after_ms``: the estimated
    wait at the refusal.
    """

    granted: bool
    upstream: str
    waited_ms: int = 0
    granted_at: Optional[_dt.datetime] = None
    reason: Optional[str] = None
    message: Optional[str] = None
    retry_after: float = 0.0
    retry_after_ms: int = 0


def parse_time(s: Any) -> Optional[_dt.datetime]:
    """An RFC 3339 time as Go writes it ("2026-11-23T07:00:00.123456789Z")
    as an aware datetime: Python before 3.11 reads neither "Z" nor more than
    six digits of a fraction, so both are cut to what it reads."""
    if not isinstance(s, str):
        return None
    m = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)", s)
    if m is None:
        return None
    frac = ((m.group(2) or "") + "000000")[:6]
    zone = "+00:00" if m.group(3) == "Z" else m.group(3)
    try:
        return _dt.datetime.fromisoformat("{}.{}{}".format(m.group(1), frac, zone))
    except ValueError:
        return None


def _int(v: Any) -> int:
    if isinstance(v, bool):
        return 0
    if isinstance(v, int):
        return v
    if isinstance(v, float) and math.isfinite(v):
        return int(v)
    return 0


def _header_int(v: Optional[str]) -> Optional[int]:
    if v is None:
        return None
    v = v.strip()
    return int(v) if v.isdigit() else None


_SF_ITEM = re.compile(r'\s*(?:"((?:[^"\\]|\\.)*)"|([A-Za-z*][A-Za-z0-9_\-.:%*/]*))((?:\s*;\s*[a-z*][a-z0-9_\-.*]*(?:=[^;,]*)?)*)\s*(?:,|$)')
_SF_PARAM = re.compile(r';\s*([a-z*][a-z0-9_\-.*]*)(?:=([^;,]*))?')


def _sf_list(value: str) -> List[Tuple[str, Dict[str, int]]]:
    """The items of a Structured Field List (RFC 8941) of strings or tokens
    with parameters, as (name, integer parameters); what cannot be read is
    skipped."""
    out: List[Tuple[str, Dict[str, int]]] = []
    pos = 0
    value = value.strip()
    while pos < len(value):
        m = _SF_ITEM.match(value, pos)
        if m is None or m.end() == pos:
            break
        pos = m.end()
        name = re.sub(r"\\(.)", r"\1", m.group(1)) if m.group(1) is not None else m.group(2)
        params: Dict[str, int] = {}
        for pm in _SF_PARAM.finditer(m.group(3)):
            v = (pm.group(2) or "").strip()
            if re.fullmatch(r"-?\d{1,15}", v):
                params[pm.group(1)] = int(v)
        out.append((name, params))
    return out
