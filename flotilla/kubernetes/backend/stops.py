"""The stop path: the pods of the jobs a decision preempted or cancelled, left out of the snapshots and deleted with
their grace period (the bookkeeping under the cluster's lock; the deletes on pool threads, taking the lock themselves).

Written rules (the cluster's docstring, Stopped pods, states them for the
whole):

* a stopped job's held start is dropped and the job said stopped at once:
  no pod was made; a start whose pod is not made yet has it deleted as
  soon as it is made (``kill_on_create``);
* a pod Flotilla deletes by a decision is left out of the snapshots from
  then on (``stopped``): the cycle that stopped it gave its room away. Not
  a pod already being deleted by someone else or given up: their room was
  never given;
* the delete uses the job's own grace period when it names one, else the
  pod's; a preempted in-cluster pod is told why first (its
  ``DisruptionTarget`` condition, so its Job's podFailurePolicy can tell a
  preemption from a failure), and a preempted pod of ours has its log tails
  kept for ``finished_pod_retention`` (Kubernetes keeps no log of a deleted
  pod);
* ``preempted`` or ``cancelled`` is said once the delete is accepted, not
  for a pod given up meanwhile nor about a run its job has left since; a
  delete refused or not made counts the pod again.
"""

from __future__ import annotations

from typing import Callable

import structlog

from flotilla.core.model import Job
from flotilla.kubernetes.backend.ledger import Ledger
from flotilla.kubernetes.backend.podcache import CachedPod, PodCache
from flotilla.kubernetes.client import ApiError, Unreachable
from flotilla.kubernetes.pods import PodSettings, delete_grace

log = structlog.get_logger("flotilla.kubernetes")


class Stops:
    """The stop path of cluster ``cluster`` (module docstring).

    ``lock``: the cluster's lock (the pool threads take it). Shared: ``book``, ``cache``, ``counters``. The parts
    it uses: ``held`` (the held starts' ids), ``writes``, ``reporting``, ``victim_logs``. Callables:
    ``drop_held(job_id, kind)`` a held start forgotten and said; ``read_tails(client, cluster, key, containers)``
    a pod's log tails (:mod:`flotilla.kubernetes.backend.victimlogs`).
    """

    def __init__(self, cluster: str, lock, book: Ledger, cache: PodCache, settings: PodSettings,
                 clock: Callable[[], float], counters: dict, *, client, held, writes, reporting, victim_logs,
                 read_tails: Callable, drop_held: Callable[[str, str | None], None],
                 finished_pod_retention: float) -> None:
        self.cluster = cluster
        self._lock = lock
        self.book = book
        self.cache = cache
        self.settings = settings
        self.clock = clock
        self.counters = counters
        self.client = client
        self.held = held
        self.writes = writes
        self.reporting = reporting
        self.victim_logs = victim_logs
        self.read_tails = read_tails
        self.drop_held = drop_held
        self.finished_pod_retention = finished_pod_retention

    def stop(self, preempt, cancel, work: list[tuple]) -> None:
        """Record the stops of a decision (under the lock); the deletes to make go to ``work``."""
        book = self.book
        for kind, jobs in (("preempted", preempt), ("cancelled", cancel)):
            for job in jobs:
                if job.id in self.held.ids:
                    self.drop_held(job.id, kind)
                    continue
                book.stopping[job.id] = kind
                key = book.job_pod.get(job.id)
                if key is None and job.id in book.inflight:
                    book.kill_on_create[job.id] = kind
                    continue
                self.mark_stopped(key)
                work.append((self.delete, job, key, kind, book.starts.get(job.id, 0)))

    def mark_stopped(self, key: tuple[str, str] | None) -> None:
        """Leave pod ``key`` out of the snapshots from now on: Flotilla deletes it by a decision (module docstring).
        Not a pod already being deleted by someone else or given up: their room was never given."""
        pod = self.cache.get(key) if key is not None else None
        if key is None or key in self.book.stopped or self.book.reported.get(key) == "lost" \
                or (pod is not None and pod.deleting and key not in self.book.ignore_delete):
            return
        self.book.stopped[key] = self.clock()

    def delete(self, job: Job, key: tuple[str, str] | None, kind: str, started: int = 0) -> None:
        """Delete the job's pod ``key``; report ``kind`` unless the job has been started again since
        (``started``: its start count when the delete was asked for) or its pod was already given up."""
        if key is None:
            with self._lock:
                self.book.stopping.pop(job.id, None)
            return
        with self._lock:
            self.mark_stopped(key)   # (a pod made after its job was stopped is marked only now)
        namespace, name = key
        grace = delete_grace(job, self.settings)
        pod = self.cache.get(key)
        if kind == "preempted" and pod is not None and pod.incluster:
            # Said before the delete, so that the pod's Job (podFailurePolicy) can tell a preemption from a failure.
            self.reporting.reporter.disruption_target(namespace, name, pod.uid,
                                                      f"flotilla: preempted by the scheduler to make room for other "
                                                      f"jobs (job {job.id})")
        elif kind == "preempted" and pod is not None and pod.job is not None and self.finished_pod_retention > 0 \
                and pod.phase == "Running":
            self._keep_victim_log(pod)
        try:
            self.writes.delete_pod(key, grace)
        except ApiError as exc:
            if exc.status != 404:
                log.warning("kubernetes.delete_failed", cluster=self.cluster, job=job.id, error=str(exc))
                with self._lock:
                    self.book.stopping.pop(job.id, None)
                    self.book.stopped.pop(key, None)
                return
        except Unreachable as exc:
            # Keep it counted out; the next snapshot after reconnecting shows the pod again if it survived.
            log.warning("kubernetes.delete_unreachable", cluster=self.cluster, job=job.id, error=str(exc))
            with self._lock:
                self.book.stopping.pop(job.id, None)
                self.book.stopped.pop(key, None)
            return
        with self._lock:
            self.counters["deleted"] += 1
            self.book.ignore_delete.add(key)
            if self.book.reported.get(key) == "lost" or self.book.starts.get(job.id, 0) != started:
                return  # already reported, or about an earlier run of a job that runs again
            self.book.reported[key] = kind
            pod = self.cache.get(key)
            node = pod.node if pod is not None else job.node
            self.book.emit(job.id, kind, node, "preempted by the scheduler" if kind == "preempted" else "cancelled",
                           run=started)

    def _keep_victim_log(self, pod: CachedPod) -> None:
        """Read the end of each container's log of a preempted pod about to be deleted (Kubernetes keeps no log of
        a deleted pod) and keep it for ``finished_pod_retention`` (flotilla.kubernetes.backend.victimlogs)."""
        logs, cut = self.read_tails(self.client, self.cluster, pod.key, pod.containers)
        if not logs:
            return
        with self._lock:
            self.victim_logs.keep(pod.job.id, self.clock() + self.finished_pod_retention,
                                  f"{pod.key[0]}/{pod.key[1]}", logs, cut)


__all__ = ["Stops"]
