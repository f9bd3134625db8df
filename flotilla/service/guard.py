"""What every request passes before any route sees it (an ASGI middleware), and the bounded JSON route.

In this order, each answered in the one error model without reading more
than it must:

0. a NUL in the path or the query string is refused (400): no store column
   can hold one, and PostgreSQL refuses it with an error; so is a path or
   query that is not percent-encoded UTF-8 (422);
1. without tokens (a local, single-user service), only a loopback ``Host``
   header is served: a DNS-rebinding page names its own host (400
   ``bad_host``); a state-changing request from a page of another origin
   is refused (403 ``cross_origin``, the browser's ``Origin`` header); and
   a state-changing API request must say ``Content-Type:
   application/json``, which a page cannot send cross-origin without the
   browser asking first (415);
2. nobody unauthenticated makes the server buffer or parse anything: an
   API request with a body must carry a valid bearer token, and a dashboard
   form (other than logging in or out) a valid login cookie, *before* the
   body is read (401); a body sent anywhere else (no other route takes one)
   is never read;
3. a body over ``server.maxBodySize`` (a dashboard form: over
   :data:`MAX_FORM_BYTES`) is refused with 413: at once when its
   ``Content-Length`` says so, else as soon as the bytes read pass it;
4. an API body must be JSON, a dashboard form URL-encoded (415 otherwise).

Then :class:`BoundedRoute` parses the JSON with :func:`bounds.load_json`
(numbers, depth, NUL, jobs per submission) instead of FastAPI's lax
``json.loads``, in a worker thread, and the dashboard parses its forms
within :data:`MAX_FORM_FIELDS` fields. An unexpected exception is answered
500 here and logged by type and place only (:func:`errors.log_unexpected`).
"""

from __future__ import annotations

import asyncio
import ipaddress
from contextlib import ExitStack
from urllib.parse import urlsplit
from typing import Any, Callable

from fastapi import Request
from fastapi.concurrency import run_in_threadpool
from fastapi.routing import APIRoute
from starlette.datastructures import Headers
from starlette.requests import cookie_parser
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from flotilla.service.auth import Authenticator, Unauthenticated
from flotilla.service.bounds import PIECEWISE_BYTES, VALUES_BEYOND_JOBS, BoundsError, load_json, url_problem
from flotilla.service.collection import full_collections_deferred
from flotilla.service.errors import ApiError, error_response, log_unexpected
from flotilla.service.settings import Limits

#: The JSON API; other paths (the web UI's forms) authenticate and parse their own bodies, within the size limit.
API_PREFIX = "/v1/"
STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
#: Paths served without a token whatever the method.
PUBLIC_PATHS = frozenset({"/v1/health", "/openapi.json", "/docs", "/redoc", "/docs/oauth2-redirect"})
#: The dashboard; its forms are small: a login token, a form token, a priority.
UI_PREFIX = "/ui/"
MAX_FORM_BYTES = 64 * 1024
MAX_FORM_FIELDS = 16
#: The dashboard's login cookie (an HttpOnly cookie holding the user's token).
LOGIN_COOKIE = "flotilla_token"
#: Forms taken without a login: logging in, and logging out (a stale cookie must still log out).
LOGIN_FORMS = frozenset({"/ui/login", "/ui/logout"})
FORM_TYPE = "application/x-www-form-urlencoded"


def is_loopback_host(host: str | None) -> bool:
    """``localhost``, ``127.x.x.x`` or ``[::1]``, with or without a port."""
    if not host:
        return False
    if host.startswith("["):              # [::1] or [::1]:8080
        name = host[1:host.find("]")] if "]" in host else host
    else:                                  # name, name:port, or a bare IPv6 address
        name = host.split(":")[0] if host.count(":") == 1 else host
    name = name.lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _netloc(origin: str) -> str | None:
    """The host and port an ``Origin`` header names, or None for a malformed one (``http://[::1``)."""
    try:
        return urlsplit(origin).netloc
    except ValueError:
        return None


def is_json(content_type: str | None) -> bool:
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


