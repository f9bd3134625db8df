"""The one error model of the API: every 4xx and 5xx answer has the same body.

::

    {"error": {"code": "not_found", "message": "queue 'X' does not exist", "field": null, "errors": []}}

``code`` is stable and machine-readable (the table :data:`CODES`),
``message`` is one line for a person, ``field`` is the path of the first
offending field when there is one (``jobs[2].podSpec.containers``), and
``errors`` lists every problem of a refused submission or request, each
naming the job by ``index`` and ``clientId`` where it applies. The model
is declared in the OpenAPI document for every status code the API can
answer, so what a client reads is what the document says.

Nothing here logs a request's content: an unexpected exception is logged
by its type and where it was raised, never by its message (which may carry
SQL parameters, tokens or annotations).
"""

from __future__ import annotations

import traceback
from typing import Any, Iterator, Sequence

import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from flotilla.service.store import Rejection, StoreError, SubmissionRejected

log = structlog.get_logger("flotilla.service")

#: HTTP status -> the error code every answer with that status carries (unless a more precise one is given).
CODES: dict[int, str] = {
    400: "bad_request", 401: "unauthenticated", 403: "forbidden", 404: "not_found",
    405: "method_not_allowed", 409: "conflict", 410: "gone", 413: "too_large", 415: "unsupported_media_type",
    422: "invalid", 429: "too_many_requests", 500: "internal", 502: "bad_gateway", 503: "unavailable",
}

#: The most problems one answer lists (the message says how many more there were).
MAX_LISTED = 200


class ErrorItem(BaseModel):
    """One problem: the field, what was wrong, and for submissions which job (index, clientId)."""

    field: str | None = None
    message: str
    index: int | None = None
    clientId: str | None = None
    text: str


class ErrorInfo(BaseModel):
    code: str
    message: str
    field: str | None = None
    errors: list[ErrorItem] = []


class ErrorResponse(BaseModel):
    """Every error answer of the API."""

    error: ErrorInfo


_DESCRIPTIONS = {
    400: "Malformed request (bad Host header in local mode, unreadable body)",
    401: "No valid bearer token", 403: "Not allowed in this queue, or not an administrator",
    404: "No such queue or job (or one the user may not see)", 405: "Method not allowed here (see Allow)",
    409: "Conflict (queue exists; queue has active jobs)", 413: "Body or submission too large",
    415: "State-changing requests must send application/json",
    422: "Invalid request or rejected submission (every problem listed, nothing stored)",
    500: "Internal error (logged; nothing half-written)",
}

#: For ``FastAPI(responses=...)``: every error status, with the error model, on every operation.
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorResponse, "description": text} for status, text in _DESCRIPTIONS.items()}


class ApiError(StarletteHTTPException):
    """An answer other than success, raised anywhere in the API and rendered by :func:`install`.

    An HTTPException, so that FastAPI lets it through when it is raised while the body is read.
    """

    def __init__(self, status: int, message: str, *, code: str | None = None, field: str | None = None,
                 errors: Sequence[ErrorItem] = (), headers: dict[str, str] | None = None):
        super().__init__(status, message, headers)
        self.status = status
        self.code = code or CODES.get(status, "error")
        self.message = message
        self.field = field
        self.errors = list(errors)
        self.headers = headers


def error_body(status: int, message: str, *, code: str | None = None, field: str | None = None,
               errors: Sequence[ErrorItem] = ()) -> dict:
    items = [e.model_dump() for e in errors[:MAX_LISTED]]
    return {"error": {"code": code or CODES.get(status, "error"), "message": message, "field": field,
                      "errors": items}}


def error_response(status: int, message: str, *, code: str | None = None, field: str | None = None,
                   errors: Sequence[ErrorItem] = (), headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(error_body(status, message, code=code, field=field, errors=errors), status_code=status,
                        headers=headers)


def rejection_items(rejections: Sequence[Rejection]) -> list[ErrorItem]:
    return [ErrorItem(field=(f"jobs[{r.index}]." if r.index is not None else "") + r.field if r.field else None,
                      message=r.message, index=r.index, clientId=r.client_id, text=r.text())
            for r in rejections]


def _routes(routes) -> Iterator:
    """Every route, an included router's too (FastAPI may keep an included router whole, as one route).

    The app's routers are included without a prefix: their routes' paths are the paths served.
    """
    for route in routes:
        inner = getattr(route, "original_router", None)
        if inner is not None:
            yield from _routes(inner.routes)
        else:
            yield route


def _allowed_methods(app: FastAPI, path: str) -> list[str]:
    """Every method some route serves at ``path``: Starlette's 405 names only the first matching route's."""
    methods: set[str] = set()
    for route in _routes(app.router.routes):
        regex, route_methods = getattr(route, "path_regex", None), getattr(route, "methods", None)
        if regex is not None and route_methods and regex.match(path):
            methods |= set(route_methods)
    return sorted(methods)


def install(app: FastAPI, validation_errors) -> None:
    """Render every refusal in the one model; ``validation_errors(request, exc)`` -> (code, message, field, items)."""

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError):
        return error_response(exc.status, exc.message, code=exc.code, field=exc.field, errors=exc.errors,
                              headers=exc.headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException):
        headers = dict(exc.headers or {})
        message = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        if exc.status_code == 405:
            headers["Allow"] = ", ".join(_allowed_methods(app, request.url.path))
            message = f"method {request.method} is not allowed on {request.url.path}"
        elif exc.status_code == 404 and message == "Not Found":
            message = f"no such endpoint: {request.url.path}"
        return error_response(exc.status_code, message, headers=headers or None)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError):
        code, message, field, items = validation_errors(request, exc)
        return error_response(422, message, code=code, field=field, errors=items)

    @app.exception_handler(StoreError)
    async def _store_error(request: Request, exc: StoreError):
        if isinstance(exc, SubmissionRejected):
            items = rejection_items(exc.rejections)
            return error_response(exc.status, str(exc), code="rejected", field=items[0].field if items else None,
                                  errors=items)
        return error_response(exc.status, str(exc))


def log_unexpected(exc: BaseException, method: str, path: str) -> None:
    """Log an unexpected exception by its type and where it was raised, never by its message."""
    frame = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    log.error("api.internal_error", method=method, path=path, error=type(exc).__name__,
              where=f"{frame.filename}:{frame.lineno}" if frame else None)


__all__ = ["ApiError", "ErrorItem", "ErrorInfo", "ErrorResponse", "ERROR_RESPONSES", "CODES", "error_body",
           "error_response", "install", "log_unexpected", "rejection_items"]
