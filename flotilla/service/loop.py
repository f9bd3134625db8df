"""The scheduling loop of ``flotilla serve``: one cycle (run every ``cycle.period`` by roles.scheduler).

Each cycle:

1. ask every cluster backend for a snapshot and its events (a cluster that
   does not answer is left out: its leases are not renewed);
2. one transaction (:func:`flotilla.service.leases.ingest`): apply the clusters' events, renew
   leases of what they run, expire stale leases (``lease-expired``, back to
   the queue or failed after ``lease.maxRetries``), mark jobs past their
   active deadline;
3. stop on the clusters what must stop (cancelled, past deadline, not
   theirs any more), with each job's grace period;
4. read the queued jobs in bulk (the snapshot);
5. run the configured actions on it, the same ``simulate`` and
   ``schedule-once`` run; the last, ``lease``, hands the decisions to the
   cycle's :class:`~flotilla.service.handover.StoreSink`, which records them
   in one transaction (:meth:`Store.record_cycle`: leases and ``leased``
   events for placed jobs, ``preempted`` for preempted ones), then applies
   what it recorded to the clusters (pod templates for clusters that create
   real pods, ``apply`` per cluster, the jobs a cluster accepted become
   ``pending``). A cluster that fails here keeps its jobs ``leased`` until
   the lease expires and they run elsewhere;
6. tell the clusters' waiting pods why they wait, and report the cycle's
   timings per phase (``clusters``, ``ingest``, ``stop``, ``load``,
   ``schedule``, ``record``, ``lease``).

Recording before handing over (the sink's contract,
:mod:`flotilla.core.handover`) means a crash between the two leaves leased
jobs that no cluster runs: their leases expire and they are queued again,
so no job is ever lost or run twice by the service's own doing.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from operator import attrgetter, is_
from typing import Callable, Mapping

import structlog

from flotilla.core.backend import ClusterDecisions, ClusterUnavailable
from flotilla.core.capabilities import Backends
from flotilla.core.wishlist import compute_wishlist
from flotilla.core.model import ClusterSnapshot, Job, JobState, PriorityClass, Queue, Snapshot
from flotilla.kubernetes.public import cluster_classes
from flotilla.plugin_manager import make_backends
from flotilla.service.handover import StoreSink
from flotilla.service.intake import ClusterIntake
from flotilla.service.jobspec import duration_of_annotations, exit_code_of_annotations
from flotilla.service.leases import ClusterReport, ingest, job_of
from flotilla.service.pending import head_size
from flotilla.service.placement import queue_parents
from flotilla.service.settings import ServiceSettings
from flotilla.service.snapshot import (DEFAULT_NAMESPACE, GRACE_ANNOTATION, Converter, RunningPods,
                                       default_namespace)
from flotilla.service.store import ActiveCopy, QueuedJob, Store

log = structlog.get_logger("flotilla.service.loop")

_ID = attrgetter("id")
_Converter = Converter   # the name it had here

#: The phases of a cycle, as ``CycleReport.timings`` and ``cpu`` and the ``service.cycle`` log line name them.
PHASES = ("clusters", "ingest", "stop", "load", "schedule", "record", "lease")


@dataclass(slots=True)
class CycleReport:
    number: int
    started: float
    seconds: float = 0.0
    clusters: list[str] = field(default_factory=list)
    unavailable: list[str] = field(default_factory=list)
    queued: int = 0
    running: int = 0
    leased: int = 0
    preempted: int = 0
    stopped: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    #: Binds returned to their queue, by (cluster, reason label) (flotilla.kubernetes.admission).
    returned: dict[tuple[str, str], int] = field(default_factory=dict)
    #: In-cluster pods this cycle: stored as jobs, parked (refused or waiting for their gang), left.
    intake: dict[str, int] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    #: CPU seconds of the loop's thread per phase: on a shared machine, what the cycle itself cost.
    cpu: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"cycle": self.number, "started": self.started, "seconds": round(self.seconds, 4),
                "clusters": self.clusters, "unavailable": self.unavailable, "queued": self.queued,
                "running": self.running, "leased": self.leased, "preempted": self.preempted,
                "stopped": self.stopped, "events": self.counts, **({"intake": self.intake} if self.intake else {}),
                "timings": {k: round(v, 4) for k, v in self.timings.items()},
                "cpu": {k: round(v, 4) for k, v in self.cpu.items()}}


def service_backends(config, pm=None, clock: Callable[[], float] = time.time) -> dict:
    """One backend per cluster of the config, through the ``flotilla_cluster_backend`` hook of ``pm``.

    Simulated clusters run on ``clock`` (the wall clock in ``serve``), each
    job for the duration in its ``flotilla.io/simulated-duration``
    annotation, or until it is stopped; a job annotated
    ``flotilla.io/simulated-exit-code`` then fails with that exit code.
    """
    return make_backends(config, pm, clock=clock, duration_of=lambda job: duration_of_annotations(job.annotations),
                         exit_code_of=lambda job: exit_code_of_annotations(job.annotations))


def lease_missing(config, scheduler):
    """The config error for a scheduler without the ``lease`` action, which ``serve`` hands its decisions through
    (as ``simulate`` does); None when it has one."""
    if scheduler.hands_over():
        return None
    return config.source.error(("actions",), "serve needs the lease action (it records the decisions, then hands "
                                             "them to the clusters): expected e.g. [evict, allocate, preempt, lease]")


class QueuedJobs:
    """The queued jobs as scheduler jobs, kept between cycles and brought up to date from the event log.

    Reading and converting every queued job takes 1.4 s for 200,000 on
    SQLite, growing with the queue, so only the first cycle does; each one
    after reads only the jobs with an event since the last
    (:meth:`Store.queued_changes`). Jobs keep the order they were first
    read in; a job that comes back to the queue (a lease expired) goes to
    the end, which matters only between jobs of equal priority and
    submission time.
    """

    def __init__(self, store: Store, namespace: str = DEFAULT_NAMESPACE):
        self.store = store
        self.namespace = namespace
        self.cursor: int | None = None
        self.jobs: dict[str, tuple[QueuedJob, list[Job]]] = {}
        self.version = 0      # bumped by every sync that changed a job: the loop's queued list is rebuilt then
        self._converter = _Converter(self.namespace)

    def sync(self) -> tuple[int, int]:
        """Bring the copy up to date; returns (jobs re-read, queued now)."""
        if self.cursor is None:
            cursor = self.store.last_event_id()  # first: a change after it is read again next time
            records = self.store.load_queued()
            self._converter = _Converter(self.namespace)
            self.jobs = {r.id: (r, self._converter.pods(r)) for r in records}
            self.cursor = cursor
            self.version += 1
            return len(records), len(self.jobs)
        cursor, ids, queued = self.store.queued_changes(self.cursor)
        for job_id in ids:
            record = queued.get(job_id)
            if record is None:
                self.jobs.pop(job_id, None)  # left the queue (leased, cancelled) or never reached it
                continue
            held = self.jobs.get(job_id)
            if held is None or held[0] != record:  # new to the queue (appended), or changed in place
                self.jobs[job_id] = (record, self._converter.pods(record))
        if ids:
            self.version += 1
        self.cursor = cursor
        return len(ids), len(self.jobs)


class _Phases:
    """Wall and CPU seconds (of the loop's thread) per named phase of a cycle, in the order they ran."""

    def __init__(self):
        self._wall = time.perf_counter()
        self._cpu = time.thread_time()
        self.timings: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self.total = 0.0

    def mark(self, name: str) -> None:
        """The time since the last mark is ``name``'s."""
        wall, cpu = time.perf_counter(), time.thread_time()
        self.timings[name] = self.timings.get(name, 0.0) + wall - self._wall
        self.cpu[name] = self.cpu.get(name, 0.0) + cpu - self._cpu
        self.total += wall - self._wall
        self._wall, self._cpu = wall, cpu

    def move(self, timings: Mapping[str, float], cpu: Mapping[str, float], out_of: str) -> None:
        """Time measured inside phase ``out_of`` given to the phases it names (added to theirs)."""
        for name, seconds in timings.items():
            self.timings[out_of] -= seconds
            self.timings[name] = self.timings.get(name, 0.0) + seconds
        for name, seconds in cpu.items():
            self.cpu[out_of] -= seconds
            self.cpu[name] = self.cpu.get(name, 0.0) + seconds


class ServiceLoop:
    """Cycles of the scheduler against the store and the cluster backends."""

    def __init__(self, store: Store, settings: ServiceSettings, scheduler, backends: Mapping[str, object],
                 clock: Callable[[], float] = time.time, seed: int | None = None):
        self.store = store
        self.settings = settings
        self.scheduler = scheduler
        #: The backends by name, with each one's capabilities (flotilla.core.capabilities), read once here.
        self.backends = Backends.of(backends)
        self.clock = clock
        self.rng = random.Random(seed)
        self.actions = scheduler.actions
        self.cycles = 0
        self.last: CycleReport | None = None
        self.last_decisions = None     # the last cycle's Decisions (published by the scheduler role)
        self.last_wishlist = None      # the node wishlist after the last cycle, when the config has nodeTemplates
        self._drained: set[str] = set()  # cluster/node names this loop has drained on their backends
        self.last_nodes: dict[str, str] = {}   # draining nodes after the last cycle: draining or drained
        self.cycle_lock = threading.Lock()
        self.in_cycle = threading.Event()
        #: The namespace of jobs that name none, for pod rules: the clusters' ``namespace`` when they agree.
        self.namespace = default_namespace(self.backends)
        self.queued = QueuedJobs(store, self.namespace)
        self.active = ActiveCopy()
        self.running_pods = RunningPods(self.namespace)
        self._queued_list: tuple[tuple, list[Job]] | None = None   # (what it was built from, the queued pods)
        self._reported: dict[str, tuple[list[Job], set[str]]] = {}  # cluster -> its last running list, their ids
        self.last_snapshot: Snapshot | None = None      # the last cycle's, and the clusters it was built from
        self.last_clusters: dict[str, ClusterSnapshot] = {}
        self.intake = ClusterIntake(store)     # in-cluster pods (flotilla.service.intake)
        self._classes: tuple | None = None     # (what the merged priority classes were made from, them)
        self._retiring = False    # the last snapshot's queues had one retiring (see flotilla.service.store.queues)

    # -- one cycle ------------------------------------------------------------------
    def run_cycle(self) -> CycleReport:
        with self.cycle_lock:
            self.in_cycle.set()
            try:
                return self._cycle()
            finally:
                self.in_cycle.clear()

    def _apply_drains(self) -> None:
        """Hand the store's draining nodes (``cluster/node``) to their backends: set, or cleared when uncordoned."""
        wanted = self.store.cordoned("node")
        for key in sorted(wanted ^ self._drained):
            cluster, _, node = key.partition("/")
            caps = self.backends.capabilities.get(cluster)
            backend = caps.drain if caps is not None else None
            if backend is None:
                continue
            try:
                backend.set_unschedulable(node, key in wanted)
            except Exception:  # an unreachable cluster: tried again next cycle
                log.exception("node.drain_failed", node=key)
                continue
            if key in wanted:
                self._drained.add(key)
            else:
                self._drained.discard(key)

    def node_states(self, snaps) -> dict[str, str]:
        """Every draining node: ``draining`` while jobs run on it, ``drained`` once empty."""
        states = {}
        for key in sorted(self._drained):
            cluster, _, node = key.partition("/")
            snap = snaps.get(cluster)
            if snap is not None:
                states[key] = "draining" if any(job.node == node for job in snap.running) else "drained"
        return states

    def _cycle(self) -> CycleReport:
        """One cycle as named steps (the module docstring), each timed in ``report.timings`` and ``report.cpu``."""
        phases = _Phases()
        now = self.clock()
        self.cycles += 1
        report = CycleReport(self.cycles, now)
        snaps, reports = self._read_clusters(report, now)
        phases.mark("clusters")
        result = self._ingest(reports, now, report)
        phases.mark("ingest")
        self._stop(result.stops, snaps, report)
        if self._retiring:    # only while a queue left the config with unfinished jobs (the last snapshot says)
            self._remove_retired(now)
        phases.mark("stop")
        snapshot = self.build_snapshot(snaps, now)
        report.queued = len(self.queued.jobs)
        report.running = len(result.active)
        phases.mark("load")
        sink = StoreSink(self.store, self.backends, self.running_pods.of, now, self.clock)
        decisions = self._schedule(snapshot, sink)
        report.leased = len(sink.leased)
        report.preempted = len(sink.preempted)
        phases.mark("schedule")
        if self.intake.backends(self.backends):
            self.intake.explain(self.backends, decisions, self.queued.jobs, set(sink.leased))
        phases.mark("lease")
        # The sink's steps ran inside the scheduling: counted as theirs, under their own names.
        phases.move(sink.timings, sink.cpu, out_of="schedule")
        report.timings = {name: phases.timings[name] for name in PHASES}
        report.cpu = {name: phases.cpu[name] for name in PHASES}
        report.seconds = phases.total
        self.last = report
        log.info("service.cycle", **{k: v for k, v in report.to_dict().items() if k not in ("timings", "cpu")},
                 **{f"{k}_s": round(v, 4) for k, v in report.timings.items()},
                 **{f"{k}_cpu": round(v, 4) for k, v in report.cpu.items()})
        return report

    def _remove_retired(self, now: float) -> None:
        """Remove the queues that left the config and whose last unfinished job has finished (after ingest)."""
        removed = self.store.remove_retired_queues(now)
        if removed:
            log.warning("queue.removed", queues=removed, reason="removed from the configuration; its last "
                                                                "unfinished job has finished")

    def _read_clusters(self, report: CycleReport, now: float
                       ) -> tuple[dict[str, ClusterSnapshot], dict[str, ClusterReport]]:
        """Drains handed to the backends, then each cluster's snapshot and events (one that does not answer is
        left out: its leases are not renewed), and the in-cluster pods taken in."""
        reports: dict[str, ClusterReport] = {}
        snaps: dict[str, ClusterSnapshot] = {}
        self._apply_drains()
        for name, backend in sorted(self.backends.items()):
            try:
                snap = backend.snapshot()
                events = backend.poll_events()
            except ClusterUnavailable as exc:
                report.unavailable.append(name)
                log.info("cluster.unavailable", cluster=name, reason=str(exc))
                continue
            except Exception:  # a broken backend must not stop the loop
                report.unavailable.append(name)
                log.exception("cluster.error", cluster=name)
                continue
            snaps[name] = snap
            reports[name] = ClusterReport(events, self._running_ids(name, snap.running),
                                          self.backends.capabilities[name].enforces_deadlines)
        report.clusters = sorted(snaps)
        self.last_nodes = self.node_states(snaps)
        if snaps and self.intake.backends(self.backends):
            classes = self.priority_classes()
            self.intake.placement = getattr(self.settings, "placement", ())
            report.intake = self.intake.run(
                self.backends, snaps, self.store.list_queues(), {pc.name for pc in classes},
                self.settings.default_priority_class, now, preemptible={pc.name for pc in classes if pc.preemptible})
        return snaps, reports

    def _ingest(self, reports: Mapping[str, ClusterReport], now: float, report: CycleReport):
        """The clusters' reports in one transaction: events, lease renewal and expiry, deadlines."""
        result = ingest(self.store, reports, now, self.settings.lease_timeout, self.settings.lease_max_retries,
                        copy=self.active)
        report.counts = dict(result.counts)
        report.returned = dict(result.returned)
        return result

    def _stop(self, stops: Mapping[str, list], snaps: Mapping[str, ClusterSnapshot], report: CycleReport) -> None:
        """Stop on the clusters read this cycle what must stop (cancelled, past deadline, not theirs any more),
        each pod once, with its job's grace period."""
        for cluster, items in stops.items():
            backend = self.backends.get(cluster)
            if backend is None or cluster not in snaps:
                continue
            cancel = []
            seen = set()
            for pod_id, job in items:
                if pod_id in seen:
                    continue
                seen.add(pod_id)
                grace = getattr(job, "grace_period", 1.0) if job is not None else 1.0
                cancel.append(Job(pod_id, getattr(job, "queue", ""), getattr(job, "job_set", ""),
                                  annotations={GRACE_ANNOTATION: f"{grace:g}"}, state=JobState.RUNNING,
                                  cluster=cluster))
            try:
                backend.apply(ClusterDecisions(cancel=cancel))
                report.stopped += len(cancel)
            except ClusterUnavailable:
                log.info("cluster.unavailable", cluster=cluster, during="stop")

    def _schedule(self, snapshot: Snapshot, sink: StoreSink):
        """The configured actions on ``snapshot``, ``lease`` handing the decisions to ``sink``; the node wishlist
        after them, when the config has node templates."""
        decisions = self.scheduler.run_cycle(snapshot, self.rng, actions=self.actions, sink=sink,
                                             head=head_size(len(snapshot.queues)), head_key=job_of)
        self.last_decisions = decisions
        templates = self.scheduler.config.node_templates
        if templates:   # published with the cycle's status: GET /v1/wishlist and the wishlist metrics
            wish = compute_wishlist(self.scheduler, snapshot, decisions.queued, [t.to_core() for t in templates],
                                    decisions.scheduled, decisions.preempted)
            # "queues": each queue's part, so that a user is shown only what their queues hold (GET /v1/wishlist)
            self.last_wishlist = {**wish.to_dict(), "queues": wish.by_queue()}
        return decisions

    def _running_ids(self, cluster: str, running: list[Job]) -> set[str]:
        """The ids of a cluster's running pods: the last cycle's set when the backend lists the same objects."""
        last = self._reported.get(cluster)
        if last is not None and len(last[0]) == len(running) and all(map(is_, last[0], running)):
            return last[1]
        ids = set(map(_ID, running))
        self._reported[cluster] = (running, ids)
        return ids

    def priority_classes(self) -> list[PriorityClass]:
        """Flotilla's priority classes and, with Kubernetes clusters, theirs
        (:func:`~flotilla.kubernetes.priorityclasses.cluster_classes`); made again only when a cluster's changed."""
        own = self.scheduler.priority_classes()
        watched = {name: caps.priority_classes.cluster_priority_classes() if caps.priority_classes else (0, [])
                   for name, caps in sorted(self.backends.capabilities.items())
                   if caps.priority_classes is not None or caps.intake is not None}
        if not watched:
            return own
        setting = getattr(getattr(self.scheduler, "config", None), "cluster_priority_classes", None)
        offset = setting.priority_offset if setting is not None else 0
        fair_share = setting.fair_share_preemption if setting is not None else False
        key = (tuple(own), offset, fair_share, tuple((name, version) for name, (version, _) in watched.items()))
        if self._classes is None or self._classes[0] != key:
            self._classes = (key, cluster_classes(own, [classes for _, classes in watched.values()], offset,
                                                  fair_share))
        return self._classes[1]

    def build_snapshot(self, snaps: Mapping[str, ClusterSnapshot], now: float) -> Snapshot:
        """The cycle's snapshot from the kept copies, after ingest: clusters as ``snaps`` show them.

        Jobs unchanged since the last cycle are the objects of the last
        snapshot, and so are the lists when nothing in them changed. The
        result equals one built from scratch from the store (same jobs, same
        fields; ``tests/service/test_service_snapshot.py``).
        """
        self.queued.sync()
        queue_specs = self.store.list_queues()
        self._retiring = any(q.retiring is not None for q in queue_specs)
        classes = self.priority_classes()
        known_pcs = {pc.name for pc in classes}
        known_queues = {q.name for q in queue_specs}
        key = (self.queued, self.queued.version, frozenset(known_pcs), frozenset(known_queues))
        if self._queued_list is not None and self._queued_list[0] == key:
            queued = self._queued_list[1]
        else:
            queued = []
            for record, pods in self.queued.jobs.values():
                if record.priority_class not in known_pcs or record.queue not in known_queues:
                    continue
                queued.extend(pods)
            self._queued_list = (key, queued)
        self.running_pods.update(self.active, known_pcs, known_queues)
        clusters: list[ClusterSnapshot] = []
        for name, snap in snaps.items():
            running = self.running_pods.running(name, frozenset(node.name for node in snap.nodes))
            clusters.append(ClusterSnapshot(name, snap.nodes, running, dict(snap.foreign), snap.foreign_pods,
                                            volumes=snap.volumes, foreign_ports=snap.foreign_ports,
                                            namespace_labels=snap.namespace_labels))
        cordoned = self.store.cordoned("queue")
        # Hierarchies come from the config file, and from the placement rules for the queues they made.
        parents = queue_parents(self.settings.queues, getattr(self.settings, "placement", ()), queue_specs)
        snapshot = Snapshot(clusters, queued, [Queue(q.name, q.weight, dict(q.limits), parents.get(q.name),
                                                     cordoned=q.name in cordoned) for q in queue_specs],
                            classes, self.settings.default_priority_class, now)
        self.last_snapshot = snapshot
        self.last_clusters = dict(snaps)
        return snapshot

    def forget(self) -> None:
        """Drop the copies kept between cycles; the next cycle reads the store afresh (a new leader term)."""
        with self.cycle_lock:
            self.queued = QueuedJobs(self.store, self.namespace)
            self.active = ActiveCopy()
            self.running_pods = RunningPods(self.namespace)
            self._queued_list = None
            self.intake.resync = True

    def reconfigure(self, scheduler, settings: ServiceSettings) -> None:
        """A reloaded config: the next cycle runs ``scheduler`` (plugins and their args) with ``settings``."""
        with self.cycle_lock:
            self.scheduler = scheduler
            self.settings = settings
            self.actions = scheduler.actions

    def set_cluster_available(self, name: str, available: bool) -> bool:
        caps = self.backends.capabilities.get(name)
        if caps is None or caps.switch is None:
            return False
        caps.switch.set_available(available)
        return True
