"""sluice: Sluice's HTTP API from Python, on the standard library alone.

    import sluice

    client = sluice.Client("http://127.0.0.1:8080", api_key)
    r = client.check(endpoint="chat", key={"user": "u-42"})
    if not r.allowed:
        print("retry in", r.retry_after, "seconds")

A limit reached is a result (``allowed`` false), never an exception; every
other answer raises a :class:`SluiceError`. See docs/python.md.
"""

from . import errors as _errors
from .client import DEFAULT_TIMEOUT, Client, HeldLease, __version__
from .errors import (
    BadRequest,
    Conflict,
    ConnectionFailed,
    Forbidden,
    LeaseRefused,
    NotFound,
    SluiceError,
    Timeout,
    Unauthorized,
    Unavailable,
)
from .models import (
    AcquireResult,
    CheckResult,
    Decision,
    Duration,
    InlineCheck,
    Lease,
    LeaseResult,
    Penalty,
    Policy,
    RateLimitHeaders,
    RateLimitItem,
)

__all__ = [
    "Client",
    "HeldLease",
    "DEFAULT_TIMEOUT",
    "__version__",
    "AcquireResult",
    "CheckResult",
    "Decision",
    "Duration",
    "InlineCheck",
    "Lease",
    "LeaseResult",
    "Penalty",
    "Policy",
    "RateLimitHeaders",
    "RateLimitItem",
]
__all__ += _errors.__all__  # every error, as errors.py lists them
