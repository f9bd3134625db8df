"""A scheduler loop against live cluster backends, with jobs held in memory.

This is the smallest complete job source: jobs are submitted to it, each
``cycle()`` reads every backend's snapshot (a cluster that cannot be read is
left out of that cycle), runs the scheduler with the lease action handing
decisions to the backends, and keeps each job's state from the decisions and
the backends' events. ``flotilla simulate --real-time``, the kwok tests and
the throughput benchmark use it; the service keeps the same states in its
store instead.

Leases follow the rules of :mod:`flotilla.core.leases`, the service's: a
job placed on a cluster keeps its lease while that cluster cannot be read,
until ``lease_timeout`` seconds have passed since the cluster was last read
(each read renews the leases of its jobs); then the run is given up and
the job queued again, or failed once it has had ``max_retries`` retries. A
lost pod gives its run up the same way, except that a pod lost with its
node (``NodeLost``) returns its job to the queue without using a retry. If
the cluster comes back with the old pod still there, that pod is
cancelled, so a job never runs twice.

A gang runs all together or not at all (:mod:`flotilla.plugins.gang`). So when
a member of a gang (not an elastic one) goes back to the queue from a
cluster's report (its bind returned for want of room, its pod lost) while its
mates are leased or running, the mates' pods are cancelled and they go back
to the queue with it, using none of their retries: the gang is placed again
whole. Left there, the member could never be placed on its own.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

import structlog

from flotilla.core.backend import ClusterDecisions, ClusterUnavailable, JobEvent
from flotilla.core.decisions import Decisions
from flotilla.core.leases import LEASE_EXPIRED, Failure, decide, expiry_reason, lease_expired, lost_reason, \
    returns_without_retry
from flotilla.core.model import ClusterSnapshot, Job, Snapshot

log = structlog.get_logger("flotilla.runner")

QUEUED, LEASED, RUNNING = "queued", "leased", "running"
TERMINAL = frozenset({"succeeded", "failed", "cancelled"})


@dataclass(slots=True, eq=False)
class JobRecord:
    job: Job                       # the job as queued (no cluster/node)
    state: str = QUEUED
    cluster: str | None = None
    node: str | None = None
    submitted_at: float = 0.0      # wall clock
    leased_at: float | None = None
    running_at: float | None = None
    finished_at: float | None = None
    preemptions: int = 0
    retries: int = 0               # runs the platform lost that counted (flotilla.core.leases)
    reason: str = ""
    history: list[tuple[float, str, str | None, str | None]] = field(default_factory=list)


@dataclass(slots=True)
class CycleResult:
    decisions: Decisions | None
    available: list[str]
    unavailable: list[str]
    expired: list[str]
    started: float
    seconds: float


class Runner:
    """Jobs in memory, a scheduler, and backends by cluster name; see the module docstring."""

    def __init__(self, scheduler, backends: Mapping[str, object], lease_timeout: float = 60.0,
                 clock: Callable[[], float] = time.time, seed: int = 0, requeue_preempted: bool = True,
                 max_retries: int = 3):
        self.scheduler = scheduler
        self.backends = dict(backends)
        self.lease_timeout = lease_timeout
        self.max_retries = max_retries
        self.clock = clock
        self.rng = random.Random(seed)
        self.requeue_preempted = requeue_preempted
        self.jobs: dict[str, JobRecord] = {}
        self._queued: dict[str, JobRecord] = {}
        #: (queue, gang id) -> the ids of its members, for gangs that run all together (not elastic ones).
        self._gangs: dict[tuple[str, str], list[str]] = {}
        self.last_seen: dict[str, float] = {name: clock() for name in self.backends}
        self.cycles = 0
        self.queue_names = {q.name for q in scheduler.queues()}
        self.priority_class_names = {pc.name for pc in scheduler.priority_classes()}
        self.on_event: Callable[[JobRecord, str], None] | None = None

    # -- jobs --------------------------------------------------------------------------------
    def submit(self, jobs: Iterable[Job]) -> None:
        now = self.clock()
        for job in jobs:
            if job.id in self.jobs:
                continue
            record = JobRecord(job, submitted_at=now)
            record.history.append((now, "submitted", None, None))
            self.jobs[job.id] = record
            self._queued[job.id] = record
            gang = job.gang
            if gang is not None and not 0 < gang.min_available < gang.cardinality:
                self._gangs.setdefault((job.queue, gang.id), []).append(job.id)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for record in self.jobs.values():
            out[record.state] = out.get(record.state, 0) + 1
        return out

    def done(self) -> bool:
        return all(record.state in TERMINAL for record in self.jobs.values())

    def _set(self, record: JobRecord, state: str, now: float, cluster: str | None = None, node: str | None = None,
             reason: str = "") -> None:
        record.history.append((now, state, cluster, node))
        if state == QUEUED:
            record.cluster = record.node = None
            record.leased_at = record.running_at = None
            self._queued[record.job.id] = record
        else:
            self._queued.pop(record.job.id, None)
            if cluster is not None:
                record.cluster, record.node = cluster, node
        record.state = state
        if reason:
            record.reason = reason
        if self.on_event is not None:
            self.on_event(record, state)

    # -- events ------------------------------------------------------------------------------
    def pump_events(self) -> int:
        count = 0
        for name, backend in self.backends.items():
            for event in backend.poll_events():
                self._on_event(event)
                count += 1
        return count

    def _on_event(self, event: JobEvent) -> None:
        record = self.jobs.get(event.job_id)
        if record is None:
            return
        now = event.time or self.clock()
        if record.cluster != event.cluster and event.kind != "lost":
            return  # stale: from a cluster the job is no longer leased to
        if event.kind == "running" and record.state == LEASED:
            record.running_at = now
            self._set(record, RUNNING, now, event.cluster, event.node or record.node)
        elif event.kind in ("succeeded", "failed") and record.state in (LEASED, RUNNING):
            record.finished_at = now
            self._set(record, event.kind, now, event.cluster, event.node or record.node, event.reason)
        elif event.kind == "lost" and record.state in (LEASED, RUNNING) and record.cluster == event.cluster:
            failure = Failure(True, event.exit_code, event.cause)
            reason = lost_reason(event.cluster, event.reason)
            if returns_without_retry(failure):
                self._set(record, QUEUED, now, reason=reason)
            else:
                self._give_up(record, failure, reason, now)
            self._return_gang(record, event.cluster, now)
        elif event.kind == "returned" and record.state in (LEASED, RUNNING):
            self._set(record, QUEUED, now, reason=event.reason)   # not bound, or refused by the kubelet
            self._return_gang(record, event.cluster, now)

    def _return_gang(self, record: JobRecord, cluster: str, now: float) -> None:
        """``record``'s gang goes back to the queue whole once ``record`` is queued again (module docstring)."""
        job = record.job
        if record.state != QUEUED or job.gang is None:
            return
        mates = [self.jobs[i] for i in self._gangs.get((job.queue, job.gang.id), ()) if i != job.id]
        mates = [m for m in mates if m.state in (LEASED, RUNNING) and m.cluster == cluster]
        if not mates:
            return
        try:
            self.backends[cluster].apply(ClusterDecisions(cancel=[m.job for m in mates]))
        except ClusterUnavailable:
            pass   # the pods left there are cancelled as stale once the cluster is read again (_reconcile)
        for mate in mates:
            self._set(mate, QUEUED, now, reason=f"gang {job.gang.id}: {job.id} went back to the queue "
                                                f"({record.reason})")

    def _give_up(self, record: JobRecord, failure: Failure, reason: str, now: float) -> None:
        """A run the platform lost: queued again while the job has retries left, else failed."""
        decision = decide((), failure, self.max_retries)
        if decision.retries_left(record.retries):
            record.retries += 1
            self._set(record, QUEUED, now, reason=f"{reason} ({decision.retry_text(record.retries)})")
        else:
            record.finished_at = now
            self._set(record, "failed", now, reason=decision.fail_text(reason))

    # -- one cycle ---------------------------------------------------------------------------
    def cycle(self) -> CycleResult:
        started = self.clock()
        self.pump_events()
        snapshots: list[ClusterSnapshot] = []
        available: dict[str, object] = {}
        unavailable: list[str] = []
        for name, backend in self.backends.items():
            try:
                snap = backend.snapshot()
            except ClusterUnavailable as exc:
                unavailable.append(name)
                log.info("runner.cluster_unavailable", cluster=name, reason=str(exc))
                continue
            self.last_seen[name] = self.clock()
            snapshots.append(self._reconcile(name, backend, snap))
            available[name] = backend
        now = self.clock()
        expired = []
        for name in unavailable:
            renewed = self.last_seen.get(name, now)
            if lease_expired(renewed, now, self.lease_timeout):
                for record in list(self.jobs.values()):
                    if record.cluster == name and record.state in (LEASED, RUNNING):
                        expired.append(record.job.id)
                        self._give_up(record, LEASE_EXPIRED, expiry_reason(name, renewed, now, self.lease_timeout),
                                      now)
        if not snapshots:
            return CycleResult(None, [], unavailable, expired, started, self.clock() - started)
        snapshot = Snapshot(snapshots, [record.job for record in self._queued.values()], self.scheduler.queues(),
                            self.scheduler.priority_classes(), self.scheduler.config.default_priority_class, now)
        decisions = self.scheduler.run_cycle(snapshot, self.rng, backends=available)
        now = self.clock()
        for placement in decisions.scheduled:
            record = self.jobs[placement.job.id]
            record.leased_at = now
            self._set(record, LEASED, now, placement.cluster, placement.node)
        for job in decisions.preempted:
            record = self.jobs.get(job.id)
            if record is None:
                continue
            record.preemptions += 1
            if self.requeue_preempted:
                self._set(record, QUEUED, now, reason="preempted")
            else:
                record.finished_at = now
                self._set(record, "failed", now, reason="preempted")
        self.cycles += 1
        return CycleResult(decisions, list(available), unavailable, expired, started, self.clock() - started)

    def _reconcile(self, name: str, backend, snap: ClusterSnapshot) -> ClusterSnapshot:
        """Keep the snapshot's running jobs that this runner leased there; cancel stale duplicates."""
        running: list[Job] = []
        stale: list[Job] = []
        foreign = {node: dict(used) for node, used in snap.foreign.items()}
        foreign_ports = dict(snap.foreign_ports)
        for job in snap.running:
            record = self.jobs.get(job.id)
            if record is None:
                if job.queue in self.queue_names and (not job.priority_class
                                                      or job.priority_class in self.priority_class_names):
                    running.append(job)  # someone else's Flotilla job (an earlier run): it counts for its queue
                else:  # a queue or priority class this config does not know: just resources taken
                    used = foreign.setdefault(job.node, {})
                    for resource, amount in job.requests.items():
                        used[resource] = used.get(resource, 0) + amount
                    used["pods"] = used.get("pods", 0) + 1   # and one of the node's pod slots
                    if job.host_ports:
                        foreign_ports[job.node] = foreign_ports.get(job.node, ()) + job.host_ports
                continue
            if record.cluster == name and record.state in (LEASED, RUNNING):
                running.append(job)
            elif record.state == QUEUED and record.preemptions == 0 and record.cluster is None \
                    and not any(h[1] == "leased" for h in record.history):
                running.append(job)  # adopted: it was running before we knew it
                self._set(record, RUNNING, self.clock(), name, job.node)
            else:
                stale.append(job)
        if stale:
            log.warning("runner.stale_pods", cluster=name, jobs=[job.id for job in stale])
            backend.apply(ClusterDecisions(cancel=stale))
        return ClusterSnapshot(snap.name, snap.nodes, running, foreign, snap.foreign_pods, volumes=snap.volumes,
                               foreign_ports=foreign_ports, namespace_labels=snap.namespace_labels)

    def run(self, until: Callable[["Runner"], bool], timeout: float, period: float = 0.2,
            on_cycle: Callable[[CycleResult], None] | None = None) -> bool:
        """Cycle every ``period`` seconds until ``until(self)`` holds (True) or ``timeout`` passes (False)."""
        deadline = time.monotonic() + timeout
        while True:
            t = time.monotonic()
            result = self.cycle()
            if on_cycle is not None:
                on_cycle(result)
            self.pump_events()
            if until(self):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(max(0.0, period - (time.monotonic() - t)))


def placements(runner: Runner) -> dict[str, tuple[str | None, str | None]]:
    return {job_id: (r.cluster, r.node) for job_id, r in runner.jobs.items() if r.state in (LEASED, RUNNING)}


__all__ = ["CycleResult", "JobRecord", "Runner", "placements"]
