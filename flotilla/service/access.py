"""What a caller may reach: a queue to act in and a job to read, refused alike by the API and the dashboard.

A job the caller may not see answers 404, the same as a missing job, so that
job ids of other queues do not leak; a queue answers 404 when missing and 403
when the caller may see it but not act in it. A queue's pending jobs (their
ids, reasons and order) are the owners' and administrators' only: to anyone
else the queue answers 404 there, as a job does.
"""

from __future__ import annotations

from flotilla.service.auth import Identity, may_act
from flotilla.service.errors import ApiError
from flotilla.service.settings import QueueSpec
from flotilla.service.store import Store


def queue_for(store: Store, name: str, who: Identity, act: bool = True) -> QueueSpec:
    """The queue ``name``; with ``act``, only when ``who`` may act in it."""
    queue = store.get_queue(name)
    if queue is None:
        raise ApiError(404, f"queue {name!r} does not exist")
    if act and not may_act(who, queue):
        raise ApiError(403, f"user {who.user!r} may not act in queue {name!r}")
    return queue


def visible_job(store: Store, job_id: str, who: Identity) -> dict:
    """The job's record, when ``who`` may act in its queue (administrators always)."""
    job = store.get_job(job_id)
    queue = store.get_queue(job["queue"]) if job else None
    if job is None or (not who.admin and (queue is None or not may_act(who, queue))):
        raise ApiError(404, f"job {job_id!r} not found")
    return job


def owned_queue(store: Store, name: str, who: Identity) -> QueueSpec:
    """The queue ``name`` when ``who`` may act in it (administrators always); else 404, as for a missing one."""
    queue = store.get_queue(name)
    if queue is None or not may_act(who, queue):
        raise ApiError(404, f"queue {name!r} not found")
    return queue
