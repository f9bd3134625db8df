"""What every router of the API shares: its context, the caller, the administrators' routes, the parameters.

A route reaches the service through :class:`ApiContext`, one per app (on
``app.state.api``), taken as the dependency :data:`Api`; no route closes over
the app's making. The caller is :func:`identity` (a dependency): anyone when
the service runs without tokens (a local, single-user service), else the
bearer token's user, checked on the event loop for a static token and in a
worker thread for an OIDC one (its keys may be fetched); 401 otherwise. An
administrators' route is an :class:`AdminRoute`: the caller is authenticated
and must be an administrator before its body is read or validated, so a
non-administrator learns nothing from a 422.

Path parameters are matched whole (a trailing newline is refused) and
within their store columns; integer query parameters take ASCII digits
only (:func:`query_integer`). A request that does not fit its model is
answered 422 by :func:`validation_errors` in the one error model; a job
file's problems name the job's index and clientId.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Callable, Literal

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import Field

from flotilla.service import access, errors
from flotilla.service.auth import Authenticator, Identity, Unauthenticated, may_admin
from flotilla.service.bounds import ID_PATTERN, NODE_NAME_PATTERN, QUERY_INTEGER
from flotilla.service.errors import ApiError, ErrorItem
from flotilla.service.guard import BoundedRoute
from flotilla.service.jobspec import JobFile, field_path, rejections_from_errors
from flotilla.service.logs import PodLogs
from flotilla.service.pending import PendingView
from flotilla.service.roles.status import StatusReader
from flotilla.service.settings import QueueSpec, ServiceSettings
from flotilla.service.store import Store
from flotilla.service.streams import Slots, StreamHubs


@dataclass(frozen=True, eq=False)
class ApiContext:
    """The service as the routes see it: made once per app by ``create_app``."""

    store: Store
    settings: ServiceSettings
    #: The :class:`ServiceLoop` (status and admin endpoints), or None.
    loop: Any
    auth: Authenticator
    #: No auth configured: every caller is an administrator (``serve`` allows it on loopback only).
    open_access: bool
    #: True once the service is stopping (``/v1/health`` answers ``ok: false``; streams end).
    stopping: Callable[[], bool]
    status: StatusReader
    pending: PendingView
    pod_logs: PodLogs
    watch_slots: Slots
    hubs: StreamHubs

    def queue_for(self, name: str, who: Identity, act: bool = True) -> QueueSpec:
        return access.queue_for(self.store, name, who, act)


def context_of(request: Request) -> ApiContext:
    return request.app.state.api


async def api_context(request: Request) -> ApiContext:
    """The app's :class:`ApiContext` (on the event loop: no worker thread for a lookup)."""
    return context_of(request)


Api = Annotated[ApiContext, Depends(api_context)]

bearer = HTTPBearer(auto_error=False, description="a token of auth.tokens, or an OIDC token (auth.oidc)")


