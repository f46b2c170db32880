"""The errors of Sluice's client: every answer that is neither a result nor a
limit reached, and no answer at all.

A limit reached is never an error: ``check`` and ``acquire_lease`` answer a
``429`` with a result whose ``allowed`` is false, and ``acquire`` a refusal
with ``granted`` false. The one exception is the ``lease`` context manager,
whose ``with`` body cannot be skipped: it raises :class:`LeaseRefused`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Optional

if TYPE_CHECKING:  # pragma: no cover
    from .models import LeaseResult

__all__ = [
    "SluiceError",
    "BadRequest",
    "Unauthorized",
    "Forbidden",
    "NotFound",
    "Conflict",
    "Unavailable",
    "ConnectionFailed",
    "Timeout",
    "LeaseRefused",
]


class SluiceError(Exception):
    """An answer of the server that is not a result, or no answer.

    Attributes:
        status: the HTTP status (400, 401, 403, 404, 409, 413, 503...);
            0 when no answer came back.
        code: the error body's ``error``: ``invalid_request``,
            ``unauthorized``, ``forbidden``, ``not_found``, ``conflict``,
            ``unavailable``, ``internal``...; ``network`` or ``timeout``
            when no answer came back.
        message: the server's message.
        field: on a 400 or 413, the field at fault (``key.user``,
            ``checks[0].policy.limit``, ``hitz``); else None.
        retry_after: the ``Retry-After`` header in seconds, when sent (503).
        body: the whole error body as the server sent it ({} when none).
    """

    status: int
    code: str
    message: str
    field: Optional[str]
    retry_after: Optional[float]
    body: Dict[str, Any]

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        field: Optional[str] = None,
        retry_after: Optional[float] = None,
        body: Optional[Dict[str, Any]] = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.retry_after = retry_after
        self.body = dict(body) if body is not None else {}

    def __repr__(self) -> str:
        return "{}(status={!r}, code={!r}, field={!r}, message={!r})".format(
            type(self).__name__, self.status, self.code, self.field, self.message
        )


class BadRequest(SluiceError):
    """400 (or 413, a body too large): the request is wrong; ``field`` names where."""


class Unauthorized(SluiceError):
    """401: the API key is missing or unknown."""


class Forbidden(SluiceError):
    """403: the key does not reach that tenant, or the route is the admin's."""


class NotFound(SluiceError):
    """404: an unknown tenant, upstream or route, or a lease released or expired."""


class Conflict(SluiceError):
    """409: a tenant id taken, or a tenant's version changed."""


class Unavailable(SluiceError):
    """503 (or another 5xx): the server or its store could not answer now."""


class ConnectionFailed(SluiceError, ConnectionError):
    """No answer: the server could not be reached or dropped the connection.
    ``status`` is 0 and ``code`` ``network``; the cause is ``__cause__``."""


class Timeout(SluiceError, TimeoutError):
    """No answer within the call's timeout. ``status`` is 0 and ``code``
    ``timeout``; it is a ``TimeoutError`` too."""


class LeaseRefused(SluiceError):
    """Raised by the ``lease`` context manager when the policy's units are
    all held (the server's 429). ``result`` is the refusal, ``retry_after``
    its seconds."""

    result: "LeaseResult"

    def __init__(self, result: "LeaseResult") -> None:
        super().__init__(
            429,
            "limit_reached",
            result.message or "the units of {!r} are all held".format(result.policy),
            retry_after=result.retry_after,
        )
        self.result = result


_BY_STATUS = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: BadRequest,
}


def error_for(
    status: int,
    body: Optional[Dict[str, Any]],
    fallback: str,
    retry_after: Optional[float],
) -> SluiceError:
    """The error of an answer: the server's body when it sent one, else one
    made of the status and ``fallback`` (a proxy's page, say)."""
    cls = _BY_STATUS.get(status)
    if cls is None:
        cls = Unavailable if status >= 500 else SluiceError
    if body is not None and isinstance(body.get("error"), str):
        message = body.get("message")
        field = body.get("field")
        return cls(
            status,
            body["error"],
            message if isinstance(message, str) else body["error"],
            field=field if isinstance(field, str) else None,
            retry_after=retry_after,
            body=body,
        )
    return cls(status, "unavailable" if status >= 500 else "internal", fallback, retry_after=retry_after)
