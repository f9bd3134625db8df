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
    POST   /admin/clusters/{name}/stop|start        admins, only with `serve --admin-endpoints` (tests, demos)
"""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, Header, Path, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from flotilla import __version__
from flotilla.config.models import QueueConfig
from flotilla.service import access, errors
from flotilla.service.auth import Authenticator, Identity, Unauthenticated, may_act, may_admin
from flotilla.service.bounds import (ID_PATTERN, INT64_MAX, NODE_NAME_PATTERN, PRIORITY_MAX,
                                     PRIORITY_MIN, QUERY_INTEGER, StrictFloat, StrictInt)
from flotilla.service.errors import ApiError, ErrorItem
from flotilla.service.guard import BoundedRoute, Guard, HeadAsGet
from flotilla.service.openapi import QueuePending, state_input_rules
from flotilla.service.pending import DEFAULT_LIMIT, HEAD_MAX, PendingView
from flotilla.service.placement import placement_of, queue_parents
from flotilla.service.jobspec import (JobFile, field_path, job_file_in_steps, rejections_from_errors,
                                      validate_jobs)
from flotilla.service.logs import CONTAINER_PATTERN, LOG_RESPONSES, MAX_TAIL, PodLogs
from flotilla.service.settings import DEFAULT_LIMITS, QueueSpec, ServiceSettings, rule_dicts
from flotilla.service.roles.status import StatusReader
from flotilla.service.ui.docs import mount_docs
from flotilla.service.ui.protect import SecurityHeaders
from flotilla.service.store import Store
from flotilla.service.streams import BATCH, Slots, StreamHubs

#: A stream with nothing to send for this long sends an empty line (a comment in server-sent events).
KEEPALIVE_SECONDS = 15.0


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
Id = Field(pattern=ID_PATTERN, max_length=255)
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


#: A resource name (Kubernetes' qualified name) as JSON Schema states it: a limit's key.
RESOURCE_NAME_SCHEMA = {"maxLength": 317, "pattern": r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                                                     r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"}
#: ``Last-Event-ID``: an event id as the stream wrote it (ASCII digits; past 64 bits it means the newest).
#: A string in the schema (not "string or null": a header has no null), absent when not sent.
LastEventId = Annotated[str, Header(pattern=r"^[0-9]{1,19}$")]


class QueueBody(QueueConfig):
    """A queue as the API takes it: the config's queue, with a name safe for URLs."""

    name: str = Field(min_length=1, max_length=255, pattern=ID_PATTERN)
    #: A JSON number (not a string or a boolean), as the schema says.
    weight: StrictFloat = Field(1.0, gt=0)
    #: Fractions of the pool per resource name, stated in the schema as the config's validator checks them.
    limits: dict[str, Annotated[StrictFloat, Field(gt=0, le=1)]] = Field(
        default_factory=dict, json_schema_extra={"propertyNames": RESOURCE_NAME_SCHEMA})
    #: Hierarchies come from the config file; a queue made through the API is top-level (a parent is refused).
    parent: None = Field(None, description="always null: parent queues are set in the config file")
    #: Likewise a queue's own floor under preemption to fair share (the service keeps none for API queues).
    protected_fraction_of_fair_share: None = Field(
        None, alias="protectedFractionOfFairShare",
        description="always null: a queue's own protected fraction of fair share is set in the config file")

    def spec(self) -> QueueSpec:
        return self.spec_for(self.name)

    def spec_for(self, name: str) -> QueueSpec:
        return QueueSpec(name, self.weight, dict(self.limits), tuple(self.owners), tuple(self.group_owners),
                         tuple(self.namespaces), retry_policy=rule_dicts(self.retry_policy))


class QueueUpdateBody(QueueBody):
    """A queue's new settings; the path names the queue, so the body need not (readOnly: clients leave it out)."""

    name: str | None = Field(None, min_length=1, max_length=255, pattern=ID_PATTERN,
                             description="the queue's name: the path's; when sent, it must equal the path's",
                             json_schema_extra={"readOnly": True})


def _one_of_required(*names: str) -> dict:
    """JSON Schema for "at least one of these fields", so the document states what the handler requires."""
    return {"anyOf": [{"required": [name]} for name in names]}


