"""Exceptions raised by the Warren SDK.

Every error the server reports has the shape
``{"error": {"code": "...", "message": "..."}}``; the code picks the subclass.
"""

from __future__ import annotations

import json
from typing import Optional


class WarrenError(Exception):
    """Base class of every Warren SDK error.

    Attributes:
        code: the server's error code (``not_found``, ``invalid``, ...).
        message: the server's human-readable message.
        status: the HTTP status, or ``None`` when no response was received.
    """

    default_code = "internal"

    def __init__(self, code: Optional[str] = None, message: str = "",
                 status: Optional[int] = None):
        self.code = code or self.default_code
        self.message = message
        self.status = status
        super().__init__(code, message, status)

    def __str__(self) -> str:
        s = f"{self.code}: {self.message}" if self.message else str(self.code)
        if self.status is not None:
            s += f" (HTTP {self.status})"
        return s

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(code={self.code!r}, "
                f"message={self.message!r}, status={self.status!r})")


class NotFound(WarrenError):
    default_code = "not_found"


class InvalidRequest(WarrenError):
    default_code = "invalid"


class Conflict(WarrenError):
    default_code = "conflict"


class QuotaExceeded(WarrenError):
    default_code = "quota"


class Unauthorized(WarrenError):
    """Raised for both ``unauthorized`` (401) and ``forbidden`` (403)."""
    default_code = "unauthorized"


class Forbidden(Unauthorized):
    default_code = "forbidden"


class Unavailable(WarrenError):
    """The server said ``unavailable``, or it could not be reached at all."""
    default_code = "unavailable"


class InternalError(WarrenError):
    default_code = "internal"


_BY_CODE = {
    "not_found": NotFound,
    "invalid": InvalidRequest,
    "conflict": Conflict,
    "quota": QuotaExceeded,
    "unauthorized": Unauthorized,
    "forbidden": Forbidden,
    "unavailable": Unavailable,
    "internal": InternalError,
}

_CODE_BY_STATUS = {
    400: "invalid",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "invalid",
    409: "conflict",
    411: "invalid",
    413: "invalid",
    415: "invalid",
    422: "invalid",
    429: "quota",
    502: "unavailable",
    503: "unavailable",
    504: "unavailable",
}


def error_from_response(status: int, body: bytes) -> WarrenError:
    """Build the right exception from an HTTP error status and body."""
    code = None
    message = ""
    try:
        doc = json.loads(body.decode("utf-8", "replace")) if body else None
    except ValueError:
        doc = None
    if isinstance(doc, dict) and isinstance(doc.get("error"), dict):
        err = doc["error"]
        code = err.get("code") if isinstance(err.get("code"), str) else None
        msg = err.get("message")
        message = msg if isinstance(msg, str) else ("" if msg is None else str(msg))
    elif body:
        message = body.decode("utf-8", "replace").strip()[:500]
    if not code:
        code = _CODE_BY_STATUS.get(status, "internal" if status >= 500 else "invalid")
    if not message:
        message = f"HTTP {status}"
    cls = _BY_CODE.get(code)
    if cls is None:
        # An unknown code: fall back on the status to pick a sensible class.
        cls = _BY_CODE.get(_CODE_BY_STATUS.get(status, ""),
                           InternalError if status >= 500 else WarrenError)
    return cls(code, message, status)
