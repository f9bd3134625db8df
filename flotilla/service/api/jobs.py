"""Jobs: submit a job file, cancel, reprioritize, and read one job's record.

A job file is taken all or nothing, into a leaf queue the caller may act
in (404 for a missing queue, 403 for one they may not act in, 422 for a
queue with child queues or a job the validator refuses, each naming the
job's index and clientId); a clientId already submitted in the job set
answers its job again (``existing``). Its body is parsed and validated in a
worker thread (:class:`SubmitRoute`), never on the event loop.

Cancelling and reprioritizing name the queue and at least one of jobSetId
or jobIds (cancel: or states); an empty list is refused, never read as
"all", and a job id the queue does not hold answers 404 naming it. A job's
record is readable by whoever may act in its queue; to anyone else it
answers 404, as a missing job does, so ids of other queues do not leak.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from flotilla.service import access
from flotilla.service.api.shared import ActiveState, Api, JobId, identity, validation_errors
from flotilla.service.auth import Identity, may_act
from flotilla.service.bounds import PRIORITY_MAX, PRIORITY_MIN, StrictInt
from flotilla.service.errors import ApiError
from flotilla.service.guard import BoundedRoute
from flotilla.service.jobspec import JobFile, job_file_in_steps, validate_jobs
from flotilla.service.settings import DEFAULT_LIMITS


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


def validated_job_file(request: Request, raw: Any) -> JobFile:
    """The body as a :class:`JobFile` (in a worker thread), refused as FastAPI would refuse it."""
    try:
        return job_file_in_steps(raw)
    except ValidationError as exc:
        errors = [{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False)]
        code, message, field, items = validation_errors(request, RequestValidationError(errors, body=raw))
        raise ApiError(422, message, code=code, field=field, errors=items) from None


class SubmitRoute(BoundedRoute):
    """``POST /v1/submit``: its job file validated in the body's worker thread (:func:`validated_job_file`)."""

    validate_body = staticmethod(validated_job_file)


router = APIRouter(route_class=BoundedRoute)


def submit(body: JobFile, api: Api, who: Identity = Depends(identity)) -> dict:
    queue = api.store.get_queue(body.queue)
    if queue is None:
        raise ApiError(404, f"queue {body.queue!r} does not exist", field="queue")
    if not may_act(who, queue):
        raise ApiError(403, f"user {who.user!r} may not submit to queue {body.queue!r}")
    if any(q.parent == body.queue for q in api.settings.queues):
        raise ApiError(422, f"queue {body.queue!r} has child queues; only leaf queues hold jobs", field="queue")
    new_jobs = validate_jobs(body, api.settings)
    done = api.store.submit(body.queue, body.jobSetId, who.user, new_jobs)
    return {"jobs": [{"id": s.id, "clientId": s.client_id, "existing": s.existing} for s in done]}


router.add_api_route("/v1/submit", submit, methods=["POST"], route_class_override=SubmitRoute, tags=["jobs"],
                     summary="Submit a job file (all or nothing)")


def _missing_jobs(api, queue: str, job_set: str | None, job_ids: list[str] | None) -> None:
    if job_ids:
        missing = api.store.missing_jobs(queue, job_set, job_ids)
        if missing:
            raise ApiError(404, f"no such job in queue {queue!r}: {', '.join(missing[:20])}", field="jobIds")


@router.post("/v1/cancel", tags=["jobs"], summary="Cancel a job, a job set, or a queue's jobs in given states")
def cancel(body: CancelBody, api: Api, who: Identity = Depends(identity)) -> dict:
    api.queue_for(body.queue, who)
    if body.jobSetId is None and body.jobIds is None and body.states is None:
        raise ApiError(422, "give jobSetId, jobIds or states (to cancel all of a queue's jobs in those states)")
    _missing_jobs(api, body.queue, body.jobSetId, body.jobIds)
    return api.store.cancel(body.queue, body.jobSetId, body.jobIds, body.states, by=who.user)


@router.post("/v1/reprioritize", tags=["jobs"], summary="Change the priority of a job or a job set")
def reprioritize(body: ReprioritizeBody, api: Api, who: Identity = Depends(identity)) -> dict:
    api.queue_for(body.queue, who)
    if body.jobSetId is None and body.jobIds is None:
        raise ApiError(422, "give jobSetId or jobIds")
    _missing_jobs(api, body.queue, body.jobSetId, body.jobIds)
    return {"reprioritized": api.store.reprioritize(body.queue, body.priority, body.jobSetId, body.jobIds,
                                                    by=who.user)}


@router.get("/v1/jobs/{job_id}", tags=["jobs"], summary="A job's state and record",
            description="A queued job's `reason` says why it waits and `position` where it stands in its queue's "
                        "scheduling order (1: the job the queue offers next), as of the last cycle; `position` is "
                        "null for a job that is not queued.")
def job_status(job_id: JobId, api: Api, who: Identity = Depends(identity)) -> dict:
    return api.pending.job(access.visible_job(api.store, job_id, who))


__all__ = ["router", "CancelBody", "ReprioritizeBody", "SubmitRoute", "validated_job_file"]
