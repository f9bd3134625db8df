"""Queues and cordons: the ``queues`` and ``cordons`` tables.

A queue's row holds its spec (weight, limits, owners, namespaces, retry
policy) as the config or the API gave it, and its origin: ``config`` for a
queue the config file lists, ``api`` for one made through the API or by a
placement rule. Deleting a queue removes its whole history; cancelling its
jobs first is the :class:`~flotilla.service.store.Store`'s to compose (this
part touches no job but to delete it).

The config is declarative for its own queues, as a Kueue ClusterQueue
manifest is: a queue the config stops listing (a ``helm rollback``, an
edited file reloaded) is removed with its history when it has no unfinished
job. One that still has some is *retiring*: it takes no new job (a
submission or an in-cluster pod naming it is refused, saying why), the jobs
it has are scheduled and run as usual (nothing queued is lost, unlike a
forced delete), and it is removed once the last of them finishes, as
Kueue keeps a deleted ClusterQueue until its admitted workloads finish and
Armada refuses to delete a queue with active jobs. A retiring queue the
config lists again is an ordinary config queue again. Queues made through
the API are never touched by the config. A store older than origins (v9)
counts its queues as ``api`` until the config lists them.
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
                     retry_policy=tuple(json.loads(row.retry_policy)) if row.retry_policy else (),
                     retiring=row.retiring)


class Queues:
    """The queues' transactions on ``db``."""

    def __init__(self, db: Database):
        self.db = db

    def sync(self, specs: Iterable[QueueSpec], now: float | None = None) -> dict[str, list[str]]:
        """Make the config's queues exist with the config's values, and retire the config queues it no longer lists.

        Returns ``{"removed": [...], "retiring": [...]}``: the config queues
        left out that were removed (no unfinished job), and those retiring
        (see the module's docstring). Queues made through the API stay.
        """
        now = time.time() if now is None else now
        removed: list[str] = []
        retiring: list[str] = []
        with self.db.write() as conn:
            existing = {row.name: row for row in conn.execute(sa.select(queues.c.name, queues.c.origin,
                                                                        queues.c.retiring))}
            listed = set()
            for spec in specs:
                listed.add(spec.name)
                row = {**queue_row(spec, now), "origin": "config", "retiring": None}
                if spec.name in existing:
                    conn.execute(queues.update().where(queues.c.name == spec.name).values(**row))
                else:
                    conn.execute(queues.insert().values(created=now, **row))
            for name, row in sorted(existing.items()):
                if name in listed or row.origin != "config":
                    continue
                if _unfinished(conn, name):
                    if row.retiring is None:
                        conn.execute(queues.update().where(queues.c.name == name).values(retiring=now, updated=now))
                    retiring.append(name)
                else:
                    _remove(conn, name, now)
                    removed.append(name)
        return {"removed": removed, "retiring": retiring}

    def remove_retired(self, now: float | None = None) -> list[str]:
        """Remove the retiring queues whose last unfinished job has finished; returns their names."""
        now = time.time() if now is None else now
        removed: list[str] = []
        with self.db.write() as conn:
            for name in conn.execute(sa.select(queues.c.name).where(queues.c.retiring.is_not(None))
                                     .order_by(queues.c.name)).scalars().all():
                if not _unfinished(conn, name):
                    _remove(conn, name, now)
                    removed.append(name)
        return removed

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
            active = _unfinished(conn, name)
            if active and force:
                raise Conflict(f"queue {name!r} has {active} jobs still stopping on their clusters; "
                               f"delete it again when they have stopped")
            if active:
                raise Conflict(f"queue {name!r} has {active} active jobs; cancel them first, or delete with force=true")
            ids = _remove(conn, name, now)
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


def _unfinished(conn, name: str) -> int:
    """How many jobs of queue ``name`` are not finished (one count on the jobs' (state, queue) index)."""
    return conn.execute(sa.select(sa.func.count()).select_from(jobs)
                        .where(jobs.c.queue == name, jobs.c.state.in_(NONTERMINAL))).scalar_one()


def _remove(conn, name: str, now: float) -> list[str]:
    """Delete queue ``name`` and its whole history (jobs, leases, events, job sets, cordon); returns its job ids.

    One ``deleted`` event per job, outside every job set, tells the
    scheduling loop's copies that the job is gone.
    """
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
    return ids
