"""The submission API (FastAPI; the OpenAPI schema is served at ``/openapi.json``).

Status codes: 200 on success; 401 without a valid bearer token; 403 when
the user may not do this in this queue (see :mod:`flotilla.service.auth`);
404 for an unknown queue, or a job that does not exist *or that the user
may not see* (the two are indistinguishable, so nothing leaks about other
users' jobs); 409 for a conflict (queue exists, queue still has jobs); 422
for a malformed request or a rejected submission, with the field path and,
for job files, the job's index and clientId.

Endpoints (all under ``/v1``)::

    POST   /submit                                  job file (JSON) -> {"jobs": [{id, clientId, existing}]}
    POST   /cancel                                  {queue, jobSetId?, jobIds?, states?}
    POST   /reprioritize                            {queue, jobSetId?, jobIds?, priority}
    GET    /jobs/{id}                               a job's record (queued: its reason and position)
    GET    /jobs/{id}/logs                          ?pod=N&container=NAME&tail=N&follow=1: a container's log (text)
    GET    /queues/{q}/jobsets/{js}/jobs            the job set's jobs
    GET    /queues/{q}/jobsets/{js}/events          ?after=ID&follow=1&format=jsonl|sse (Last-Event-ID honoured)
    GET    /queues                                  every queue
    POST   /queues                                  create (admins)
    GET    /queues/{q}                              describe: settings and job counts by state
    GET    /queues/{q}/pending                      ?limit=N: the queue's head in scheduling order, with reasons
    PUT    /queues/{q}                              update (admins)
    DELETE /queues/{q}                              delete (admins); refused while it has active jobs
    GET    /health                                  no token needed
    GET    /status                                  last cycle, clusters
    GET    /wishlist                                node templates: the waiting jobs each would unblock
    POST   /queues/{q}/cordon|uncordon              admins: the queue takes jobs, schedules none new (or again)
    GET    /nodes                                   draining nodes
    POST   /nodes/{cluster}/{node}/drain|uncordon   admins
    POST   /admin/clusters/{name}/stop|start        admins, only with `serve --admin-endpoints` (tests, demos)

One router per resource, each module stating its rules: :mod:`.jobs`
(submit, cancel, reprioritize, a job's record), :mod:`.logs`,
:mod:`.jobsets` (a job set's jobs and events), :mod:`.queues`,
:mod:`.nodes`, :mod:`.service` (health, status, wishlist) and :mod:`.admin`;
what they share (the :class:`~.shared.ApiContext` they reach the service
through, the caller's identity, the administrators' routes, parameter types
and the 422 mapping) is :mod:`.shared`. :func:`create_app` makes the
context and composes the routers.
"""

from __future__ import annotations

from fastapi import FastAPI

from flotilla import __version__
from flotilla.service import errors
from flotilla.service.api import admin, jobs, jobsets, logs, nodes, queues, service
from flotilla.service.api.jobs import CancelBody, ReprioritizeBody
from flotilla.service.api.queues import QueueBody, QueueUpdateBody
from flotilla.service.api.shared import ApiContext, validation_errors
from flotilla.service.auth import Authenticator
from flotilla.service.guard import BoundedRoute, Guard, HeadAsGet
from flotilla.service.logs import PodLogs
from flotilla.service.openapi import state_input_rules
from flotilla.service.pending import PendingView
from flotilla.service.roles.status import StatusReader
from flotilla.service.settings import ServiceSettings
from flotilla.service.store import Store
from flotilla.service.streams import Slots, StreamHubs
from flotilla.service.ui.docs import mount_docs
from flotilla.service.ui.protect import SecurityHeaders

#: The routers, in the order their paths are matched and listed in the OpenAPI document.
ROUTERS = (jobs.router, logs.router, jobsets.router, queues.router, nodes.router, service.router)


def create_app(store: Store, settings: ServiceSettings, loop=None, *, admin_endpoints: bool = False,
               authenticator: Authenticator | None = None, shutting_down=None) -> FastAPI:
    """The API on ``store``; ``loop`` (a :class:`ServiceLoop`) is optional (status and admin endpoints)."""
    auth = authenticator or Authenticator.from_settings(settings)
    open_access = settings.open_access
    # /docs is Swagger UI from this server's own files (no CDN); ReDoc, which needs one, is not served.
    app = FastAPI(title="Flotilla", version=__version__, responses=errors.ERROR_RESPONSES, docs_url=None,
                  redoc_url=None,
                  description="Submit, cancel and watch batch jobs in Flotilla's queues. Every error answer is "
                              "an ErrorResponse: {\"error\": {\"code\", \"message\", \"field\", \"errors\"}}.")
    app.router.route_class = BoundedRoute
    app.add_middleware(Guard, authenticator=auth, open_access=open_access, limits=settings.limits)
    app.add_middleware(HeadAsGet)         # HEAD wherever GET is, before the Guard (which sees a GET)
    app.add_middleware(SecurityHeaders)   # outermost: every answer carries them, the Guard's refusals too
    mount_docs(app)
    errors.install(app, validation_errors)

    def stopping() -> bool:
        return bool(shutting_down is not None and shutting_down.is_set())

    status = StatusReader(store)
    api = ApiContext(store=store, settings=settings, loop=loop, auth=auth, open_access=open_access,
                     stopping=stopping, status=status, pending=PendingView(store, status.get),
                     pod_logs=PodLogs(settings, loop),
                     watch_slots=Slots("watch streams", settings.streams.watch_per_user,
                                       "server.streams.watchPerUser"),
                     hubs=StreamHubs(store, auth, open_access, stopping))
    app.state.api = api
    app.state.store = store
    app.state.loop = loop
    app.state.limits = settings.limits
    app.state.pod_logs = api.pod_logs
    app.state.watch_slots = api.watch_slots
    app.state.stream_hubs = api.hubs
    for router in ROUTERS + ((admin.router,) if admin_endpoints else ()):
        app.include_router(router)

    make_schema = app.openapi

    def openapi() -> dict:
        if app.openapi_schema is None:
            app.openapi_schema = state_input_rules(make_schema())
        return app.openapi_schema

    app.openapi = openapi
    return app


__all__ = ["create_app", "QueueBody", "QueueUpdateBody", "CancelBody", "ReprioritizeBody"]
