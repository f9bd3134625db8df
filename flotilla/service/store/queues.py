"""Queues and cordons: the ``queues`` and ``cordons`` tables.

A queue's row holds its spec (weight, limits, owners, namespaces, retry
policy) as the config or the API gave it. Deleting a queue removes its
whole history; cancelling its jobs first is the :class:`~flotilla.service.store.Store`'s
to compose (this part touches no job but to delete it).
"""

from __future__ import annotations

import json
import time
from typing import Iterable

import sqlalchemy as sa

from flotilla.service.retry import dump_policy
from flotilla.service.schema import cordons, events, job_sets, jobs, leases, queues
from flotilla.service.settings import QueueSpec
from flotilla.service.store.engine import Database, chunks, dump, insert_events
from flotilla.service.store.records import NONTERMINAL, Conflict, NotFound


def queue_row(spec: QueueSpec, now: float) -> dict:
    return {"name": spec.name, "weight": float(spec.weight), "limits": dump(dict(spec.limits)),
            "owners": dump(list(spec.owners)), "group_owners": dump(list(spec.group_owners)),
            "retry_policy": dump_policy(spec.retry_policy), "namespaces": dump(list(spec.namespaces)),
            "updated": now}


def queue_spec(row) -> QueueSpec:
    return QueueSpec(row.name, row.weight, json.loads(row.limits), tuple(json.loads(row.owners)),
                     tuple(json.loads(row.group_owners)), tuple(json.loads(row.namespaces)),
                     retry_policy=tuple(json.loads(row.retry_policy)) if row.retry_policy else ())


class Queues:
    """The queues' transactions on ``db``."""

    def __init__(self, db: Database):
        self.db = db

    def sync(self, specs: Iterable[QueueSpec], now: float | None = None) -> None:
        """Make the config's queues exist with the config's values; queues made through the API stay."""
        now = time.time() if now is None else now
        with self.db.write() as conn:
            existing = {row.name for row in conn.execute(sa.select(queues.c.name))}
            for spec in specs:
                row = queue_row(spec, now)
                if spec.name in existing:
                    conn.execute(queues.update().where(queues.c.name == spec.name).values(**row))
                else:
                    conn.execute(queues.insert().values(created=now, **row))

    def create(self, spec: QueueSpec, now: float | None = None) -> QueueSpec:
        now = time.time() if now is None else now
        with self.db.write() as conn:
            if conn.execute(sa.select(queues.c.name).where(queues.c.name == spec.name)).first():
                raise Conflict(f"queue {spec.name!r} already exists")
            conn.execute(queues.insert().values(created=now, **queue_row(spec, now)))
        return spec

    def update(self, spec: QueueSpec, now: float | None = None) -> QueueSpec:
        now = time.time() if now is None else now
        with self.db.write() as conn:
            result = conn.execute(queues.update().where(queues.c.name == spec.name).values(**queue_row(spec, now)))
            if result.rowcount == 0:
                raise NotFound(f"queue {spec.name!r} does not exist")
        return spec

    def delete(self, name: str, *, force: bool, now: float) -> int:
        """Delete a queue with no unfinished job, and its whole history; returns how many jobs went with it.

        One ``deleted`` event per job, outside every job set, tells the
        scheduling loop's copies that the job is gone. ``force`` only words
        the refusal: its cancels were asked for before.
        """
        with self.db.write() as conn:
            if not conn.execute(sa.select(queues.c.name).where(queues.c.name == name)).first():
                raise NotFound(f"queue {name!r} does not exist")
            active = conn.execute(sa.select(sa.func.count()).select_from(jobs)
                                  .where(jobs.c.queue == name, jobs.c.state.in_(NONTERMINAL))).scalar_one()
            if active and force:
                raise Conflict(f"queue {name!r} has {active} jobs still stopping on their clusters; "
                               f"delete it again when they have stopped")
            if active:
                raise Conflict(f"queue {name!r} has {active} active jobs; cancel them first, or delete with force=true")
            ids = list(conn.execute(sa.select(jobs.c.id).where(jobs.c.queue == name)).scalars())
            for part in chunks(ids):
                conn.execute(leases.delete().where(leases.c.job_id.in_(part)))
            conn.execute(events.delete().where(events.c.queue == name))
            conn.execute(jobs.delete().where(jobs.c.queue == name))
            conn.execute(job_sets.delete().where(job_sets.c.queue == name))
            conn.execute(cordons.delete().where(cordons.c.kind == "queue", cordons.c.name == name))
            conn.execute(queues.delete().where(queues.c.name == name))
            insert_events(conn, [{"queue": "", "job_set": "", "job_id": job_id, "kind": "deleted", "time": now,
                                  "cluster": None, "node": None, "reason": ""} for job_id in ids])
        return len(ids)

    def get(self, name: str) -> QueueSpec | None:
        with self.db.read() as conn:
            row = conn.execute(sa.select(queues).where(queues.c.name == name)).first()
        return queue_spec(row) if row else None

    def list(self) -> list[QueueSpec]:
        with self.db.read() as conn:
            return [queue_spec(row) for row in conn.execute(sa.select(queues).order_by(queues.c.name))]

    # -- cordons: queues that schedule nothing new, nodes that take no new jobs ----------
    def set_cordon(self, kind: str, name: str, on: bool, now: float | None = None) -> bool:
        """Cordon (``on``) or uncordon ``name`` of ``kind`` (``queue`` or ``node``); True when it changed."""
        with self.db.write() as conn:
            present = conn.execute(sa.select(cordons.c.name).where(cordons.c.kind == kind,
                                                                   cordons.c.name == name)).first() is not None
            if on and not present:
                conn.execute(cordons.insert().values(kind=kind, name=name, since=time.time() if now is None else now))
            elif present and not on:
                conn.execute(cordons.delete().where(cordons.c.kind == kind, cordons.c.name == name))
            return present != on

    def cordoned(self, kind: str) -> set[str]:
        with self.db.read() as conn:
            return {name for (name,) in conn.execute(sa.select(cordons.c.name).where(cordons.c.kind == kind))}