class Guard:
    """The ASGI middleware of the module docstring; sets ``scope["state"]["identity"]`` when it authenticated."""

    def __init__(self, app: ASGIApp, *, authenticator: Authenticator, open_access: bool, limits: Limits):
        self.app = app
        self.auth = authenticator
        self.open_access = open_access
        self.limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            refusal, receive = await self._check(scope, receive)
            if refusal is not None:
                await refusal(scope, receive, send)
                return
            await self.app(scope, receive, tracked_send)
        except Exception as exc:   # anything the routes did not answer: 500, logged without its content
            log_unexpected(exc, scope.get("method", ""), scope.get("path", ""))
            if not started:
                await error_response(500, "internal error (logged by type, without the request's content)")(
                    scope, receive, send)

    async def _check(self, scope: Scope, receive: Receive) -> tuple[Any, Receive]:
        headers = Headers(scope=scope)
        method, path = scope["method"], scope["path"]
        if "\x00" in path or b"%00" in scope.get("query_string", b""):   # no store column can hold a NUL
            return error_response(400, "NUL characters are not allowed in the path or the query"), receive
        if (why := url_problem(scope.get("raw_path"), scope.get("query_string", b""))) is not None:
            return error_response(422, why), receive   # servers would turn the bad bytes into U+FFFD
        api = path.startswith(API_PREFIX)
        if self.open_access:
            if not is_loopback_host(headers.get("host")):
                return error_response(400, "without auth.tokens only loopback Host headers are served "
                                           f"(got {headers.get('host', '')[:100]!r})", code="bad_host"), receive
            origin = headers.get("origin")
            if method in STATE_CHANGING and origin is not None and not is_loopback_host(_netloc(origin)):
                return error_response(403, f"without auth.tokens only loopback pages may change state "
                                           f"(Origin {origin[:100]!r})", code="cross_origin"), receive
            if api and method in STATE_CHANGING and not is_json(headers.get("content-type")):
                return error_response(415, "state-changing requests must send Content-Type: application/json"),\
                    receive
        length_text = headers.get("content-length")
        has_body = bool(headers.get("transfer-encoding")) or (length_text not in (None, "", "0"))
        if not has_body:
            return None, receive
        form = path.startswith(UI_PREFIX)
        if (not api and not form) or path in PUBLIC_PATHS:   # no route there reads a body: it stays unread
            return None, receive
        limit = MAX_FORM_BYTES if form else self.limits.max_body_bytes
        if form and not self.open_access and path not in LOGIN_FORMS:
            token = cookie_parser(headers.get("cookie", "")).get(LOGIN_COOKIE)
            who = await run_in_threadpool(self.auth.authenticate, f"Bearer {token}") if token else None
            if who is None:   # the body stays unread: the connection closes after the answer
                return error_response(401, "log in first (/ui/login): the form's login cookie is missing or no "
                                           "longer valid", headers={"Connection": "close"}), receive
        if form and (headers.get("content-type") or "").split(";", 1)[0].strip().lower() != FORM_TYPE:
            return error_response(415, f"a dashboard form must be sent as {FORM_TYPE}",
                                  headers={"Connection": "close"}), receive
        if api and not self.open_access:
            try:   # off the event loop: an OIDC token may need the provider's keys fetched
                who = await run_in_threadpool(self.auth.verify, headers.get("authorization"))
            except Unauthenticated as exc:   # the body stays unread: the connection closes after the answer
                return error_response(401, str(exc),
                                      headers={"WWW-Authenticate": "Bearer", "Connection": "close"}), receive
            scope.setdefault("state", {})["identity"] = who
        if api and not is_json(headers.get("content-type")):
            return error_response(415, "the body must be JSON (Content-Type: application/json)",
                                  headers={"Connection": "close"}), receive
        if length_text and length_text.isdigit() and int(length_text) > limit:
            return self._too_large(int(length_text), form), receive
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None, _replay(b"", message)
            body += message.get("body", b"")
            if len(body) > limit:
                return self._too_large(None, form), receive
            if not message.get("more_body", False):
                break
        return None, _replay(bytes(body), None)

    def _too_large(self, length: int | None, form: bool = False) -> Any:
        size = f"{length} bytes" if length is not None else "more"
        limit = f"{MAX_FORM_BYTES} bytes (a dashboard form)" if form else \
            f"{self.limits.max_body_bytes} bytes (server.maxBodySize)"
        return error_response(413, f"body of {size}; at most {limit}", headers={"Connection": "close"})


