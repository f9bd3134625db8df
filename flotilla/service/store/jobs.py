"""Jobs: submission, cancel and reprioritize, and the reads of the ``jobs`` table (the API's and the loop's).

A submission is stored in one transaction with its ``submitted`` and
``queued`` events; a job whose clientId the queue knows comes back as it is.
The scheduling loop reads queued jobs as :class:`~flotilla.service.store.records.QueuedJob`
records (no spec, no history), all at once or only those with an event since
the last read (:meth:`Jobs.queued_changes`).
"""

from __future__ import annotations

import json
import secrets
import time
from typing import Iterable, Sequence

import sqlalchemy as sa

from flotilla.core.model import OWNER_ANNOTATION
from flotilla.service.retry import dump_policy
from flotilla.service.schema import job_sets, jobs, queues
from flotilla.service.store.engine import Database, changed_since, chunks, dump, event_row, insert_events
from flotilla.service.store.records import (ACTIVE, CANCELLED, NONTERMINAL, QUEUED, QUEUED_COLUMNS, STATES, STOP_CANCEL,
                                            STOP_NONE, NewJob, QueuedJob, Rejection, SubmissionRejected, Submitted,
                                            queued_jobs, retiring_reason)

_CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"


def new_job_id(now: float | None = None) -> str:
    """A ULID-like id (26 characters): time-ordered, unique without coordination."""
    millis = int((time.time() if now is None else now) * 1000)
    value = (millis << 80) | int.from_bytes(secrets.token_bytes(10), "big")
    out = []
    for _ in range(26):
        out.append(_CROCKFORD[value & 31])
        value >>= 5
    return "".join(reversed(out))


def job_dict(row) -> dict:
    """A job row as the API shows it."""
    return {
        "id": row.id, "queue": row.queue, "jobSet": row.job_set, "clientId": row.client_id,
        "state": row.state, "owner": row.owner, "priority": row.priority, "priorityClass": row.priority_class,
        "submitted": row.submitted, "cluster": row.cluster, "node": row.node, "pods": json.loads(row.pods),
        "gang": ({"id": row.gang_id, "cardinality": row.gang_cardinality} if row.gang_id else None),
        "terminationGracePeriodSeconds": row.grace_period, "activeDeadlineSeconds": row.deadline,
        "annotations": json.loads(row.annotations), "retries": row.retries, "reason": row.reason,
        "started": row.started, "finished": row.finished, "updated": row.updated,
        "cancelRequested": row.stop_requested == STOP_CANCEL,
        "source": row.source,
        **({"pod": {"namespace": row.pod_namespace, "name": row.pod_name, "uid": row.pod_uid}}
           if row.source == "cluster" else {}),
    }


def _gang_problems(conn, queue: str, new_jobs: Sequence[NewJob], known: dict[str, str]) -> list[Rejection]:
    """Gang ids reused in ``queue``, or half known (some members' clientIds stored, some not)."""
    gang_ids = sorted({j.gang_id for j in new_jobs if j.gang_id is not None})
    if not gang_ids:
        return []
    stored_gangs: set[str] = set()
    for part in chunks(gang_ids):
        stored_gangs.update(g for (g,) in conn.execute(
            sa.select(jobs.c.gang_id).where(jobs.c.queue == queue, jobs.c.gang_id.in_(part)).distinct()))
    problems = []
    for gang in gang_ids:
        members = [j for j in new_jobs if j.gang_id == gang]
        seen = [j for j in members if j.client_id in known]
        if seen and len(seen) != len(members):
            first = next(j for j in members if j.client_id not in known)
            problems.append(Rejection(first.index, first.client_id, "annotations.armadaproject.io/gangId",
                                      f"gang {gang!r} is partly submitted already: resubmit all of its "
                                      f"members with their clientIds, or none"))
        elif not seen and gang in stored_gangs:
            problems.append(Rejection(members[0].index, members[0].client_id,
                                      "annotations.armadaproject.io/gangId",
                                      f"gang id {gang!r} is already used in queue {queue!r}; "
                                      f"gang ids must not be reused"))
    return problems


