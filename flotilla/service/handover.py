"""The service's lease sink: the ``lease`` action's decisions recorded in the store, then applied to the clusters.

:class:`StoreSink` keeps the contract of :class:`flotilla.core.handover.LeaseSink`:

1. :meth:`~StoreSink.record`: one transaction (:meth:`Store.record_cycle
   <flotilla.service.store.Store.record_cycle>`): a lease and a ``leased``
   event per placed job, ``preempted`` per preempted one. A job cancelled
   while the cycle ran is refused there, and not handed over.
2. :meth:`~StoreSink.hand_over`: the leased jobs' specs read by id for
   clusters that create real pods (:mod:`flotilla.service.templates`),
   ``apply`` per cluster, and the jobs a cluster accepted become ``pending``
   (one more transaction). A cluster that fails here keeps its jobs
   ``leased`` until the lease expires and they run elsewhere.

A crash between the two leaves leased jobs that no cluster runs: their
leases expire and they are queued again (:mod:`flotilla.service.leases`).
The sink keeps what it did for the cycle's report (``leased``,
``preempted``) and the time each step took (``timings``, ``cpu``).
"""

from __future__ import annotations

import time
from typing import Callable

import structlog

from flotilla.core.backend import ClusterUnavailable
from flotilla.core.capabilities import Backends
from flotilla.core.handover import Handover
from flotilla.core.model import Job
from flotilla.service.leases import job_of
from flotilla.service.templates import templates_for

log = structlog.get_logger("flotilla.service.loop")

#: The reason a preempted job's event gives.
PREEMPTED = "preempted by the scheduler"


class StoreSink:
    """Record in the store, then apply to the backends; one per cycle (see the module docstring)."""

    def __init__(self, store, backends: Backends, pods_of: Callable[[str], list[Job]], now: float,
                 clock: Callable[[], float] = time.time):
        self.store = store
        self.backends = backends
        self.pods_of = pods_of        # a job's running pods, as the scheduler saw them (RunningPods.of)
        self.now = now
        self.clock = clock
        #: job id -> (cluster, the node of each pod in pod order), as recorded.
        self.leased: dict[str, tuple[str, list[str]]] = {}
        self.preempted: set[str] = set()
        self.pending: list[str] = []
        self.timings = {"record": 0.0, "lease": 0.0}
        self.cpu = {"record": 0.0, "lease": 0.0}

    def record(self, handover: Handover) -> Handover:
        t0, c0 = time.perf_counter(), time.thread_time()
        placed: dict[str, dict[int, tuple[str, str]]] = {}
        for placement in handover.start:
            job_id = job_of(placement.job.id)
            index = int(placement.job.id.split("#", 1)[1]) if "#" in placement.job.id else 0
            placed.setdefault(job_id, {})[index] = (placement.cluster, placement.node)
        leased: dict[str, tuple[str, list[str]]] = {}
        for job_id, pods in placed.items():
            clusters_used = {cluster for cluster, _ in pods.values()}
            if len(clusters_used) != 1:  # cannot happen: pods of a job are one gang
                log.error("lease.split_job", job=job_id, clusters=sorted(clusters_used))
                continue
            leased[job_id] = (clusters_used.pop(), [pods[k][1] for k in sorted(pods)])
        preempted = {job_of(job.id): PREEMPTED for job in handover.stop}
        done_leased, done_preempted = self.store.record_cycle(leased, preempted, self.now)
        self.leased = {job_id: leased[job_id] for job_id in done_leased}
        self.preempted = set(done_preempted)
        accepted = Handover([p for p in handover.start if job_of(p.job.id) in done_leased],
                            [pod for job_id in sorted(done_preempted) for pod in self.pods_of(job_id)])
        self._took("record", t0, c0)
        return accepted

    def hand_over(self, accepted: Handover) -> None:
        t0, c0 = time.perf_counter(), time.thread_time()
        by_cluster = accepted.by_cluster()
        first_pod: dict[str, Job] = {}
        for placement in accepted.start:
            first_pod.setdefault(job_of(placement.job.id), placement.job)
        templates = templates_for(self.store, self.backends,
                                  {cluster: decisions.start for cluster, decisions in by_cluster.items()})
        pending: list[str] = []
        for cluster, decisions in by_cluster.items():
            backend = self.backends.get(cluster)
            if backend is None:
                continue
            decisions.templates = templates
            try:
                backend.apply(decisions)
            except ClusterUnavailable:
                log.info("cluster.unavailable", cluster=cluster, during="lease")
                continue
            except Exception:
                log.exception("lease.apply_failed", cluster=cluster)
                continue
            pending.extend({job_of(p.job.id) for p in decisions.start})
        known = {}
        for job_id in pending:
            pod = first_pod[job_id]
            cluster, nodes = self.leased[job_id]
            known[job_id] = (pod.queue, pod.job_set, cluster, ",".join(dict.fromkeys(nodes)))
        self.store.mark_pending(pending, self.clock(), known)
        self.pending = pending
        self._took("lease", t0, c0)

    def _took(self, step: str, t0: float, c0: float) -> None:
        self.timings[step] += time.perf_counter() - t0
        self.cpu[step] += time.thread_time() - c0


__all__ = ["PREEMPTED", "StoreSink"]
