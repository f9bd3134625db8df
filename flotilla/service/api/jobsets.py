"""Job sets: their jobs, and their events as a stream resumable from an event id.

Both are readable by whoever may act in the queue (404 for a missing
queue, 403 otherwise). The events come oldest first, as JSON lines or
server-sent events, from ``after`` or the ``Last-Event-ID`` header
(whichever is later); with ``follow`` the stream goes on with what the
stream hub hands over, sends an empty line (a comment in server-sent
events) after :data:`KEEPALIVE_SECONDS` without one, and ends with an event
of kind ``end`` when the queue is deleted, the token stops authenticating
or the user may no longer watch it. A user holds at most
``server.streams.watchPerUser`` watches (429 past it, before the store is
asked anything); a watch's slot is given back however it ends.
"""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import StreamingResponse

from flotilla.service.api.shared import Api, JobSetId, JobState, QueueName, ReleasingStream, identity, query_integer
from flotilla.service.auth import Identity
from flotilla.service.bounds import INT64_MAX
from flotilla.service.guard import BoundedRoute
from flotilla.service.streams import BATCH

#: A stream with nothing to send for this long sends an empty line (a comment in server-sent events).
KEEPALIVE_SECONDS = 15.0
#: ``Last-Event-ID``: an event id as the stream wrote it (ASCII digits; past 64 bits it means the newest).
#: A string in the schema (not "string or null": a header has no null), absent when not sent.
LastEventId = Annotated[str, Header(pattern=r"^[0-9]{1,19}$")]

router = APIRouter(route_class=BoundedRoute)


@router.get("/v1/queues/{queue}/jobsets/{job_set}/jobs", tags=["jobs"], summary="The jobs of a job set")
def job_set_jobs(queue: QueueName, job_set: JobSetId, api: Api, state: list[JobState] | None = Query(default=None),
                 who: Identity = Depends(identity)) -> dict:
    api.queue_for(queue, who)
    return {"jobs": api.store.list_jobs(queue, job_set, state)}


@router.get("/v1/queues/{queue}/jobsets/{job_set}/events", tags=["events"], response_class=StreamingResponse,
            summary="The job set's events, oldest first; resumable from an event id",
            responses={200: {"description": "One event per line (jsonl), or server-sent events (sse); a stream "
                                            "ends with an event of kind 'end' when the queue is deleted, the "
                                            "token stops authenticating or the user may no longer watch it",
                             "content": {"application/x-ndjson": {}, "text/event-stream": {}}}})
async def watch(request: Request, queue: QueueName, job_set: JobSetId, api: Api,
                after: query_integer("events after this id", ge=0, le=INT64_MAX) = 0,
                follow: bool = True, format: Literal["jsonl", "sse"] = "jsonl", last_event_id: LastEventId = None,
                who: Identity = Depends(identity)):
    store, hubs = api.store, api.hubs
    release = api.watch_slots.take(who.user)   # past the cap: 429 before the store is asked anything
    try:
        await hubs.in_lane(api.queue_for, queue, who)   # the streams' own lane of threads, not the requests'
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


__all__ = ["router", "KEEPALIVE_SECONDS"]