def _job_row(job: NewJob, job_id: str, queue: str, job_set: str, owner: str, now: float) -> dict:
    return {
        "id": job_id, "queue": queue, "job_set": job_set, "client_id": job.client_id, "owner": owner,
        "priority": job.priority, "priority_class": job.priority_class, "submitted": now,
        "state": QUEUED, "cluster": None, "node": None,
        "pods": dump([pod.to_dict() for pod in job.pods]), "npods": len(job.pods),
        "gang_id": job.gang_id, "gang_cardinality": job.gang_cardinality, "gang_pods": job.gang_pods,
        "grace_period": job.grace_period, "deadline": job.deadline,
        "annotations": dump({**job.annotations, OWNER_ANNOTATION: owner}), "spec": dump(job.spec), "retries": 0,
        "retry_policy": dump_policy(job.retry_policy),
        "stop_requested": STOP_NONE, "reason": "", "started": None, "finished": None, "updated": now,
    }


def select_jobs(conn, queue: str, job_set: str | None, job_ids: Sequence[str] | None, states: Sequence[str]) -> list:
    cols = [jobs.c.id, jobs.c.queue, jobs.c.job_set, jobs.c.state, jobs.c.cluster, jobs.c.node,
            jobs.c.stop_requested]
    base = sa.select(*cols).where(jobs.c.queue == queue, jobs.c.state.in_(states))
    if job_set is not None:
        base = base.where(jobs.c.job_set == job_set)
    if job_ids is None:
        return list(conn.execute(base.order_by(jobs.c.id)))
    found = []
    for part in chunks(list(job_ids)):
        found.extend(conn.execute(base.where(jobs.c.id.in_(part))))
    return sorted(found, key=lambda r: r.id)


