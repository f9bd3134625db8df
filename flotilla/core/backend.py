"""The cluster backend protocol, and the simulated in-memory cluster.

The scheduler talks to every cluster through :class:`ClusterBackend`: read a
snapshot of nodes and running jobs, apply a cycle's decisions (start,
preempt, cancel), and poll for what happened to jobs since (running,
succeeded, failed, lost). The simulated cluster implements it here; the
Kubernetes backend and the service plug into the same three methods, so no
action or plugin knows which kind of cluster it is talking to.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass, field, replace
from itertools import count
from typing import Any, Callable, Mapping, Protocol, Sequence, runtime_checkable

from flotilla.core.decisions import Placement
from flotilla.core.hookspecs import hookimpl
from flotilla.core.model import ClusterSnapshot, Job, JobState, Node
from flotilla.core.resources import PODS


@dataclass(frozen=True, slots=True)
class PodTemplate:
    """What the user asked for one pod of a job, as submitted: its podSpec and where it goes.

    Scheduling never reads these (a :class:`Job` keeps only what it
    needs); the service reads them from the store at lease time, by id,
    for backends that create real pods (``needs_templates``).
    ``pod_number``: the pod's place among the job's podSpecs.
    """

    pod_spec: Mapping[str, Any]
    namespace: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    pod_number: int = 0
    #: The job's ``services`` and ``ingress`` entries, on its first pod's template only.
    services: tuple[Mapping[str, Any], ...] = ()
    ingresses: tuple[Mapping[str, Any], ...] = ()


@dataclass(slots=True)
class ClusterDecisions:
    """What one cluster must do after a cycle.

    ``templates``: pod id (the placed job's id) -> its :class:`PodTemplate`,
    given to backends whose ``needs_templates`` is true; a start without one
    runs a stand-in pod of the job's requests.
    """

    start: list[Placement] = field(default_factory=list)
    preempt: list[Job] = field(default_factory=list)
    cancel: list[Job] = field(default_factory=list)
    templates: Mapping[str, PodTemplate] = field(default_factory=dict)


#: Why a run failed, as far as a cluster can tell, by the names retry policies match on: the container ran out of
#: memory, the pod passed its active deadline, the pod was evicted (node pressure, API eviction), its node was lost
#: (NotReady or deleted, shut down), it was stuck (never started within the cluster's stuckPodExpiry), its lease
#: expired (the cluster stopped reporting it; the service's own finding).
FAILURE_CAUSES = ("OOMKilled", "DeadlineExceeded", "Evicted", "NodeLost", "Stuck", "LeaseExpired")
#: The cause of a ``succeeded`` event about a run given up when its node was lost (``lost``, cause ``NodeLost``)
#: whose pod reported success once its node returned: the job keeps that success, and a rerun is stopped.
NODE_RETURNED = "NodeReturned"


@dataclass(frozen=True, slots=True)
class JobEvent:
    """Something that happened to a job on a cluster. ``kind``: running, succeeded, failed, preempted, cancelled, lost.

    A ``failed`` or ``lost`` event may say more for retry policies: ``exit_code``, the exit code of the job's
    first failed container (None when no container failed on its own: killed for the platform's reasons, never
    started), and ``cause``, one of :data:`FAILURE_CAUSES` (``""``: none of them).
    """

    job_id: str
    kind: str
    cluster: str
    node: str | None = None
    time: float = 0.0
    reason: str = ""
    exit_code: int | None = None
    cause: str = ""


@runtime_checkable
class ClusterBackend(Protocol):
    name: str

    def snapshot(self) -> ClusterSnapshot:
        """Nodes and the jobs running on them now. Raise ``ClusterUnavailable`` if the cluster cannot be read."""

    def apply(self, decisions: ClusterDecisions) -> None:
        """Start, preempt and cancel jobs. Must not block for long: report outcomes through events."""

    def poll_events(self) -> list[JobEvent]:
        """Events since the last poll, in the order they happened; none about an earlier run of a job started
        again since (a stop's word that came late), which the service would take for news about the new run."""


class ClusterUnavailable(Exception):
    """A cluster could not be read this cycle; the scheduler leaves it out and goes on."""


class OverAllocation(Exception):
    """A start would exceed a node's resources: a scheduler bug, never a normal outcome."""


@dataclass(slots=True)
class _Run:
    job: Job
    started: float
    ends: float | None


class SimulatedCluster:
    """A cluster in memory, on any clock.

    Jobs run from ``apply`` until ``duration_of(job)`` seconds have passed on
    ``clock`` (``None``: until stopped), then succeed, or fail with the exit
    code ``exit_code_of(job)`` when that is not None. Every start is checked against the
    node's resources, so a scheduler bug shows up as :class:`OverAllocation`
    instead of a quietly impossible schedule.

    Its upkeep follows what changed, not what runs: completions wait in a
    heap (an entry left by a run stopped early is skipped by identity), and
    the running jobs are kept in a dict beside the runs, so ``snapshot()``
    is one copy and ``poll_events()`` looks only at what is due. (Scanning
    every run at each call was the largest part of an idle ``serve`` cycle
    with 100,000 simulated jobs, and of the simulator's own time.) Jobs due
    at one time finish in job-id order. A job started again before its
    earlier run's end was polled has that run's events dropped (the
    protocol's ``poll_events``).
    """

    def __init__(self, name: str, nodes: Sequence[Node], clock: Callable[[], float] = time.time,
                 duration_of: Callable[[Job], float | None] = lambda job: None,
                 exit_code_of: Callable[[Job], int | None] = lambda job: None):
        self.name = name
        self.nodes = {node.name: node for node in nodes}
        self.clock = clock
        self.duration_of = duration_of
        self.exit_code_of = exit_code_of
        self.available = True
        self._runs: dict[str, _Run] = {}
        #: job id -> the running job, in the order of ``_runs``.
        self._running: dict[str, Job] = {}
        #: ``(ends, job id, seq, run)``: popped in ``(ends, job id)`` order; seq keeps runs from being compared.
        self._due: list[tuple] = []
        self._seq = count()
        self._used: dict[str, dict[str, int]] = {node.name: {} for node in nodes}
        self._events: list[JobEvent] = []
        #: Jobs whose run ended since the last poll: a start of one drops that run's events not polled yet.
        self._ended: set[str] = set()

    # -- protocol ---------------------------------------------------------------
    def snapshot(self) -> ClusterSnapshot:
        if not self.available:
            raise ClusterUnavailable(f"cluster {self.name} is stopped")
        self._finish_due()
        return ClusterSnapshot(self.name, list(self.nodes.values()), list(self._running.values()))

    def apply(self, decisions: ClusterDecisions) -> None:
        if not self.available:
            raise ClusterUnavailable(f"cluster {self.name} is stopped")
        now = self.clock()
        for job in decisions.preempt:
            self._stop(job.id, "preempted", now, "preempted by the scheduler")
        for job in decisions.cancel:
            self._stop(job.id, "cancelled", now, "cancelled")
        for placement in decisions.start:
            self._start(placement, now)

    def poll_events(self) -> list[JobEvent]:
        if self.available:
            self._finish_due()
        events, self._events = self._events, []
        self._ended.clear()
        return events

    # -- simulation helpers -------------------------------------------------------
    def set_available(self, available: bool) -> None:
        """Stop (``False``) or start the cluster: a stopped cluster cannot be read or written."""
        self.available = available

    def set_unschedulable(self, node: str, flag: bool) -> None:
        """Drain (``True``) or uncordon a node: it takes no new jobs while unschedulable; running ones finish."""
        self.nodes[node] = replace(self.nodes[node], unschedulable=flag)

    def next_completion(self) -> float | None:
        """When the next running job finishes, for a clock that jumps from event to event."""
        due, runs = self._due, self._runs
        while due:
            ends, job_id, _, run = due[0]
            if runs.get(job_id) is run:
                return ends
            heapq.heappop(due)
        return None

    def running_jobs(self) -> list[Job]:
        return list(self._running.values())

    def used(self, node: str) -> dict[str, int]:
        return dict(self._used[node])

    def _start(self, placement: Placement, now: float) -> None:
        node = self.nodes[placement.node]
        used = self._used[node.name]
        for name, amount in placement.job.requests.items():
            if used.get(name, 0) + amount > node.resources.get(name, 0):
                raise OverAllocation(f"starting {placement.job.id} on {self.name}/{node.name} exceeds its {name}")
        slots = node.resources.get(PODS)
        if slots is not None and used.get(PODS, 0) + 1 > slots:
            raise OverAllocation(f"starting {placement.job.id} on {self.name}/{node.name} exceeds its pods")
        for name, amount in placement.job.requests.items():
            used[name] = used.get(name, 0) + amount
        used[PODS] = used.get(PODS, 0) + 1
        job = replace(placement.job, state=JobState.RUNNING, cluster=self.name, node=node.name)
        if job.id in self._ended:   # its earlier run's end, not polled yet, is no news about this run
            self._ended.discard(job.id)
            self._events = [ev for ev in self._events if ev.job_id != job.id]
        duration = self.duration_of(job)
        run = self._runs[job.id] = _Run(job, now, None if duration is None else now + duration)
        self._running[job.id] = job
        if run.ends is not None:
            heapq.heappush(self._due, (run.ends, job.id, next(self._seq), run))
        self._events.append(JobEvent(job.id, "running", self.name, node.name, now))

    def _stop(self, job_id: str, kind: str, now: float, reason: str, exit_code: int | None = None) -> None:
        run = self._runs.pop(job_id, None)
        if run is None:
            return
        del self._running[job_id]
        used = self._used[run.job.node]
        for name, amount in run.job.requests.items():
            used[name] -= amount
        used[PODS] -= 1
        self._ended.add(job_id)
        self._events.append(JobEvent(job_id, kind, self.name, run.job.node, now, reason, exit_code))

    def _finish_due(self) -> None:
        now = self.clock()
        due, runs = self._due, self._runs
        while due and due[0][0] <= now:
            ends, job_id, _, run = heapq.heappop(due)
            if runs.get(job_id) is run:
                code = self.exit_code_of(run.job)
                if code is None:
                    self._stop(job_id, "succeeded", ends, "")
                else:
                    self._stop(job_id, "failed", ends, f"exited {code}", code)


class SimulatedBackendPlugin:
    """Answers ``flotilla_cluster_backend`` for ``kind: simulated`` clusters (nodes from the config, in memory)."""

    @hookimpl
    def flotilla_cluster_backend(self, cluster_config, options):
        if getattr(cluster_config, "kind", None) != "simulated":
            return None
        kwargs = {key: options[key] for key in ("clock", "duration_of", "exit_code_of") if options.get(key) is not None}
        return SimulatedCluster(cluster_config.name, list(cluster_config.expand()), **kwargs)


__all__ = ["FAILURE_CAUSES", "NODE_RETURNED", "ClusterBackend", "ClusterDecisions", "PodTemplate", "ClusterUnavailable", "JobEvent",
           "OverAllocation",
           "SimulatedBackendPlugin", "SimulatedCluster"]