class HeadAsGet:
    """ASGI middleware: ``HEAD`` is answered wherever ``GET`` is, with GET's status and headers and no body.

    The route sees a GET; once its answer starts, it is told the client left,
    so a stream (a followed log, a job set's events) ends at once instead of
    running with nobody to read it.
    """

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return
        started = asyncio.Event()
        asked = False

        async def head_receive() -> Message:
            nonlocal asked
            if not asked:
                asked = True
                return {"type": "http.request", "body": b"", "more_body": False}
            await started.wait()
            return {"type": "http.disconnect"}

        async def head_send(message: Message) -> None:
            if message["type"] == "http.response.start" and not started.is_set():
                await send(message)
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                started.set()
            elif message["type"] != "http.response.body":
                await send(message)

        # spec_version 2.3: a streaming answer listens for the disconnect above rather than for a failed send.
        get = {**scope, "method": "GET", "asgi": {**scope.get("asgi", {}), "spec_version": "2.3"}}
        await self.app(get, head_receive, head_send)


def _replay(body: bytes, disconnect: Message | None) -> Receive:
    """A ``receive`` that gives the buffered body once, then waits as the server's would."""
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if disconnect is not None:
            return disconnect
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return {"type": "http.disconnect"}

    return receive


class _BoundedRequest(Request):
    #: The route's ``validate_body`` (see :class:`BoundedRoute`), or None.
    validate_body: Callable[[Request, Any], Any] | None = None
    #: Ends the deferral of full collections this request's large body began (see :class:`BoundedRoute`).
    handled: ExitStack | None = None

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            limits: Limits = self.app.state.limits
            body = await self.body()
            if len(body) > PIECEWISE_BYTES and self.handled is not None:
                self.handled.enter_context(full_collections_deferred())
            # A body the route validates in one step (any but a submission's) holds a bounded number of values.
            most = None if self.validate_body is not None else limits.max_jobs + VALUES_BEYOND_JOBS
            try:   # off the event loop: parsing a large body is CPU work
                value = await run_in_threadpool(load_json, body, limits, most)
            except BoundsError as exc:
                raise ApiError(exc.status, exc.message, field=exc.field) from None
            if self.validate_body is not None:
                try:
                    value = await run_in_threadpool(self.validate_body, self, value)
                except BoundsError as exc:
                    raise ApiError(exc.status, exc.message, field=exc.field) from None
            self._json = value
        return self._json


class BoundedRoute(APIRoute):
    """A route whose JSON body is parsed by :func:`bounds.load_json` (the app's ``state.limits``) in a thread.

    ``validate_body(request, value)``, when set, turns the parsed body into
    the route's body model in that thread too (raising :class:`ApiError` as
    the route would answer); FastAPI then takes the model as it is, so a
    large body is never validated on the event loop. A route without it
    validates its body in one C call, so its body holds at most
    ``server.maxJobsPerSubmission`` + :data:`bounds.VALUES_BEYOND_JOBS`
    values (413 past them). From the moment a body
    over :data:`bounds.PIECEWISE_BYTES` is read until the route has
    answered, full garbage collections wait
    (:func:`collection.full_collections_deferred`): one pass over its
    objects would hold the interpreter lock for hundreds of milliseconds.
    """

    validate_body: Callable[[Request, Any], Any] | None = None

    def get_route_handler(self) -> Callable:
        handler = super().get_route_handler()

        async def bounded(request: Request) -> Any:
            bounded_request = _BoundedRequest(request.scope, request.receive)
            bounded_request.validate_body = self.validate_body
            with ExitStack() as bounded_request.handled:
                return await handler(bounded_request)

        return bounded


__all__ = ["Guard", "BoundedRoute", "HeadAsGet", "LOGIN_COOKIE", "MAX_FORM_BYTES", "MAX_FORM_FIELDS",
           "PUBLIC_PATHS", "is_loopback_host", "is_json"]