class Jobs:
    """The jobs' transactions on ``db``."""

    def __init__(self, db: Database):
        self.db = db

    # -- submission ---------------------------------------------------------
    def submit(self, queue: str, job_set: str, owner: str, new_jobs: Sequence[NewJob],
               now: float | None = None) -> list[Submitted]:
        """Store a validated submission in one transaction; jobs whose clientId is known come back as they are.

        Raises :class:`SubmissionRejected` (nothing stored) when the queue is
        gone or retiring, or a gang id is reused or half known.
        """
        now = time.time() if now is None else now
        with self.db.write() as conn:
            found = conn.execute(sa.select(queues.c.retiring).where(queues.c.name == queue)).first()
            if found is None or found.retiring is not None:
                why = f"queue {queue!r} does not exist" if found is None else retiring_reason(queue)
                raise SubmissionRejected([Rejection(j.index, j.client_id, "queue", why) for j in new_jobs[:1]])
            client_ids = sorted({j.client_id for j in new_jobs if j.client_id is not None})
            known: dict[str, str] = {}
            for part in chunks(client_ids):
                for cid, job_id in conn.execute(sa.select(jobs.c.client_id, jobs.c.id)
                                                .where(jobs.c.queue == queue, jobs.c.client_id.in_(part))):
                    known[cid] = job_id
            problems = _gang_problems(conn, queue, new_jobs, known)
            if problems:
                raise SubmissionRejected(problems)
            out: list[Submitted] = []
            rows: list[dict] = []
            event_rows: list[dict] = []
            fresh: dict[str, str] = {}
            for job in new_jobs:
                if job.client_id is not None and job.client_id in known:
                    out.append(Submitted(job.index, known[job.client_id], job.client_id, True))
                    continue
                if job.client_id is not None and job.client_id in fresh:
                    out.append(Submitted(job.index, fresh[job.client_id], job.client_id, True))
                    continue
                job_id = new_job_id(now)
                if job.client_id is not None:
                    fresh[job.client_id] = job_id
                rows.append(_job_row(job, job_id, queue, job_set, owner, now))
                ev = {"queue": queue, "job_set": job_set, "job_id": job_id, "time": now, "cluster": None,
                      "node": None, "reason": ""}
                event_rows.append({**ev, "kind": "submitted", "reason": f"by {owner}"})
                event_rows.append({**ev, "kind": "queued"})
                out.append(Submitted(job.index, job_id, job.client_id, False))
            if rows:
                if not conn.execute(sa.select(job_sets.c.name)
                                    .where(job_sets.c.queue == queue, job_sets.c.name == job_set)).first():
                    conn.execute(job_sets.insert().values(queue=queue, name=job_set, created=now))
                conn.execute(jobs.insert(), rows)
                insert_events(conn, event_rows)
        return out

    # -- cancel / reprioritize ------------------------------------------------
    def missing(self, queue: str, job_set: str | None, job_ids: Sequence[str]) -> list[str]:
        """Which of ``job_ids`` are not jobs of ``queue`` (and ``job_set``): the API answers 404 for them."""
        with self.db.read() as conn:
            found = {r.id for r in select_jobs(conn, queue, job_set, job_ids, STATES)}
        return [job_id for job_id in job_ids if job_id not in found]

    def cancel(self, queue: str, job_set: str | None = None, job_ids: Sequence[str] | None = None,
               states: Sequence[str] | None = None, by: str = "", now: float | None = None) -> dict[str, list[str]]:
        """Cancel queued jobs now; ask the scheduling loop to stop leased/pending/running ones on their cluster.

        Returns ``{"cancelled": [...], "cancelling": [...]}``.
        """
        now = time.time() if now is None else now
        wanted = tuple(s for s in (states or NONTERMINAL) if s in NONTERMINAL)
        reason = f"cancelled by {by}" if by else "cancelled"
        with self.db.write() as conn:
            rows = select_jobs(conn, queue, job_set, job_ids, wanted)
            queued_ids = [r.id for r in rows if r.state == QUEUED]
            active = [r for r in rows if r.state in ACTIVE and r.stop_requested != STOP_CANCEL]
            for part in chunks(queued_ids):
                conn.execute(jobs.update().where(jobs.c.id.in_(part), jobs.c.state == QUEUED)
                             .values(state=CANCELLED, reason=reason, finished=now, updated=now))
            for part in chunks([r.id for r in active]):
                conn.execute(jobs.update().where(jobs.c.id.in_(part))
                             .values(stop_requested=STOP_CANCEL, reason=reason, updated=now))
            # A queued job is cancelled at once; an active one is "cancelling" until its cluster stops it.
            insert_events(conn, [event_row(r._mapping, "cancelled", now, reason=reason)
                                 for r in rows if r.state == QUEUED]
                          + [event_row(r._mapping, "cancelling", now, r.cluster, r.node, reason)
                             for r in active])
        return {"cancelled": queued_ids, "cancelling": [r.id for r in rows if r.state in ACTIVE]}

    def reprioritize(self, queue: str, priority: int, job_set: str | None = None,
                     job_ids: Sequence[str] | None = None, by: str = "", now: float | None = None) -> list[str]:
        now = time.time() if now is None else now
        with self.db.write() as conn:
            rows = select_jobs(conn, queue, job_set, job_ids, NONTERMINAL)
            for part in chunks([r.id for r in rows]):
                conn.execute(jobs.update().where(jobs.c.id.in_(part)).values(priority=priority, updated=now))
            insert_events(conn, [event_row(r._mapping, "reprioritized", now,
                                           reason=f"priority {priority}" + (f" by {by}" if by else ""))
                                 for r in rows])
        return [r.id for r in rows]

    # -- reading --------------------------------------------------------------
    def get(self, job_id: str) -> dict | None:
        with self.db.read() as conn:
            row = conn.execute(sa.select(jobs).where(jobs.c.id == job_id)).first()
        return job_dict(row) if row else None

    def specs(self, job_ids: Iterable[str]) -> dict[str, dict]:
        """The submitted specs of ``job_ids`` (those that exist), by id, read in batches of primary-key lookups.

        The scheduling loop asks at lease time, for the jobs it has just
        leased onto clusters that create real pods: specs stay out of the
        records scheduling reads every cycle (:class:`QueuedJob`,
        ``ActiveJob``), so a cycle with 100,000 running jobs reads none.
        """
        out: dict[str, dict] = {}
        with self.db.read() as conn:
            for part in chunks(sorted(set(job_ids))):
                for job_id, text in conn.execute(sa.select(jobs.c.id, jobs.c.spec).where(jobs.c.id.in_(part))):
                    out[job_id] = json.loads(text)
        return out

    def list(self, queue: str | None = None, job_set: str | None = None, states: Sequence[str] | None = None,
             limit: int | None = None) -> list[dict]:
        query = sa.select(jobs)
        if queue is not None:
            query = query.where(jobs.c.queue == queue)
        if job_set is not None:
            query = query.where(jobs.c.job_set == job_set)
        if states:
            query = query.where(jobs.c.state.in_(list(states)))
        query = query.order_by(jobs.c.id)
        if limit:
            query = query.limit(limit)
        with self.db.read() as conn:
            return [job_dict(row) for row in conn.execute(query)]

    def states(self) -> dict[str, str]:
        with self.db.read() as conn:
            return dict(conn.execute(sa.select(jobs.c.id, jobs.c.state)).all())

    def count(self, states: Sequence[str] | None = None) -> int:
        query = sa.select(sa.func.count()).select_from(jobs)
        if states:
            query = query.where(jobs.c.state.in_(list(states)))
        with self.db.read() as conn:
            return conn.execute(query).scalar_one()

    def counts(self, queue: str | None = None) -> dict[str, int]:
        """Jobs by state, of one queue or of all."""
        query = sa.select(jobs.c.state, sa.func.count()).group_by(jobs.c.state)
        if queue is not None:
            query = query.where(jobs.c.queue == queue)
        with self.db.read() as conn:
            rows = conn.execute(query).all()
        return {state: 0 for state in STATES} | {state: count for state, count in rows}

    # -- the scheduling loop's reads ---------------------------------------------
    def load_queued(self) -> list[QueuedJob]:
        """Every queued job, in one query (no per-job round trips)."""
        with self.db.read() as conn:
            rows = conn.execute(sa.select(*QUEUED_COLUMNS).where(jobs.c.state == QUEUED)).all()
        return queued_jobs(rows, self.db.loads)

    def queued_changes(self, after: int) -> tuple[int, list[str], dict[str, QueuedJob]]:
        """What changed since event ``after``: ``(cursor, ids, queued)``.

        ``ids`` are the jobs with an event after ``after`` (in the order of
        their first such event), ``queued`` those of them that are queued now,
        ``cursor`` the last event id looked at. Every move into or out of
        ``queued``, and every change to a queued job that scheduling reads,
        writes an event, and writes are serialised, so applying this to the
        queued jobs as of ``after`` gives the queued jobs as of ``cursor``
        (a job changed again after ``cursor`` is read as it is now, and
        again next time).
        """
        with self.db.read() as conn:
            cursor, ids = changed_since(conn, after)
            rows = []
            for part in chunks(ids):
                # By id alone (the primary key), the state tested here: with "AND state = 'queued'" SQLite
                # walks the state index, every queued job, once per chunk.
                rows.extend(row[1:] for row in conn.execute(sa.select(jobs.c.state, *QUEUED_COLUMNS)
                                                            .where(jobs.c.id.in_(part)))
                            if row[0] == QUEUED)
        return cursor, ids, {job.id: job for job in queued_jobs(rows, self.db.loads)}
