"""The dashboard's reads: filtered, sorted, paged job lists and per-job-set counts, done by the database.

Every list is one ``ORDER BY ... LIMIT ... OFFSET`` query plus one
``COUNT``, on the jobs table's ``(queue, job_set)`` and ``(state, queue)``
indexes: with 100,000 jobs in a queue a page takes 10-150 ms (``bench/ui.py``,
figures in docs/operations.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa

from flotilla.service.schema import events, jobs
from flotilla.service.store import STATES, Store, event_dict

#: Columns a job list may be sorted by (query parameter -> column); ties broken by id.
SORTS = {"submitted": jobs.c.submitted, "priority": jobs.c.priority, "state": jobs.c.state, "id": jobs.c.id,
         "owner": jobs.c.owner, "jobSet": jobs.c.job_set, "updated": jobs.c.updated}
PAGE_SIZE = 50


@dataclass(frozen=True, slots=True)
class JobFilter:
    queue: str
    job_set: str | None = None
    state: str | None = None
    owner: str | None = None

    def where(self) -> list:
        out = [jobs.c.queue == self.queue]
        if self.job_set:
            out.append(jobs.c.job_set == self.job_set)
        if self.state:
            out.append(jobs.c.state == self.state)
        if self.owner:
            out.append(jobs.c.owner == self.owner)
        return out


@dataclass(frozen=True, slots=True)
class JobRow:
    id: str
    job_set: str
    owner: str
    state: str
    priority: int
    submitted: float
    cluster: str | None
    node: str | None


def job_page(store: Store, filt: JobFilter, sort: str = "submitted", descending: bool = True, page: int = 1,
             size: int = PAGE_SIZE) -> tuple[int, list[JobRow]]:
    """``(total matching, the page's rows)``; ``sort`` must be a key of :data:`SORTS`."""
    column = SORTS[sort]
    order = [column.desc(), jobs.c.id.desc()] if descending else [column.asc(), jobs.c.id.asc()]
    where = filt.where()
    with store.read() as conn:
        total = conn.execute(sa.select(sa.func.count()).select_from(jobs).where(*where)).scalar_one()
        rows = conn.execute(sa.select(jobs.c.id, jobs.c.job_set, jobs.c.owner, jobs.c.state, jobs.c.priority,
                                      jobs.c.submitted, jobs.c.cluster, jobs.c.node).where(*where)
                            .order_by(*order).limit(size).offset((page - 1) * size)).all()
    return total, [JobRow(*row) for row in rows]


def job_sets(store: Store, queue: str) -> list[tuple[str, dict[str, int]]]:
    """The queue's job sets with their job counts by state, by name."""
    with store.read() as conn:
        rows = conn.execute(sa.select(jobs.c.job_set, jobs.c.state, sa.func.count()).where(jobs.c.queue == queue)
                            .group_by(jobs.c.job_set, jobs.c.state)).all()
    out: dict[str, dict[str, int]] = {}
    for job_set, state, count in rows:
        out.setdefault(job_set, {s: 0 for s in STATES})[state] = count
    return sorted(out.items())


def job_events(store: Store, job_id: str) -> list[dict]:
    """The job's events, oldest first (by the events' job index)."""
    with store.read() as conn:
        rows = conn.execute(sa.select(events).where(events.c.job_id == job_id).order_by(events.c.id)).all()
    return [event_dict(row) for row in rows]

