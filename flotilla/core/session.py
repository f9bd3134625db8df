"""One scheduling cycle's working state: what actions read and change, from open to close.

A :class:`Session` is opened on a :class:`~flotilla.core.model.Snapshot`
(and the state kept between cycles). Plugins register their callables on
it (:class:`~flotilla.core.registry.ExtensionRegistry`), actions run
against it, and every change goes through a
:class:`~flotilla.core.statement.Statement` so that it can be committed or
discarded as a whole. :meth:`Session.close` turns the session into
:class:`~flotilla.core.decisions.Decisions`.

The session's other jobs live beside it, one module each, as mixins:
the registry and its combine rules (:mod:`flotilla.core.registry`), where a
job may go (:mod:`flotilla.core.nodesearch`), the placement primitive
every action places through (:mod:`flotilla.core.placement`) and why a job waits
(:mod:`flotilla.core.whynot`); a queue's units are read by
:mod:`flotilla.core.units`.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from itertools import compress
from operator import attrgetter, not_
from typing import Callable, Mapping, Sequence

import structlog

from flotilla.core.cyclestate import CycleState, QueueState, RunningJob, job_level
from flotilla.core.decisions import Decisions, Placement, QueueReport
from flotilla.core.extensions import PluginFailed
from flotilla.core.logs import debug_enabled
from flotilla.core.model import Job, Snapshot
from flotilla.core.nodeindex import NodeIndex
from flotilla.core.nodesearch import NodeSearch
from flotilla.core.placement import Placing, Refused
from flotilla.core.jobqueue import JobQueue
from flotilla.core.registry import ExtensionRegistry, SessionError
from flotilla.core.resources import ResourceSpace, Vector
from flotilla.core.shares import DEFAULT_SHARE_WEIGHTS, cost_share
from flotilla.core.statement import Statement
from flotilla.core.volumes import VolumePicks, volume_predicate
from flotilla.core.whynot import WhyNot

log = structlog.get_logger("flotilla.session")

_ID = attrgetter("id")


@dataclass(slots=True)
class SessionSettings:
    """The config values the actions read, as plain values (no pydantic in the hot path)."""

    evict_probability: float = 1.0
    #: ``evict.protectedFractionOfFairShare``: preemption to fair share keeps a queue at this fraction of its fair
    #: share (:mod:`flotilla.actions.evict`).
    evict_protected_fraction: float = 1.0
    #: Queue name -> its own ``protectedFractionOfFairShare``, in place of the one above.
    queue_protected_fractions: Mapping[str, float] = field(default_factory=dict)
    lookahead: int = 1000
    node_candidates: int = 16
    #: ``allocate.percentageOfNodesToScore``: how many fitting nodes node scores weigh
    #: (:func:`~flotilla.core.nodesearch.nodes_to_score`; 0 adapts to the cluster's size).
    percentage_of_nodes_to_score: int = 0
    #: Plugin name -> its ``weight:`` (config), multiplying its normalised node scores; default 1.
    score_weights: Mapping[str, float] = field(default_factory=dict)
    preempt_max_candidates: int = 1000
    indexed_resources: tuple[str, ...] = ("nvidia.com/gpu", "cpu", "memory")
    reservation_after: float | None = None
    reservation_max_units: int = 1
    #: The weights the core measures and reports shares by (:mod:`flotilla.core.shares`).
    share_weights: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_SHARE_WEIGHTS))


class Session(ExtensionRegistry, Placing, NodeSearch, WhyNot):
    """The state one cycle works on; see the module docstring."""

    def __init__(self, snapshot: Snapshot, settings: SessionSettings | None = None,
                 rng: random.Random | None = None, plugins: Sequence[object] = (), state: CycleState | None = None):
        self.snapshot = snapshot
        self.settings = settings or SessionSettings()
        self.rng = rng or random.Random(0)
        self.now = snapshot.now
        self.plugins = list(plugins)
        self.debug = debug_enabled()
        self.priority_classes = {pc.name: pc for pc in snapshot.priority_classes}
        self.default_priority_class = snapshot.default_priority_class
        self._class_levels: dict[str | None, int] = {}

        # The state kept between cycles, brought up to date from the snapshot; without one, built afresh.
        self.state = state if state is not None else CycleState()
        self.state.sync(snapshot, self.settings.indexed_resources)
        self.space: ResourceSpace = self.state.space
        self.index: NodeIndex = self.state.index
        self.pool: Vector = self.state.pool
        self.queues: dict[str, QueueState] = self.state.queues
        self.running: dict[str, RunningJob] = self.state.running
        self.gangs: dict[str, list[Job]] = self.state.gangs
        #: True when some queue has a parent: allocate then fills level by level (TreePicker).
        self.nested: bool = self.state.nested

        self._open_registry()
        #: What this cycle's placements chose for their claims; None while no job names a claim.
        self.volume_picks: VolumePicks | None = None
        if self.state.claim_jobs:
            views = {cluster.name: cluster.volumes for cluster in snapshot.clusters if cluster.volumes is not None}
            self.predicate_fns.insert(1, volume_predicate(views))
            self.volume_picks = VolumePicks(views, self._cluster_and_labels)
        self._open_node_search()
        self._open_placement()
        self._open_why_not()

        # What the cycle has decided so far.
        self.scheduled: list[Placement] = []
        self.scheduled_ids: set[str] = set()
        #: Queued jobs an action withheld from this cycle (``enqueue``: they can never run), with why.
        self.set_aside: dict[str, str] = {}
        #: Cordoned queues: their evicted jobs may return, nothing new of theirs starts.
        self.cordoned: set[str] = {queue.name for queue in snapshot.queues if queue.cordoned}
        self.evicted: dict[str, Job] = {}
        self.preempted: dict[str, Job] = {}
        self.timings: dict[str, float] = {}
        self.counters: Counter[str] = Counter()
        self._orders: dict[str, JobQueue] = {}
        self._measured_share: Callable[[QueueState, Vector | None], float] | None = None
        #: The earliest time after ``now`` a timed rule asked to be looked at again (:meth:`wake_at`).
        self.wake: float | None = None

    # -- what actions ask -------------------------------------------------
    def priority_class(self, job: Job):
        return self.priority_classes[job.priority_class or self.default_priority_class]

    def job_level(self, job: Job) -> int:
        """The level ``job`` holds its room at (:func:`~flotilla.core.cyclestate.job_level`), per class, cached."""
        level = self._class_levels.get(job.priority_class)
        if level is None:
            level = self._class_levels[job.priority_class] = job_level(self.priority_classes,
                                                                       self.default_priority_class, job)
        return level

    def vector(self, job: Job) -> Vector:
        return self.space.vector(job.requests)

    def measured_share(self, queue: QueueState) -> float:
        """The share of the pool ``queue`` holds, as the core measures and reports it (:mod:`flotilla.core.shares`)."""
        share = self._measured_share
        if share is None:
            share = self._measured_share = cost_share(self.space.names, self.pool, self.settings.share_weights)
        return share(queue, None)

    def queued_in_order(self, queue: QueueState) -> JobQueue:
        """``queue``'s queued jobs in job order, read lazily.

        The order kept between cycles, unless a plugin orders jobs: then one
        built for this cycle from the plugins' keys (they may change with time).
        """
        if not self.job_order_fns:
            return queue.queued
        order = self._orders.get(queue.name)
        if order is None:
            live = queue.queued.live_entries()
            try:
                entries = [(*self.job_sort_key(entry[-1], entry[2]), entry[-1]) for entry in live]
            except PluginFailed:
                entries = self._ordered_without_failures(live)
            order = self._orders[queue.name] = JobQueue(None, entries)
        return order

    def _ordered_without_failures(self, live) -> list[tuple]:
        """The entries of the jobs a plugin's job order answers for; the others wait with its failure."""
        entries = []
        for entry in live:
            job = entry[-1]
            try:
                entries.append((*self.job_sort_key(job, entry[2]), job))
            except PluginFailed as failure:
                self.plugin_failed(failure, (job,))
        return entries

    def _cluster_and_labels(self, i: int):
        """Node ``i``'s cluster and labels as the predicates see them (its type's)."""
        node_type = self.index.types[self.index.type_of[i]]
        return node_type.cluster, node_type.labels

    def statement(self) -> Statement:
        return Statement(self)

    def node_name(self, i: int) -> tuple[str, str]:
        node = self.index.nodes[i]
        return node.cluster, node.name

    def jobs_on(self, i: int) -> list[RunningJob]:
        return [self.running[job_id] for job_id in self.index.jobs[i] if job_id in self.running]

    def preempt_evicted(self) -> None:
        """Evicted jobs that did not return to their node become preemptions."""
        if not self.evicted:
            return
        stmt = self.statement()
        for job in sorted(self.evicted.values(), key=lambda j: j.id):
            stmt.preempt(job)
        stmt.commit()

    def queue_heads(self, limit: int, key: Callable[[str], object] | None = None) -> dict[str, tuple[list[Job], bool]]:
        """Each queue's head: its queued jobs not placed this cycle, in the order the queue offers them next.

        Per queue with queued jobs, the jobs up to the ``limit``-th distinct
        ``key(job.id)`` (the id itself without ``key``; the service counts a
        job of several pods once), and whether more follow. Read from the cycle's
        queue order (a plugin's job order included) as far as ``limit``
        reaches, before the cycle settles it; nothing else is walked.
        """
        placed = self.scheduled_ids
        heads: dict[str, tuple[list[Job], bool]] = {}
        for queue in self.queues.values():
            if not queue.queued:
                continue
            order = self.queued_in_order(queue)
            jobs: list[Job] = []
            seen: set = set()
            position = 0
            more = False
            while (entry := order.at(position)) is not None:
                position += 1
                job = entry[-1]
                if job.id in placed:
                    continue
                mark = job.id if key is None else key(job.id)
                if mark not in seen:
                    if len(seen) == limit:
                        more = True
                        break
                    seen.add(mark)
                jobs.append(job)
            if jobs:
                heads[queue.name] = (jobs, more)
        return heads

    def wake_at(self, when: float) -> None:
        """Ask for a cycle at ``when`` (seconds, the snapshot's clock): a timed rule (a reservation's ``after``
        running out) may decide otherwise then with nothing else changed. ``simulate``'s clock, which jumps from
        event to event, stops there; the service cycles on its period anyway. Times at or before ``now`` are
        ignored."""
        if when > self.now and (self.wake is None or when < self.wake):
            self.wake = when

    # -- closing ----------------------------------------------------------
    def close(self, head: int = 0, head_key: Callable[[str], object] | None = None) -> Decisions:
        """The cycle's decisions; with ``head``, each queue's first ``head`` waiting jobs too (:meth:`queue_heads`)."""
        self.preempt_evicted()
        self._close_explanations()
        heads = self.queue_heads(head, head_key) if head > 0 else {}
        queued = self.snapshot.queued
        if self.scheduled_ids:
            # Placed jobs are the snapshot's own objects: told apart by identity (an int), which spares hashing
            # every queued job's id string; by id if some placed job was not found that way.
            placed = {id(placement.job) for placement in self.scheduled}.__contains__
            kept = list(compress(queued, map(not_, map(placed, map(id, queued)))))
            if len(queued) - len(kept) != len(self.scheduled_ids):
                placed = self.scheduled_ids.__contains__
                kept = list(compress(queued, map(not_, map(placed, map(_ID, queued)))))
            queued = kept
        else:
            queued = list(queued)
        reports = {}
        for queue in self.queues.values():
            reports[queue.name] = QueueReport(queue.name, queue.weight, queue.fair_share, self.measured_share(queue),
                                              self.space.formatted(queue.allocated), queue.parent)
        decisions = Decisions(
            scheduled=list(self.scheduled),
            preempted=sorted(self.preempted.values(), key=lambda j: j.id),
            queued=queued,
            queues=reports,
            explain=self.explain,
            why=self.why,
            timings=dict(self.timings),
            counters=dict(self.counters),
            heads=heads,
            wake=self.wake,
        )
        return decisions


__all__ = ["Refused", "Session", "SessionError", "SessionSettings"]