async def identity(request: Request,
                   credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> Identity:
    """The caller; 401 without a token that authenticates (anyone, as an administrator, without auth)."""
    api = context_of(request)
    if api.open_access:   # no auth configured: a local, single-user service (serve allows it on loopback only)
        return Identity("anonymous", frozenset(), admin=True)
    who = getattr(request.state, "identity", None)
    if who is None:
        header = f"Bearer {credentials.credentials}" if credentials else None
        try:   # a static token on the event loop; an OIDC token in a thread (its keys may be fetched)
            who = api.auth.verify_quickly(header)
            if who is None:
                who = await run_in_threadpool(api.auth.verify, header)
        except Unauthenticated as exc:
            raise ApiError(401, str(exc), headers={"WWW-Authenticate": "Bearer"}) from None
    return who


def require_admin(who: Identity) -> None:
    if not may_admin(who):
        raise ApiError(403, f"user {who.user!r} is not an administrator")


class AdminRoute(BoundedRoute):
    """An administrators' endpoint: the caller is authenticated (401) and must be an administrator (403)
    before its body is read or validated, so a non-administrator learns nothing from a 422."""

    def get_route_handler(self):
        handler = super().get_route_handler()

        async def admin_first(request: Request):
            require_admin(await identity(request, await bearer(request)))
            return await handler(request)

        return admin_first


class AdminOnly:
    """``@AdminOnly(router).post(path, ...)``: like ``@router.post``, for an :class:`AdminRoute`."""

    def __init__(self, router: APIRouter):
        self.router = router

    def __getattr__(self, method: str):
        def route(path: str, **options):
            def add(endpoint):
                self.router.add_api_route(path, endpoint, methods=[method.upper()],
                                          route_class_override=AdminRoute, **options)
                return endpoint
            return add
        return route


class ReleasingStream(StreamingResponse):
    """A streamed answer that gives its slot back however it ends (even if its body never started)."""

    def __init__(self, content, release, **options):
        super().__init__(content, **options)
        self.release = release

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.release()


JobState = Literal["queued", "leased", "pending", "running", "succeeded", "failed", "preempted", "cancelled"]
ActiveState = Literal["queued", "leased", "pending", "running"]
#: Path parameters, matched whole (a trailing newline is refused) and within their store columns.
QueueName = Annotated[str, Path(pattern=ID_PATTERN, max_length=255, description="a queue's name")]
JobSetId = Annotated[str, Path(pattern=ID_PATTERN, max_length=255, description="a job set's id")]
#: The store's ids are 26 characters, an in-cluster pod's job id its uid's 32 hex digits.
JobId = Annotated[str, Path(pattern=ID_PATTERN, max_length=32, description="a job's id")]
ClusterName = Annotated[str, Path(min_length=1, max_length=255, description="a cluster of the config")]
NodeName = Annotated[str, Path(pattern=NODE_NAME_PATTERN, max_length=253,
                               description="a Kubernetes node name (a DNS-1123 subdomain)")]


def query_integer(description: str, optional: bool = False, **bounds) -> Any:
    """An integer query parameter: ``^-?[0-9]+$`` only (``1.0``, `` 1``, ``1_0`` refused), within ``bounds``."""
    return Annotated[int | None if optional else int, Query(description=description), Field(**bounds), QUERY_INTEGER]


def validation_errors(request: Request, exc: RequestValidationError) -> tuple[str, str, str | None, list[ErrorItem]]:
    """A request that does not fit its model, as (code, message, first field, every problem)."""
    if request.url.path.endswith("/submit"):
        raw = exc.body if isinstance(exc.body, dict) else {}
        fixed = raw if "jobs" in raw else JobFile._single_job_form(raw)
        items = errors.rejection_items(rejections_from_errors(exc.errors(), fixed))
        head, code = "submission rejected, nothing was submitted: ", "rejected"
    else:
        items = []
        for err in exc.errors():
            loc = [p for p in err.get("loc", ()) if p not in ("body", "query", "path", "header")]
            message = err.get("msg", "")
            key = getattr((err.get("ctx") or {}).get("error"), "key", None)   # the config's KeyedValueError
            if key is not None:
                loc, message = [*loc, key], message.removeprefix("Value error, ")
            where = field_path(loc) or None
            items.append(ErrorItem(field=where, message=message, text=f"{where or 'body'}: {message}"))
        head, code = "", "invalid"
    message = head + "; ".join(i.text for i in items[:20]) + (f"; and {len(items) - 20} more" if len(items) > 20 else "")
    return code, message, items[0].field if items else None, items


__all__ = ["ApiContext", "Api", "api_context", "context_of", "bearer", "identity", "require_admin", "AdminRoute",
           "AdminOnly", "ReleasingStream", "JobState", "ActiveState", "QueueName", "JobSetId", "JobId",
           "ClusterName", "NodeName", "query_integer", "validation_errors"]
