"""A job's container log, read from its cluster: ``GET /v1/jobs/{id}/logs``.

Readable by whoever may read the job's record (404 otherwise, as for a
missing job). Without ``follow`` the log is read once in a worker thread;
with it the log streams in the streams' own lane of threads, so that a
burst of follows leaves other requests their threads, within
``server.streams`` caps per user (429 past one, before the store or the
cluster is asked anything). A followed log ends with its container, after
``followIdleTimeout`` without output, or when the token stops
authenticating or the service stops; its slot is given back however it
ends.
"""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response, StreamingResponse

from flotilla.service import access
from flotilla.service.api.shared import Api, JobId, ReleasingStream, identity, query_integer
from flotilla.service.auth import Identity
from flotilla.service.bounds import INT64_MAX
from flotilla.service.guard import BoundedRoute
from flotilla.service.logs import CONTAINER_PATTERN, LOG_RESPONSES, MAX_TAIL

router = APIRouter(route_class=BoundedRoute)


@router.get("/v1/jobs/{job_id}/logs", tags=["jobs"], response_class=StreamingResponse, responses=LOG_RESPONSES,
            summary="A job's container log, read from its cluster (same access as the job's status)")
async def job_logs(request: Request, job_id: JobId, api: Api,
                   pod: query_integer("the job's pod number (404 for one the job does not have)", ge=0,
                                      le=INT64_MAX) = 0,
                   follow: bool = Query(False, description="stream until the container ends"),
                   tail: query_integer("only the last N lines", True, ge=0, le=MAX_TAIL) = None,
                   container: Annotated[str | None, Query(
                       description="the container to read, init and ephemeral containers included (default: "
                                   "the pod's first container; 404 naming the pod's containers for one it "
                                   "does not have)", pattern=CONTAINER_PATTERN, max_length=63)] = None,
                   who: Identity = Depends(identity)):
    store, pod_logs, hubs = api.store, api.pod_logs, api.hubs
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
                                                                        threads=api.settings.streams.follows))
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


__all__ = ["router"]
