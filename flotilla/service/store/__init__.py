"""The durable job store: every transaction the service runs, on SQLite or PostgreSQL.

The store is split by what it keeps, one module each, every one a small
class over the shared :class:`~flotilla.service.store.engine.Database`:

* :mod:`~flotilla.service.store.engine` - engine, serialised write
  transactions, the leader's fence, the event log's append (ids in commit
  order: the rules of the write lock are written there);
* :mod:`~flotilla.service.store.records` - job states, refusals, the records
  the parts take and give;
* :mod:`~flotilla.service.store.queues` - queues and cordons;
* :mod:`~flotilla.service.store.jobs` - submission, cancel, reprioritize, job reads;
* :mod:`~flotilla.service.store.events` - the event log's reads;
* :mod:`~flotilla.service.store.intake` - jobs of in-cluster pods;
* :mod:`~flotilla.service.store.leases` - active jobs, the loop's copy of
  them, leases, a cycle's decisions.

A part uses the engine and the records, never a sibling; what takes two
parts (deleting a queue after cancelling its jobs) is :class:`Store`'s,
which keeps one method per transaction for its callers.
"""

from __future__ import annotations

import time
from typing import Iterable, Mapping, Sequence

from flotilla.service.settings import QueueSpec
from flotilla.service.store.engine import Database, JsonCache, chunks
from flotilla.service.store.events import EVENT_KINDS, EVENT_STATE, Events, event_dict, rebuild_states
from flotilla.service.store.intake import Intake
from flotilla.service.store.jobs import Jobs, new_job_id
from flotilla.service.store.leases import ActiveCopy, ActiveJob, Beat, IngestResult, Leases, Rules
from flotilla.service.store.queues import Queues
from flotilla.service.store.records import (ACTIVE, CANCELLED, FAILED, LEASED, NONTERMINAL, PENDING, PREEMPTED, QUEUED,
                                            RUNNING, STATES, STOP_CANCEL, STOP_DEADLINE, STOP_NONE, SUCCEEDED,
                                            TERMINAL, Conflict, Fenced, NewJob, NotFound, Pod, QueuedJob, Rejection,
                                            StoreError, SubmissionRejected, Submitted, retiring_reason)

__all__ = [
    "ACTIVE", "CANCELLED", "EVENT_KINDS", "EVENT_STATE", "FAILED", "LEASED", "NONTERMINAL", "PENDING", "PREEMPTED",
    "QUEUED", "RUNNING", "STATES", "STOP_CANCEL", "STOP_DEADLINE", "STOP_NONE", "SUCCEEDED", "TERMINAL",
    "ActiveCopy", "ActiveJob", "Beat", "Conflict", "Fenced", "JsonCache", "NewJob", "NotFound", "Pod", "QueuedJob",
    "Rejection", "Store", "StoreError", "SubmissionRejected", "Submitted", "chunks", "event_dict", "new_job_id",
    "rebuild_states", "retiring_reason",
]


