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
    GET    /jobs/{id}                               a job's record
    GET    /queues/{q}/jobsets/{js}/jobs            the job set's jobs
    GET    /queues/{q}/jobsets/{js}/events          ?after=ID&follow=1&format=jsonl|sse (Last-Event-ID honoured)
    GET    /queues                                  every queue
    POST   /queues                                  create (admins)
    GET    /queues/{q}                              describe: settings and job counts by state
    PUT    /queues/{q}                              update (admins)
    DELETE /queues/{q}                              delete (admins); refused while it has active jobs
    GET    /health                                  no token needed
    GET    /status                                  last cycle, clusters
    POST   /admin/clusters/{name}/stop|start        admins, only with `serve --admin-endpoints` (tests, demos)
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, Literal

from fastapi import Depends, FastAPI, Header, HTTPException, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from flotilla import __version__
from flotilla.config.models import QueueConfig
from flotilla.service.auth import Authenticator, Identity, may_act, may_admin
from flotilla.service.jobspec import JobFile, field_path, rejections_from_errors, validate_jobs
from flotilla.service.settings import QueueSpec, ServiceSettings
from flotilla.service.store import Rejection, Store, StoreError, SubmissionRejected


class QueueBody(QueueConfig):
    """A queue as the API takes it: the config's queue, with a name safe for URLs."""

    name: str = Field(min_length=1, max_length=255, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")

    def spec(self) -> QueueSpec:
        return QueueSpec(self.name, self.weight, dict(self.limits), tuple(self.owners), tuple(self.group_owners))


class CancelBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    queue: str = Field(min_length=1)
    jobSetId: str | None = None
    jobIds: list[str] | None = None
    states: list[Literal["queued", "leased", "pending", "running"]] | None = None


class ReprioritizeBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    queue: str = Field(min_length=1)
    jobSetId: str | None = None
    jobIds: list[str] | None = None
    priority: int


def _clean_errors(errors) -> list[dict]:
    out = []
    for err in errors:
        out.append({"loc": list(err.get("loc", ())), "field": field_path([p for p in err.get("loc", ()) if p != "body"]),
                    "msg": err.get("msg", ""), "type": err.get("type", "")})
    return out


def create_app(store: Store, settings: ServiceSettings, loop=None, *, admin_endpoints: bool = False,
               authenticator: Authenticator | None = None, shutting_down=None) -> FastAPI:
    """The API on ``store``; ``loop`` (a :class:`ServiceLoop`) is optional (status and admin endpoints)."""
    auth = authenticator or Authenticator(settings.tokens, settings.admin_groups)
    app = FastAPI(title="Flotilla", version=__version__,
                  description="Submit, cancel and watch batch jobs in Flotilla's queues.")
    app.state.store = store
    app.state.loop = loop

    def stopping() -> bool:
        return bool(shutting_down is not None and shutting_down.is_set())

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError):
        errors = _clean_errors(exc.errors())
        body: dict[str, Any] = {"detail": errors}
        if request.url.path.endswith("/submit"):
            raw = exc.body if isinstance(exc.body, dict) else {}
            fixed = raw if "jobs" in raw else JobFile._single_job_form(raw)
            rejections = rejections_from_errors(exc.errors(), fixed)
            body["errors"] = [r.to_dict() for r in rejections[:200]]
            body["message"] = str(SubmissionRejected(rejections))
        else:
            body["message"] = "; ".join(f"{e['field'] or 'body'}: {e['msg']}" for e in errors)
        return JSONResponse(body, status_code=422)

    @app.exception_handler(StoreError)
    async def _store_error(request: Request, exc: StoreError):
        body: dict[str, Any] = {"detail": str(exc), "message": str(exc)}
        if isinstance(exc, SubmissionRejected):
            body["errors"] = [r.to_dict() for r in exc.rejections[:200]]
            body["detail"] = [{"loc": ["body", *(["jobs", r.index] if r.index is not None else [])],
                               "field": (f"jobs[{r.index}]." if r.index is not None else "") + r.field,
                               "msg": r.message, "type": "rejected"} for r in exc.rejections[:200]]
        return JSONResponse(body, status_code=exc.status)

    open_access = not settings.tokens

    def identity(authorization: str | None = Header(default=None)) -> Identity:
        if open_access:   # no tokens configured: a local, single-user service (serve allows it on loopback only)
            return Identity("anonymous", frozenset(), admin=True)
        who = auth.authenticate(authorization)
        if who is None:
            raise HTTPException(401, "missing or invalid bearer token", headers={"WWW-Authenticate": "Bearer"})
        return who

    def queue_for(name: str, who: Identity, act: bool = True) -> QueueSpec:
        queue = store.get_queue(name)
        if queue is None:
            raise HTTPException(404, f"queue {name!r} does not exist")
        if act and not may_act(who, queue):
            raise HTTPException(403, f"user {who.user!r} may not act in queue {name!r}")
        return queue

    def admin(who: Identity) -> None:
        if not may_admin(who):
            raise HTTPException(403, f"user {who.user!r} is not an administrator")

    # -- jobs ------------------------------------------------------------------------
    @app.post("/v1/submit", tags=["jobs"], summary="Submit a job file (all or nothing)")
    def submit(body: JobFile, who: Identity = Depends(identity)) -> dict:
        queue = store.get_queue(body.queue)
        if queue is None:
            raise SubmissionRejected([Rejection(i, job.clientId, "queue", f"queue {body.queue!r} does not exist")
                                      for i, job in enumerate(body.jobs)])
        if not may_act(who, queue):
            raise HTTPException(403, f"user {who.user!r} may not submit to queue {body.queue!r}")
        new_jobs = validate_jobs(body, settings)
        done = store.submit(body.queue, body.jobSetId, who.user, new_jobs)
        return {"jobs": [{"id": s.id, "clientId": s.client_id, "existing": s.existing} for s in done]}

    @app.post("/v1/cancel", tags=["jobs"], summary="Cancel a job, a job set, or a queue's jobs in given states")
    def cancel(body: CancelBody, who: Identity = Depends(identity)) -> dict:
        queue_for(body.queue, who)
        if body.jobSetId is None and body.jobIds is None and body.states is None:
            raise HTTPException(422, "give jobSetId, jobIds or states (to cancel all of a queue's jobs in those states)")
        if body.jobIds:
            missing = store.missing_jobs(body.queue, body.jobSetId, body.jobIds)
            if missing:
                raise HTTPException(404, f"no such job in queue {body.queue!r}: {', '.join(missing[:20])}")
        return store.cancel(body.queue, body.jobSetId, body.jobIds, body.states, by=who.user)

    @app.post("/v1/reprioritize", tags=["jobs"], summary="Change the priority of a job or a job set")
    def reprioritize(body: ReprioritizeBody, who: Identity = Depends(identity)) -> dict:
        queue_for(body.queue, who)
        if body.jobSetId is None and body.jobIds is None:
            raise HTTPException(422, "give jobSetId or jobIds")
        if body.jobIds:
            missing = store.missing_jobs(body.queue, body.jobSetId, body.jobIds)
            if missing:
                raise HTTPException(404, f"no such job in queue {body.queue!r}: {', '.join(missing[:20])}")
        return {"reprioritized": store.reprioritize(body.queue, body.priority, body.jobSetId, body.jobIds,
                                                    by=who.user)}

    @app.get("/v1/jobs/{job_id}", tags=["jobs"], summary="A job's state and record")
    def job_status(job_id: str, who: Identity = Depends(identity)) -> dict:
        job = store.get_job(job_id)
        queue = store.get_queue(job["queue"]) if job else None
        if job is None or (not who.admin and (queue is None or not may_act(who, queue))):
            raise HTTPException(404, f"job {job_id!r} not found")
        return job

    @app.get("/v1/queues/{queue}/jobsets/{job_set}/jobs", tags=["jobs"], summary="The jobs of a job set")
    def job_set_jobs(queue: str, job_set: str, state: list[str] | None = Query(default=None),
                     who: Identity = Depends(identity)) -> dict:
        queue_for(queue, who)
        return {"jobs": store.list_jobs(queue, job_set, state)}

    @app.get("/v1/queues/{queue}/jobsets/{job_set}/events", tags=["events"],
             summary="The job set's events, oldest first; resumable from an event id")
    async def watch(queue: str, job_set: str, after: int = Query(0, ge=0), follow: bool = True,
                    format: Literal["jsonl", "sse"] = "jsonl", last_event_id: str | None = Header(default=None),
                    who: Identity = Depends(identity)):
        await run_in_threadpool(queue_for, queue, who)
        start = after
        if last_event_id and last_event_id.isdigit():
            start = max(start, int(last_event_id))

        async def stream():
            position = start
            seen_writes = -1
            checked = last_sent = time.monotonic()
            while True:
                now = time.monotonic()
                if store.writes != seen_writes or now - checked > 2.0:  # other processes may write too
                    seen_writes = store.writes
                    checked = now
                    batch = await run_in_threadpool(store.events, queue, job_set, position, 1000)
                    for ev in batch:
                        position = ev["id"]
                        last_sent = now
                        if format == "sse":
                            yield f"id: {ev['id']}\nevent: {ev['kind']}\ndata: {json.dumps(ev)}\n\n"
                        else:
                            yield json.dumps(ev) + "\n"
                    if len(batch) == 1000:
                        continue
                    if not follow:
                        return
                if stopping():
                    return
                await asyncio.sleep(0.1)
                if time.monotonic() - last_sent > 15:
                    last_sent = time.monotonic()
                    yield ": keep-alive\n\n" if format == "sse" else "\n"

        media = "text/event-stream" if format == "sse" else "application/x-ndjson"
        return StreamingResponse(stream(), media_type=media, headers={"Cache-Control": "no-cache",
                                                                       "X-Accel-Buffering": "no"})

    # -- queues ------------------------------------------------------------------------
    @app.get("/v1/queues", tags=["queues"], summary="Every queue")
    def list_queues(who: Identity = Depends(identity)) -> dict:
        return {"queues": [q.to_dict() for q in store.list_queues()]}

    @app.post("/v1/queues", tags=["queues"], summary="Create a queue (administrators)")
    def create_queue(body: QueueBody, who: Identity = Depends(identity)) -> dict:
        admin(who)
        return store.create_queue(body.spec()).to_dict()

    @app.get("/v1/queues/{name}", tags=["queues"], summary="A queue and its job counts by state")
    def describe_queue(name: str, who: Identity = Depends(identity)) -> dict:
        queue = queue_for(name, who, act=False)
        return {**queue.to_dict(), "jobs": store.queue_counts(name)}

    @app.put("/v1/queues/{name}", tags=["queues"], summary="Update a queue (administrators)")
    def update_queue(name: str, body: QueueBody, who: Identity = Depends(identity)) -> dict:
        admin(who)
        if body.name != name:
            raise HTTPException(422, f"body names queue {body.name!r}, path names {name!r}")
        return store.update_queue(body.spec()).to_dict()

    @app.delete("/v1/queues/{name}", tags=["queues"], summary="Delete a queue without active jobs (administrators)")
    def delete_queue(name: str, who: Identity = Depends(identity)) -> dict:
        admin(who)
        store.delete_queue(name)
        return {"deleted": name}

    # -- service -------------------------------------------------------------------------
    @app.get("/v1/health", tags=["service"], summary="Liveness (no token needed)")
    def health() -> dict:
        return {"ok": not stopping(), "version": __version__}

    @app.get("/v1/status", tags=["service"], summary="The last scheduling cycle and the clusters")
    def status(who: Identity = Depends(identity)) -> dict:
        out: dict[str, Any] = {"version": __version__, "jobs": {}}
        if loop is not None:
            out["cycle"] = loop.last.to_dict() if loop.last else None
            out["clusters"] = {name: {"available": bool(getattr(b, "available", True))}
                               for name, b in sorted(loop.backends.items())}
        return out

    if admin_endpoints:
        @app.post("/v1/admin/clusters/{name}/{action}", tags=["admin"],
                  summary="Stop or start a simulated cluster (test and demo aid; administrators)")
        def cluster_control(name: str, action: Literal["stop", "start"], who: Identity = Depends(identity)) -> dict:
            admin(who)
            if loop is None or not loop.set_cluster_available(name, action == "start"):
                raise HTTPException(404, f"no simulated cluster {name!r}")
            return {"cluster": name, "available": action == "start"}

    return app


__all__ = ["create_app", "QueueBody", "CancelBody", "ReprioritizeBody"]