class CancelBody(BaseModel):
    """Which jobs to cancel: at least one of jobSetId, jobIds, states; an empty list is refused, not "all"."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_one_of_required("jobSetId", "jobIds", "states"))
    queue: str = Field(min_length=1, max_length=255)
    # Absent means "not a filter"; null is refused (the schema says string), so anyOf-required means what it says.
    jobSetId: str = Field(None, min_length=1, max_length=255)
    jobIds: list[str] = Field(None, min_length=1, max_length=DEFAULT_LIMITS.max_jobs)
    states: list[ActiveState] = Field(None, min_length=1)


class ReprioritizeBody(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra=_one_of_required("jobSetId", "jobIds"))
    queue: str = Field(min_length=1, max_length=255)
    jobSetId: str = Field(None, min_length=1, max_length=255)
    jobIds: list[str] = Field(None, min_length=1, max_length=DEFAULT_LIMITS.max_jobs)
    priority: StrictInt = Field(ge=PRIORITY_MIN, le=PRIORITY_MAX)


def _validation_errors(request: Request, exc: RequestValidationError) -> tuple[str, str, str | None, list[ErrorItem]]:
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
    app.state.store = store
    app.state.loop = loop
    app.state.limits = settings.limits
    app.add_middleware(Guard, authenticator=auth, open_access=open_access, limits=settings.limits)
    app.add_middleware(HeadAsGet)         # HEAD wherever GET is, before the Guard (which sees a GET)
    app.add_middleware(SecurityHeaders)   # outermost: every answer carries them, the Guard's refusals too
    mount_docs(app)
    errors.install(app, _validation_errors)

    def stopping() -> bool:
        return bool(shutting_down is not None and shutting_down.is_set())

    bearer = HTTPBearer(auto_error=False, description="a token of auth.tokens, or an OIDC token (auth.oidc)")

    async def identity(request: Request,
                       credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> Identity:
        if open_access:   # no auth configured: a local, single-user service (serve allows it on loopback only)
            return Identity("anonymous", frozenset(), admin=True)
        who = getattr(request.state, "identity", None)
        if who is None:
            header = f"Bearer {credentials.credentials}" if credentials else None
            try:   # a static token on the event loop; an OIDC token in a thread (its keys may be fetched)
                who = auth.verify_quickly(header)
                if who is None:
                    who = await run_in_threadpool(auth.verify, header)
            except Unauthenticated as exc:
                raise ApiError(401, str(exc), headers={"WWW-Authenticate": "Bearer"}) from None
        return who

    def queue_for(name: str, who: Identity, act: bool = True) -> QueueSpec:
        return access.queue_for(store, name, who, act)

    status_reader = StatusReader(store)

    def admin(who: Identity) -> None:
        if not may_admin(who):
            raise ApiError(403, f"user {who.user!r} is not an administrator")

    class AdminRoute(BoundedRoute):
        """An administrators' endpoint: the caller is authenticated (401) and must be an administrator (403)
        before its body is read or validated, so a non-administrator learns nothing from a 422."""

        def get_route_handler(self):
            handler = super().get_route_handler()

            async def admin_first(request: Request):
                admin(await identity(request, await bearer(request)))
                return await handler(request)

            return admin_first

    class AdminOnly:
        """``@admin_only.post(path, ...)``: like ``@app.post``, for an :class:`AdminRoute`."""

        def __getattr__(self, method: str):
            def route(path: str, **options):
                def add(endpoint):
                    app.router.add_api_route(path, endpoint, methods=[method.upper()],
                                             route_class_override=AdminRoute, **options)
                    return endpoint
                return add
            return route

    admin_only = AdminOnly()

    # -- jobs ------------------------------------------------------------------------
    @app.post("/v1/submit", tags=["jobs"], summary="Submit a job file (all or nothing)")
    def submit(body: JobFile, who: Identity = Depends(identity)) -> dict:
        queue = store.get_queue(body.queue)
        if queue is None:
            raise ApiError(404, f"queue {body.queue!r} does not exist", field="queue")
        if not may_act(who, queue):
            raise ApiError(403, f"user {who.user!r} may not submit to queue {body.queue!r}")
        if any(q.parent == body.queue for q in settings.queues):
            raise ApiError(422, f"queue {body.queue!r} has child queues; only leaf queues hold jobs", field="queue")
        new_jobs = validate_jobs(body, settings)
        done = store.submit(body.queue, body.jobSetId, who.user, new_jobs)
        return {"jobs": [{"id": s.id, "clientId": s.client_id, "existing": s.existing} for s in done]}

    def validated_job_file(request: Request, raw: Any) -> JobFile:
        """The body as a :class:`JobFile` (in a worker thread), refused as FastAPI would refuse it."""
        try:
            return job_file_in_steps(raw)
        except ValidationError as exc:
            errors = [{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False)]
            code, message, field, items = _validation_errors(request, RequestValidationError(errors, body=raw))
            raise ApiError(422, message, code=code, field=field, errors=items) from None

    next(r for r in app.router.routes if getattr(r, "path", "") == "/v1/submit").validate_body = validated_job_file

    @app.post("/v1/cancel", tags=["jobs"], summary="Cancel a job, a job set, or a queue's jobs in given states")
    def cancel(body: CancelBody, who: Identity = Depends(identity)) -> dict:
        queue_for(body.queue, who)
        if body.jobSetId is None and body.jobIds is None and body.states is None:
            raise ApiError(422, "give jobSetId, jobIds or states (to cancel all of a queue's jobs in those states)")
        if body.jobIds:
            missing = store.missing_jobs(body.queue, body.jobSetId, body.jobIds)
            if missing:
                raise ApiError(404, f"no such job in queue {body.queue!r}: {', '.join(missing[:20])}",
                               field="jobIds")
        return store.cancel(body.queue, body.jobSetId, body.jobIds, body.states, by=who.user)

    @app.post("/v1/reprioritize", tags=["jobs"], summary="Change the priority of a job or a job set")
    def reprioritize(body: ReprioritizeBody, who: Identity = Depends(identity)) -> dict:
        queue_for(body.queue, who)
        if body.jobSetId is None and body.jobIds is None:
            raise ApiError(422, "give jobSetId or jobIds")
        if body.jobIds:
            missing = store.missing_jobs(body.queue, body.jobSetId, body.jobIds)
            if missing:
                raise ApiError(404, f"no such job in queue {body.queue!r}: {', '.join(missing[:20])}",
                               field="jobIds")
        return {"reprioritized": store.reprioritize(body.queue, body.priority, body.jobSetId, body.jobIds,
                                                    by=who.user)}

    pending = PendingView(store, status_reader.get)

    @app.get("/v1/jobs/{job_id}", tags=["jobs"], summary="A job's state and record",
             description="A queued job's `reason` says why it waits and `position` where it stands in its queue's "
                         "scheduling order (1: the job the queue offers next), as of the last cycle; `position` is "
                         "null for a job that is not queued.")
    def job_status(job_id: JobId, who: Identity = Depends(identity)) -> dict:
        return pending.job(access.visible_job(store, job_id, who))

    pod_logs = PodLogs(settings, loop)
    app.state.pod_logs = pod_logs
    watch_slots = Slots("watch streams", settings.streams.watch_per_user, "server.streams.watchPerUser")
    app.state.watch_slots = watch_slots
    hubs = StreamHubs(store, auth, open_access, stopping)
    app.state.stream_hubs = hubs

    @app.get("/v1/jobs/{job_id}/logs", tags=["jobs"], response_class=StreamingResponse, responses=LOG_RESPONSES,
             summary="A job's container log, read from its cluster (same access as the job's status)")
    async def job_logs(request: Request, job_id: JobId,
                       pod: query_integer("the job's pod number (404 for one the job does not have)", ge=0,
                                          le=INT64_MAX) = 0,
                       follow: bool = Query(False, description="stream until the container ends"),
                       tail: query_integer("only the last N lines", True, ge=0, le=MAX_TAIL) = None,
                       container: Annotated[str | None, Query(
                           description="the container to read, init and ephemeral containers included (default: "
                                       "the pod's first container; 404 naming the pod's containers for one it "
                                       "does not have)", pattern=CONTAINER_PATTERN, max_length=63)] = None,
                       who: Identity = Depends(identity)):
        if not follow:
            job = await run_in_threadpool(access.visible_job, store, job_id, who)
            content, truncated = await run_in_threadpool(pod_logs.read, job, pod, tail, container)
            return Response(content, media_type="text/plain; charset=utf-8",
                            headers={"X-Flotilla-Log-Truncated": "true" if truncated else "false"})
        give_back = pod_logs.take_slot(who.user)   # past a cap: 429 before the store or the cluster is asked
        try:   # in the streams' own lane of threads, so that a burst of follows leaves the others' requests theirs
            job = await hubs.in_lane(access.visible_job, store, job_id, who)
            response, release = await hubs.in_lane(pod_logs.follow, job, pod, tail, who.user, container, give_back)
        except BaseException:
            give_back()
            raise
        sub = await hubs.subscribe(request.headers.get("authorization"), who)

        def finish() -> None:
            hubs.unsubscribe(sub)
            release()   # also ends a read still blocked in its thread (the client left)

        async def stream():
            """The log as it comes; it ends with the container, after followIdleTimeout without output, or
            when the hub ends it (the token no longer authenticates, the service stops)."""
            loop = asyncio.get_running_loop()
            ended = asyncio.ensure_future(sub.wait())
            reading = None
            try:
                deadline = loop.time() + pod_logs.follow_idle_timeout
                while True:
                    if reading is None:
                        reading = asyncio.ensure_future(hubs.in_follow_lane(pod_logs.next_chunk, response,
                                                                            threads=settings.streams.follows))
                    done, _ = await asyncio.wait({reading, ended}, timeout=max(0.0, deadline - loop.time()),
                                                 return_when=asyncio.FIRST_COMPLETED)
                    if sub.ended is not None or reading not in done:
                        return   # the token no longer authenticates, the service stops, or no output came
                    chunk, reading = reading.result(), None
                    if not chunk:
                        return
                    yield chunk
                    deadline = loop.time() + pod_logs.follow_idle_timeout
            finally:
                ended.cancel()
                finish()

        return ReleasingStream(stream(), finish, media_type="text/plain; charset=utf-8",
                               headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    @app.get("/v1/queues/{queue}/jobsets/{job_set}/jobs", tags=["jobs"], summary="The jobs of a job set")
    def job_set_jobs(queue: QueueName, job_set: JobSetId, state: list[JobState] | None = Query(default=None),
                     who: Identity = Depends(identity)) -> dict:
        queue_for(queue, who)
        return {"jobs": store.list_jobs(queue, job_set, state)}

    @app.get("/v1/queues/{queue}/jobsets/{job_set}/events", tags=["events"], response_class=StreamingResponse,
             summary="The job set's events, oldest first; resumable from an event id",
             responses={200: {"description": "One event per line (jsonl), or server-sent events (sse); a stream "
                                             "ends with an event of kind 'end' when the queue is deleted, the "
                                             "token stops authenticating or the user may no longer watch it",
                              "content": {"application/x-ndjson": {}, "text/event-stream": {}}}})
    async def watch(request: Request, queue: QueueName, job_set: JobSetId, after: query_integer("events after this id", ge=0, le=INT64_MAX) = 0,
                    follow: bool = True, format: Literal["jsonl", "sse"] = "jsonl", last_event_id: LastEventId = None,
                    who: Identity = Depends(identity)):
        release = watch_slots.take(who.user)   # past the cap: 429 before the store is asked anything
        try:
            await hubs.in_lane(queue_for, queue, who)   # the streams' own lane of threads, not the requests'
            sub = await hubs.subscribe(request.headers.get("authorization"), who, (queue, job_set)) \
                if follow else None
        except BaseException:
            release()
            raise
        start = after
        if last_event_id is not None:   # ASCII digits (the header's pattern), at most 19 of them
            start = max(start, min(int(last_event_id), INT64_MAX))

        def finish() -> None:
            if sub is not None:
                hubs.unsubscribe(sub)
            release()

        def render(ev: dict) -> str:
            if format == "sse":
                return f"id: {ev['id']}\nevent: {ev['kind']}\ndata: {json.dumps(ev)}\n\n"
            return json.dumps(ev) + "\n"

        async def stream():
            """The job set's past from the store, then what the hub hands over (or the end it decides)."""
            position = start
            loop = asyncio.get_running_loop()
            try:
                catch_up = True
                last_sent = loop.time()
                while True:
                    while catch_up:   # read from the store: at the start, and when the hub had too much for us
                        batch = await hubs.in_lane(store.events, queue, job_set, position, BATCH)
                        for ev in batch:
                            position = ev["id"]
                            yield render(ev)
                        catch_up = len(batch) == BATCH
                        last_sent = loop.time() if batch else last_sent
                    if sub is None:
                        return
                    if not await sub.wait(max(0.0, last_sent + KEEPALIVE_SECONDS - loop.time())):
                        last_sent = loop.time()
                        yield ": keep-alive\n\n" if format == "sse" else "\n"
                        continue
                    if sub.ended is not None:
                        if sub.ended:   # "" when the service stops: the stream just ends
                            yield render({"id": position, "kind": "end", "queue": queue, "jobSet": job_set,
                                          "reason": sub.ended})
                        return
                    events, catch_up = sub.take()
                    for ev in events:
                        if ev["id"] > position:
                            position = ev["id"]
                            last_sent = loop.time()
                            yield render(ev)
            finally:
                finish()

        media = "text/event-stream" if format == "sse" else "application/x-ndjson"
        return ReleasingStream(stream(), finish, media_type=media, headers={"Cache-Control": "no-cache",
                                                                             "X-Accel-Buffering": "no"})

    # -- queues ------------------------------------------------------------------------
    @app.get("/v1/queues", tags=["queues"], summary="Every queue")
    def list_queues(who: Identity = Depends(identity)) -> dict:
        cordoned = store.cordoned("queue")
        specs = store.list_queues()
        parents = queue_parents(settings.queues, settings.placement, specs)
        return {"queues": [{**q.to_dict(), "parent": parents.get(q.name), "cordoned": q.name in cordoned,
                            "placement": placement_of(settings.queues, settings.placement, q)} for q in specs]}

    def queue_cordon_route(cordon: bool):
        """``POST /v1/queues/{name}/cordon`` or ``/uncordon``: two fixed paths, so that no other method or
        word after a queue's name (``GET .../pending``) is taken for an action."""
        def endpoint(name: QueueName, who: Identity = Depends(identity)) -> dict:
            admin(who)
            if store.get_queue(name) is None:
                raise ApiError(404, f"queue {name!r} does not exist")
            store.set_cordon("queue", name, cordon)
            return {"queue": name, "cordoned": cordon}

        endpoint.__name__ = "cordon_queue" if cordon else "uncordon_queue"
        return endpoint

    admin_only.post("/v1/queues/{name}/cordon", tags=["queues"],
                    summary="Cordon a queue: it accepts jobs, schedules nothing new (administrators)")(
        queue_cordon_route(True))
    admin_only.post("/v1/queues/{name}/uncordon", tags=["queues"],
                    summary="Uncordon a queue: its jobs are scheduled again (administrators)")(
        queue_cordon_route(False))

    # -- nodes -------------------------------------------------------------------------
    @app.get("/v1/nodes", tags=["nodes"], summary="Draining nodes: draining while jobs run, drained once empty")
    def list_nodes(who: Identity = Depends(identity)) -> dict:
        published = status_reader.get().get("nodes", {})
        return {"nodes": {key: published.get(key, "draining") for key in sorted(store.cordoned("node"))}}

    @admin_only.post("/v1/nodes/{cluster}/{node}/{action}", tags=["nodes"],
              summary="Drain a node (no new jobs; running ones finish) or uncordon it (administrators)")
    def drain_node(cluster: ClusterName, node: NodeName, action: Literal["drain", "uncordon"],
                   who: Identity = Depends(identity)) -> dict:
        admin(who)
        spec = next((c for c in settings.clusters if c.name == cluster), None)
        if spec is None:
            raise ApiError(404, f"cluster {cluster!r} does not exist")
        if spec.nodes and node not in {n.name for n in spec.nodes}:
            raise ApiError(404, f"node {node!r} does not exist in cluster {cluster!r}")
        store.set_cordon("node", f"{cluster}/{node}", action == "drain")
        return {"node": f"{cluster}/{node}", "draining": action == "drain"}

    @admin_only.post("/v1/queues", tags=["queues"], summary="Create a queue (administrators)")
    def create_queue(body: QueueBody, who: Identity = Depends(identity)) -> dict:
        admin(who)
        return store.create_queue(body.spec()).to_dict()

    @app.get("/v1/queues/{name}", tags=["queues"], summary="A queue and its job counts by state")
    def describe_queue(name: QueueName, who: Identity = Depends(identity)) -> dict:
        queue = queue_for(name, who, act=False)
        return {**queue.to_dict(), "jobs": store.queue_counts(name)}

    @app.get("/v1/queues/{name}/pending", tags=["queues"], response_model=QueuePending,
             summary="The queue's queued jobs in scheduling order, with reasons and positions (owners, administrators)",
             description="Positions and reasons as of the last cycle (`cycle`, `time`); a job that has left the "
                         "queue since is not listed, so positions may skip numbers. To anyone who may not act in "
                         "the queue it answers 404, as for a missing queue.")
    def queue_pending(name: QueueName,
                      limit: query_integer("at most this many jobs, from the head", ge=1, le=HEAD_MAX) = DEFAULT_LIMIT,
                      who: Identity = Depends(identity)) -> dict:
        access.owned_queue(store, name, who)
        return pending.queue(name, limit)

    @admin_only.put("/v1/queues/{name}", tags=["queues"], summary="Update a queue (administrators)")
    def update_queue(name: QueueName, body: QueueUpdateBody, who: Identity = Depends(identity)) -> dict:
        admin(who)
        if body.name is not None and body.name != name:
            raise ApiError(422, f"body names queue {body.name!r}, path names {name!r}", field="name")
        return store.update_queue(body.spec_for(name)).to_dict()

    @admin_only.delete("/v1/queues/{name}", tags=["queues"],
                summary="Delete a queue and its history (administrators); ?force=true cancels its jobs first")
    def delete_queue(name: QueueName, force: bool = False, who: Identity = Depends(identity)) -> dict:
        admin(who)
        return store.delete_queue(name, force=force, by=who.user)

    # -- service -------------------------------------------------------------------------
    @app.get("/v1/health", tags=["service"], summary="Liveness (no token needed)")
    async def health() -> dict:
        # On the event loop, never a worker thread: it answers even while every worker is busy.
        return {"ok": not stopping(), "version": __version__}

    @app.get("/v1/wishlist", tags=["service"], summary="Node templates: the waiting jobs each would unblock",
             description="Administrators see every queue's jobs. Anyone else sees only the jobs of the queues they "
                         "may act in: per template their count, and the nodes those jobs would need (each queue's "
                         "counted alone, then summed); `unfit` lists only their jobs.")
    def wishlist(who: Identity = Depends(identity)) -> dict:
        body = status_reader.get().get("wishlist")
        if body is None:
            raise ApiError(404, "no wishlist: the config lists no nodeTemplates, or no cycle has run yet")
        return visible_wishlist(body, who)

    def visible_wishlist(body: dict, who: Identity) -> dict:
        """The published wishlist as ``who`` may see it: everything for an administrator, else their queues'."""
        per_queue = body.get("queues", {})
        if may_admin(who):
            return {"templates": body["templates"], "unfit": body["unfit"]}
        templates = {name: {"cluster": t["cluster"], "jobs": 0, "nodes": 0} for name, t in body["templates"].items()}
        unfit: dict[str, str] = {}
        for queue in store.list_queues():
            part = per_queue.get(queue.name)
            if part is None or not may_act(who, queue):
                continue
            for name, wish in part["templates"].items():
                if name in templates:
                    templates[name]["jobs"] += wish["jobs"]
                    templates[name]["nodes"] += wish["nodes"]
            unfit.update(part["unfit"])
        return {"templates": templates, "unfit": dict(sorted(unfit.items()))}

    @app.get("/v1/status", tags=["service"], summary="The last scheduling cycle and the clusters")
    def status(who: Identity = Depends(identity)) -> dict:
        out: dict[str, Any] = {"version": __version__, "jobs": store.job_counts()}
        # Plugins failing in the leader's last cycle, as published (every replica shows the same).
        out["plugins"] = status_reader.get().get("plugins") or {"failing": [], "failedCycles": 0}
        if loop is not None:
            out["cycle"] = loop.last.to_dict() if loop.last else None
            out["clusters"] = {name: {"available": caps.availability is None or bool(caps.availability.available)}
                               for name, caps in sorted(loop.backends.capabilities.items())}
        return out

    if admin_endpoints:
        @admin_only.post("/v1/admin/clusters/{name}/{action}", tags=["admin"],
                  summary="Stop or start a simulated cluster (test and demo aid; administrators)")
        def cluster_control(name: ClusterName, action: Literal["stop", "start"], who: Identity = Depends(identity)) -> dict:
            admin(who)
            if loop is None or not loop.set_cluster_available(name, action == "start"):
                raise ApiError(404, f"no simulated cluster {name!r}")
            return {"cluster": name, "available": action == "start"}

    make_schema = app.openapi

    def openapi() -> dict:
        if app.openapi_schema is None:
            app.openapi_schema = state_input_rules(make_schema())
        return app.openapi_schema

    app.openapi = openapi
    return app


__all__ = ["create_app", "QueueBody", "QueueUpdateBody", "CancelBody", "ReprioritizeBody"]
