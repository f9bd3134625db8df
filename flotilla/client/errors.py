"""The client's exceptions: one class per answer the API gives to a refused request, each carrying the API's error
body (``{"error": {"code", "message", "field", "errors"}}``, see ``flotilla/service/errors.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ErrorItem:
    """One problem of a refused request: the field, what was wrong, and for submissions which job."""

    message: str
    text: str
    field: str | None = None
    index: int | None = None
    client_id: str | None = None


@dataclass(frozen=True)
class ErrorBody:
    """The API's error body: a stable ``code``, a one-line ``message``, the first offending ``field``, and every
    problem in ``errors`` (a rejected submission lists each job's)."""

    code: str
    message: str
    field: str | None = None
    errors: tuple[ErrorItem, ...] = ()

    @classmethod
    def parse(cls, status: int, body: Any, text: str) -> ErrorBody:
        """The body as the API sent it; an answer without the error model (a proxy's page) keeps its text."""
        error = body.get("error") if isinstance(body, dict) else None
        if not isinstance(error, dict):
            return cls(code=f"http_{status}", message=text.strip()[:500] or f"HTTP {status}")
        items = tuple(ErrorItem(message=str(e.get("message", "")), text=str(e.get("text", e.get("message", ""))),
                                field=e.get("field"), index=e.get("index"), client_id=e.get("clientId"))
                      for e in error.get("errors") or [] if isinstance(e, dict))
        return cls(code=str(error.get("code", f"http_{status}")), message=str(error.get("message", "")),
                   field=error.get("field"), errors=items)


class FlotillaError(Exception):
    """Every error the client raises."""


class ConnectionFailed(FlotillaError):
    """The server could not be reached (or a watch stream could not be resumed)."""


class ApiError(FlotillaError):
    """The server answered with an error status; ``error`` is its error body, ``body`` the JSON as sent."""

    status: int = 0

    def __init__(self, status: int, error: ErrorBody, body: Any = None):
        super().__init__(f"{status}: {error.message}")
        self.status = status
        self.error = error
        self.body = body

    @property
    def code(self) -> str:
        return self.error.code

    @property
    def message(self) -> str:
        return self.error.message

    @property
    def field(self) -> str | None:
        return self.error.field

    @property
    def errors(self) -> tuple[ErrorItem, ...]:
        return self.error.errors


class BadRequest(ApiError):
    """400: a malformed request."""


class Unauthorized(ApiError):
    """401: no valid bearer token."""


class Forbidden(ApiError):
    """403: the user may not act in this queue, or is not an administrator."""


class NotFound(ApiError):
    """404: no such queue or job, or one the user may not see."""


class Conflict(ApiError):
    """409: the queue exists already, or still has active jobs."""


class PayloadTooLarge(ApiError):
    """413: the body or the submission is past the server's limits."""


class Invalid(ApiError):
    """422: an invalid request or a rejected submission; ``errors`` lists every problem, nothing was stored."""


class ServerError(ApiError):
    """5xx: the server failed (logged there; nothing half-written)."""


_BY_STATUS: dict[int, type[ApiError]] = {400: BadRequest, 401: Unauthorized, 403: Forbidden, 404: NotFound,
                                         409: Conflict, 413: PayloadTooLarge, 422: Invalid}


def error_for(status: int, body: Any, text: str) -> ApiError:
    """The exception for an error answer: its class by status (:class:`ServerError` for 5xx)."""
    cls = _BY_STATUS.get(status) or (ServerError if status >= 500 else ApiError)
    error = cls(status, ErrorBody.parse(status, body, text), body)
    error.status = status
    return error


__all__ = ["ApiError", "BadRequest", "Conflict", "ConnectionFailed", "ErrorBody", "ErrorItem", "FlotillaError",
           "Forbidden", "Invalid", "NotFound", "PayloadTooLarge", "ServerError", "Unauthorized", "error_for"]
