"""The event log as readers see it: a job set's events, all events, and a job's state rebuilt from them.

Events are appended by the other parts, in their own transactions (through
:func:`flotilla.service.store.engine.insert_events`, which keeps ids in
commit order); this part only reads.
"""

from __future__ import annotations

from typing import Iterable, Mapping

import sqlalchemy as sa

from flotilla.service.schema import events
from flotilla.service.store.engine import Database, last_event_id
from flotilla.service.store.records import (CANCELLED, FAILED, LEASED, PENDING, PREEMPTED, QUEUED, RUNNING,
                                            SUCCEEDED)

EVENT_KINDS = ("submitted", "queued", "leased", "pending", "running", "succeeded", "failed", "preempted",
               "cancelled", "lease-expired", "reprioritized", "cancelling", "deleted",
               "pod-running", "pod-succeeded",   # one pod of a multi-pod job, with its podNumber
               "run-failed",                     # a failed run that its retry policy runs again
               "returned")                       # not bound, or refused by the kubelet: queued again, no retry used
#: The state an event puts its job in; events not listed leave the state as it is.
EVENT_STATE = {"queued": QUEUED, "leased": LEASED, "pending": PENDING, "running": RUNNING,
               "succeeded": SUCCEEDED, "failed": FAILED, "preempted": PREEMPTED, "cancelled": CANCELLED}


def event_dict(row) -> dict:
    out = {"id": row.id, "queue": row.queue, "jobSet": row.job_set, "jobId": row.job_id, "kind": row.kind,
           "time": row.time, "cluster": row.cluster, "node": row.node, "reason": row.reason}
    if row.pod is not None:   # about one pod of a multi-pod job
        out["podNumber"] = row.pod
    return out


def rebuild_states(event_list: Iterable[Mapping]) -> dict[str, str]:
    """A job's state from its events alone: the state its last state-changing event put it in."""
    states: dict[str, str] = {}
    for ev in event_list:
        state = EVENT_STATE.get(ev["kind"])
        job_id = ev.get("jobId", ev.get("job_id"))
        if state is not None:
            states[job_id] = state
        elif ev["kind"] == "submitted":
            states.setdefault(job_id, QUEUED)
    return states


class Events:
    """Reads of the event log on ``db``."""

    def __init__(self, db: Database):
        self.db = db

    def of_job_set(self, queue: str, job_set: str, after: int = 0, limit: int = 1000) -> list[dict]:
        """The job set's events with id > ``after``, oldest first."""
        with self.db.read() as conn:
            rows = conn.execute(sa.select(events).where(events.c.queue == queue, events.c.job_set == job_set,
                                                        events.c.id > after)
                                .order_by(events.c.id).limit(limit)).all()
        return [event_dict(row) for row in rows]

    def all(self, after: int = 0, limit: int = 100000) -> list[dict]:
        with self.db.read() as conn:
            rows = conn.execute(sa.select(events).where(events.c.id > after).order_by(events.c.id).limit(limit)).all()
        return [event_dict(row) for row in rows]

    def last_id(self) -> int:
        with self.db.read() as conn:
            return last_event_id(conn)