class Store(Database):
    """The job store on ``url`` (``sqlite:///path.db`` or ``postgresql+psycopg://...``): one method, one transaction.

    The transactions plumbing (``write``, ``read``, ``fenced``, ``now``,
    ``migrate``...) is the :class:`~flotilla.service.store.engine.Database`'s;
    each other method is its part's.
    """

    def __init__(self, url: str, *, migrate: bool = True, pool_size: int = 10):
        super().__init__(url, migrate=migrate, pool_size=pool_size)
        self._queues = Queues(self)
        self._jobs = Jobs(self)
        self._events = Events(self)
        self._intake = Intake(self)
        self._leases = Leases(self)

    # -- queues and cordons ------------------------------------------------------
    def sync_queues(self, specs: Iterable[QueueSpec], now: float | None = None) -> dict[str, list[str]]:
        return self._queues.sync(specs, now)

    def remove_retired_queues(self, now: float | None = None) -> list[str]:
        return self._queues.remove_retired(now)

    def create_queue(self, spec: QueueSpec, now: float | None = None) -> QueueSpec:
        return self._queues.create(spec, now)

    def update_queue(self, spec: QueueSpec, now: float | None = None) -> QueueSpec:
        return self._queues.update(spec, now)

    def delete_queue(self, name: str, *, force: bool = False, by: str = "", now: float | None = None) -> dict:
        """Delete a queue and its whole history: jobs, job sets, events, clientIds, gang ids, its cordon.

        Refused (:class:`Conflict`) while the queue has jobs that are not
        finished; ``force`` cancels them first (queued ones at once; leased
        and running ones are asked to stop, and the deletion is refused until
        their clusters have stopped them, as Armada refuses). Nothing of the
        queue survives, so a queue created later under the same name starts
        empty. One ``deleted`` event per job, outside every job set, tells
        the scheduling loop's copies that the job is gone.
        """
        now = time.time() if now is None else now
        cancelled: dict[str, list[str]] = {"cancelled": [], "cancelling": []}
        if force and self.get_queue(name) is not None:
            cancelled = self.cancel(name, states=NONTERMINAL, by=by, now=now)
        deleted = self._queues.delete(name, force=force, now=now)
        return {"deleted": name, "jobs": deleted, **cancelled}

    def get_queue(self, name: str) -> QueueSpec | None:
        return self._queues.get(name)

    def list_queues(self) -> list[QueueSpec]:
        return self._queues.list()

    def set_cordon(self, kind: str, name: str, on: bool, now: float | None = None) -> bool:
        return self._queues.set_cordon(kind, name, on, now)

    def cordoned(self, kind: str) -> set[str]:
        return self._queues.cordoned(kind)

    def queue_counts(self, name: str) -> dict[str, int]:
        return self._jobs.counts(name)

    # -- jobs --------------------------------------------------------------------
    def submit(self, queue: str, job_set: str, owner: str, new_jobs: Sequence[NewJob],
               now: float | None = None) -> list[Submitted]:
        return self._jobs.submit(queue, job_set, owner, new_jobs, now)

    def missing_jobs(self, queue: str, job_set: str | None, job_ids: Sequence[str]) -> list[str]:
        return self._jobs.missing(queue, job_set, job_ids)

    def cancel(self, queue: str, job_set: str | None = None, job_ids: Sequence[str] | None = None,
               states: Sequence[str] | None = None, by: str = "", now: float | None = None) -> dict[str, list[str]]:
        return self._jobs.cancel(queue, job_set, job_ids, states, by, now)

    def reprioritize(self, queue: str, priority: int, job_set: str | None = None,
                     job_ids: Sequence[str] | None = None, by: str = "", now: float | None = None) -> list[str]:
        return self._jobs.reprioritize(queue, priority, job_set, job_ids, by, now)

    def get_job(self, job_id: str) -> dict | None:
        return self._jobs.get(job_id)

    def job_spec(self, job_id: str) -> dict | None:
        return self._jobs.specs([job_id]).get(job_id)

    def job_specs(self, job_ids: Iterable[str]) -> dict[str, dict]:
        return self._jobs.specs(job_ids)

    def list_jobs(self, queue: str | None = None, job_set: str | None = None, states: Sequence[str] | None = None,
                  limit: int | None = None) -> list[dict]:
        return self._jobs.list(queue, job_set, states, limit)

    def job_states(self) -> dict[str, str]:
        return self._jobs.states()

    def count_jobs(self, states: Sequence[str] | None = None) -> int:
        return self._jobs.count(states)

    def job_counts(self, queue: str | None = None) -> dict[str, int]:
        return self._jobs.counts(queue)

    def load_queued(self) -> list[QueuedJob]:
        return self._jobs.load_queued()

    def queued_changes(self, after: int) -> tuple[int, list[str], dict[str, QueuedJob]]:
        return self._jobs.queued_changes(after)

    # -- events --------------------------------------------------------------------
    def events(self, queue: str, job_set: str, after: int = 0, limit: int = 1000) -> list[dict]:
        return self._events.of_job_set(queue, job_set, after, limit)

    def all_events(self, after: int = 0, limit: int = 100000) -> list[dict]:
        return self._events.all(after, limit)

    def last_event_id(self) -> int:
        return self._events.last_id()

    # -- in-cluster pods (flotilla.service.intake) -------------------------------------
    def known_jobs(self, job_ids: Iterable[str]) -> dict[str, tuple[str | None, str]]:
        return self._intake.known_jobs(job_ids)

    def gang_live(self, queue: str, gang_id: str) -> tuple[int, int, int]:
        return self._intake.gang_live(queue, gang_id)

    def gang_annotation(self, queue: str, gang_id: str, key: str) -> str | None:
        return self._intake.gang_annotation(queue, gang_id, key)

    def queued_from_cluster(self, cluster: str) -> dict[str, str]:
        return self._intake.queued_from_cluster(cluster)

    def cancelled_from_cluster(self, after: int, limit: int = 10_000) -> tuple[int, list[tuple[str, ...]]]:
        return self._intake.cancelled_from_cluster(after, limit)

    def adopt_bound(self, cluster: str, bound: Mapping[str, tuple[str, bool]], now: float) -> list[str]:
        return self._intake.adopt_bound(cluster, bound, now)

    def intake(self, rows: Sequence[dict], gone: Mapping[str, str], now: float | None = None) -> list[str]:
        return self._intake.store(rows, gone, now)

    # -- leases: the scheduling loop's transactions -----------------------------------------
    def load_active(self) -> dict[str, ActiveJob]:
        return self._leases.load_active()

    def update_active(self, rules: Rules, now: float, copy: ActiveCopy | None = None) -> IngestResult:
        """See :meth:`Leases.update_active <flotilla.service.store.leases.Leases.update_active>`; the cycle calls
        it through :func:`flotilla.service.leases.ingest`, with the lease rules."""
        return self._leases.update_active(rules, now, copy)

    def record_cycle(self, leased: Mapping[str, tuple[str, list[str]]], preempted: Mapping[str, str],
                     now: float) -> tuple[set[str], set[str]]:
        return self._leases.record_cycle(leased, preempted, now)

    def mark_pending(self, job_ids: Iterable[str], now: float,
                     known: Mapping[str, tuple[str, str, str, str]] | None = None) -> int:
        return self._leases.mark_pending(job_ids, now, known)
