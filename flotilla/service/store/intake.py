"""In-cluster pods (:mod:`flotilla.service.intake`): their jobs stored, cancelled, adopted after a bind.

Jobs made from pods a cluster holds (``source = 'cluster'``) are stored
idempotently by their pod's uid, so a new leader offering every waiting pod
again stores each once; a pod gone while queued cancels its job; a bind a
previous leader made is taken over as if this leader had made it.
"""

from __future__ import annotations

import json
import time
from typing import Iterable, Mapping, Sequence

import sqlalchemy as sa

from flotilla.service.schema import events, job_sets, jobs, leases, queues
from flotilla.service.store.engine import Database, chunks, dump, event_row, insert_events, last_event_id
from flotilla.service.store.records import (CANCELLED, NONTERMINAL, PENDING, QUEUED, RUNNING, STOP_NONE)


class Intake:
    """The in-cluster jobs' transactions on ``db``."""

    def __init__(self, db: Database):
        self.db = db

    def known_jobs(self, job_ids: Iterable[str]) -> dict[str, tuple[str | None, str]]:
        """Which of ``job_ids`` exist: id -> (gang id, state)."""
        out: dict[str, tuple[str | None, str]] = {}
        with self.db.read() as conn:
            for part in chunks(sorted(set(job_ids))):
                for row in conn.execute(sa.select(jobs.c.id, jobs.c.gang_id, jobs.c.state).where(jobs.c.id.in_(part))):
                    out[row.id] = (row.gang_id, row.state)
        return out

    def gang_live(self, queue: str, gang_id: str) -> tuple[int, int, int]:
        """A stored gang's live members: ``(cardinality, queued, started)``; ``(0, 0, 0)`` when none is live.

        ``started`` counts the members leased, pending or running; finished members are not counted (a gang
        whose members all finished is formed anew by pods that come later).
        """
        with self.db.read() as conn:
            rows = conn.execute(sa.select(jobs.c.gang_cardinality, jobs.c.state, sa.func.count())
                                .where(jobs.c.queue == queue, jobs.c.gang_id == gang_id,
                                       jobs.c.state.in_(NONTERMINAL))
                                .group_by(jobs.c.gang_cardinality, jobs.c.state)).all()
        cardinality = max((row[0] or 0 for row in rows), default=0)
        queued = sum(row[2] for row in rows if row[1] == QUEUED)
        started = sum(row[2] for row in rows if row[1] != QUEUED)
        return cardinality, queued, started

    def gang_annotation(self, queue: str, gang_id: str, key: str) -> str | None:
        """The annotation ``key`` of a live member of a stored gang (its members agree on it), or None."""
        with self.db.read() as conn:
            text = conn.execute(sa.select(jobs.c.annotations)
                                .where(jobs.c.queue == queue, jobs.c.gang_id == gang_id,
                                       jobs.c.state.in_(NONTERMINAL)).limit(1)).scalar()
        return None if text is None else json.loads(text).get(key)

    def queued_from_cluster(self, cluster: str) -> dict[str, str]:
        """The queued in-cluster jobs of ``cluster``: job id -> pod uid (a new leader's reconciliation)."""
        with self.db.read() as conn:
            return dict(conn.execute(sa.select(jobs.c.id, jobs.c.pod_uid).where(
                jobs.c.state == QUEUED, jobs.c.source == "cluster",
                jobs.c.spec.like(f'%"cluster":{json.dumps(cluster)}%'))).all())

    def cancelled_from_cluster(self, after: int, limit: int = 10_000) -> tuple[int, list[tuple[str, ...]]]:
        """In-cluster jobs cancelled (and still so) by an event after ``after``: ``(cursor, rows)``, each row
        ``(job id, pod namespace, pod name, pod uid, reason)``; ``cursor`` is where the next call starts (the
        last event looked at: new events are read once, not again each call). A job deleted with its queue
        (``deleted`` events; its row is gone) comes as ``(job id, None, None, None, "its queue was deleted")``:
        which pod was its is known only to the cluster (the pod's uid makes its id)."""
        with self.db.read() as conn:
            top = last_event_id(conn)
            found = conn.execute(sa.select(events.c.id, events.c.job_id, events.c.kind)
                                 .where(events.c.id > after, events.c.id <= top,
                                        events.c.kind.in_((CANCELLED, "deleted")))
                                 .order_by(events.c.id).limit(limit)).all()
            cursor = found[-1][0] if len(found) == limit else top
            rows: list[tuple[str, ...]] = [(row[1], None, None, None, "its queue was deleted")
                                           for row in found if row[2] == "deleted"]
            for part in chunks(sorted({row[1] for row in found if row[2] == CANCELLED})):
                rows.extend(tuple(row) for row in conn.execute(
                    sa.select(jobs.c.id, jobs.c.pod_namespace, jobs.c.pod_name, jobs.c.pod_uid, jobs.c.reason)
                    .where(jobs.c.id.in_(part), jobs.c.source == "cluster", jobs.c.state == CANCELLED)))
        return max(cursor, after), rows

    def adopt_bound(self, cluster: str, bound: Mapping[str, tuple[str, bool]], now: float) -> list[str]:
        """Queued in-cluster jobs whose pods a scheduler bound (``bound``: job id -> (node, running)): each
        becomes what the bind made it, leased on ``cluster`` at that node, then pending (or running), as if this
        leader had bound it. Jobs not queued are left as they are. Returns the ids adopted.

        This is how a leader takes over a bind its predecessor made just before it stopped (the job queued
        again meanwhile, or never marked): the pod runs once, on its node, and is never bound a second time.
        """
        adopted: list[str] = []
        if not bound:
            return adopted
        with self.db.read() as conn:   # mostly binds this leader made and recorded: no write for them
            queued = []
            for part in chunks(sorted(bound)):
                queued.extend(conn.execute(sa.select(jobs.c.id).where(jobs.c.id.in_(part), jobs.c.state == QUEUED,
                                                                      jobs.c.source == "cluster")).scalars())
        if not queued:
            return adopted
        with self.db.write() as conn:
            rows = []
            for part in chunks(sorted(queued)):
                rows.extend(conn.execute(sa.select(jobs.c.id, jobs.c.queue, jobs.c.job_set, jobs.c.pod_namespace,
                                                   jobs.c.pod_name)
                                         .where(jobs.c.id.in_(part), jobs.c.state == QUEUED,
                                                jobs.c.source == "cluster")))
            event_rows = []
            for r in rows:
                node, running = bound[r.id]
                conn.execute(leases.delete().where(leases.c.job_id == r.id))
                conn.execute(leases.insert().values(job_id=r.id, cluster=cluster, nodes=dump([node]), leased_at=now,
                                                    renewed_at=now, pods_running=1 if running else 0, pods_done=0))
                conn.execute(jobs.update().where(jobs.c.id == r.id, jobs.c.state == QUEUED).values(
                    state=RUNNING if running else PENDING, cluster=cluster, node=node, updated=now,
                    started=now if running else None))
                said = f"pod {r.pod_namespace}/{r.pod_name} found bound to node {node} by Flotilla"
                event_rows.append(event_row(r._mapping, "leased", now, cluster, node, said))
                event_rows.append(event_row(r._mapping, "pending", now, cluster, node))
                if running:
                    event_rows.append(event_row(r._mapping, "running", now, cluster, node))
                adopted.append(r.id)
            insert_events(conn, event_rows)
        return adopted

    def store(self, rows: Sequence[dict], gone: Mapping[str, str], now: float | None = None) -> list[str]:
        """In-cluster pods in one transaction: ``rows`` (job rows keyed by their pod's uid) stored unless their
        id is known, and the queued jobs of ``gone`` (id -> why) cancelled. Returns the ids stored.

        Idempotent: a pod offered twice (a new leader offers every waiting pod again) is stored once.
        """
        now = time.time() if now is None else now
        stored: list[str] = []
        if not rows and not gone:
            return stored
        with self.db.write() as conn:
            known: set[str] = set()
            for part in chunks(sorted({row["id"] for row in rows})):
                known.update(conn.execute(sa.select(jobs.c.id).where(jobs.c.id.in_(part))).scalars())
            queue_names = set(conn.execute(sa.select(queues.c.name)).scalars())
            fresh, event_rows, sets = [], [], set()
            for row in rows:
                if row["id"] in known or row["queue"] not in queue_names:
                    continue
                known.add(row["id"])
                fresh.append({"client_id": None, "state": QUEUED, "cluster": None, "node": None, "retries": 0,
                              "stop_requested": STOP_NONE, "reason": "", "started": None, "finished": None,
                              "updated": now, "source": "cluster", **row})
                ev = {"queue": row["queue"], "job_set": row["job_set"], "job_id": row["id"], "time": now,
                      "cluster": None, "node": None, "reason": ""}
                event_rows.append({**ev, "kind": "submitted",
                                   "reason": f"pod {row['pod_namespace']}/{row['pod_name']} (uid {row['pod_uid']})"})
                event_rows.append({**ev, "kind": "queued"})
                sets.add((row["queue"], row["job_set"]))
                stored.append(row["id"])
            for queue, job_set in sorted(sets):
                if not conn.execute(sa.select(job_sets.c.name)
                                    .where(job_sets.c.queue == queue, job_sets.c.name == job_set)).first():
                    conn.execute(job_sets.insert().values(queue=queue, name=job_set, created=now))
            if fresh:
                conn.execute(jobs.insert(), fresh)
            cancelled = []
            for part in chunks(sorted(gone)):
                cancelled.extend(conn.execute(sa.select(jobs.c.id, jobs.c.queue, jobs.c.job_set)
                                              .where(jobs.c.id.in_(part), jobs.c.state == QUEUED)))
            for r in cancelled:
                conn.execute(jobs.update().where(jobs.c.id == r.id, jobs.c.state == QUEUED)
                             .values(state=CANCELLED, reason=gone[r.id], finished=now, updated=now))
                event_rows.append(event_row(r._mapping, "cancelled", now, reason=gone[r.id]))
            insert_events(conn, event_rows)
        return stored
