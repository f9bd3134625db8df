"""One scheduling cycle's working state: what actions read and change.

A :class:`Session` is opened on a :class:`~flotilla.core.model.Snapshot`.
Plugins register their callables on it (see
:mod:`flotilla.core.hookspecs`), actions run against it, and every change
goes through a :class:`~flotilla.core.statement.Statement` so that it can be
committed or discarded as a whole. :meth:`Session.close` turns the session
into :class:`~flotilla.core.decisions.Decisions`.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from itertools import compress, repeat
from operator import attrgetter, is_, itemgetter, mul, not_, or_, truth
from typing import Callable, Iterable, Mapping, Sequence

import structlog

from flotilla.core.decisions import Decisions, Placement, QueueReport
from flotilla.core.extensions import (GangReady, JobOrder, JobValid, NodeFilter, NodeScore, NodeTiers, OnAllocate,
                                      OnEvict, Preemptable, PreemptQueueOrder, Predicate, QueueAdmit, QueueOrder,
                                      VictimOrder)
from flotilla.core.feasibility import node_type_refusal
from flotilla.core.limits import queue_limit_refusal
from flotilla.core.logs import debug_enabled
from flotilla.core.model import Gang, Job, Snapshot
from flotilla.core.cyclestate import CycleState, QueueState, RunningJob, job_level
from flotilla.core.queueorder import QueueOrder
from flotilla.core.nodeindex import EVICTED, NodeIndex, NodeType
from flotilla.core.resources import ResourceSpace, Vector
from flotilla.core.shares import DEFAULT_SHARE_WEIGHTS, cost_share
from flotilla.core.statement import Statement

log = structlog.get_logger("flotilla.session")

# Field getters for the C-level passes over every job at open and close.
_ID = attrgetter("id")
_JOB = itemgetter(-1)
_REQUESTS = attrgetter("requests")
_CLASS = attrgetter("priority_class")
_SELECTOR = attrgetter("node_selector")
_TOLERATIONS = attrgetter("tolerations")
_GANG = attrgetter("gang")


class SessionError(Exception):
    """The plugins registered on a session do not form a usable whole."""


@dataclass(slots=True)
class SessionSettings:
    """The config values the actions read, as plain values (no pydantic in the hot path)."""

    evict_probability: float = 1.0
    lookahead: int = 1000
    node_candidates: int = 16
    preempt_max_candidates: int = 1000
    indexed_resources: tuple[str, ...] = ("nvidia.com/gpu", "cpu", "memory")
    reservation_after: float | None = None
    reservation_max_units: int = 1
    #: The weights the core measures and reports shares by (:mod:`flotilla.core.shares`).
    share_weights: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_SHARE_WEIGHTS))


class Session:
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

        # The state kept between cycles, brought up to date from the snapshot; without one, built afresh.
        self.state = state if state is not None else CycleState()
        self.state.sync(snapshot, self.settings.indexed_resources)
        self.space: ResourceSpace = self.state.space
        self.index: NodeIndex = self.state.index
        self.pool: Vector = self.state.pool
        self.queues: dict[str, QueueState] = self.state.queues
        self.running: dict[str, RunningJob] = self.state.running
        self.gangs: dict[str, list[Job]] = self.state.gangs
        #: True when some queue has a parent: allocate then fills level by level (queuetree.TreePicker).
        self.nested: bool = self.state.nested

        # Extension points, declared in flotilla.core.extensions. The core's guarantees come first and no plugin
        # can remove them: Kubernetes feasibility always, queue limits whenever a queue has some.
        self.queue_order_fns: list[QueueOrder] = []
        self.preempt_queue_order_fns: list[PreemptQueueOrder] = []
        self.job_order_fns: list[JobOrder] = []
        self.predicate_fns: list[Predicate] = [node_type_refusal]
        self.queue_admit_fns: list[QueueAdmit] = []
        if any(queue.limit_vector is not None for queue in self.queues.values()):
            self.queue_admit_fns.append(queue_limit_refusal(self.space.names))
        self.node_tiers_fn: NodeTiers = lambda queue: ("any",)
        self.node_score_fns: list[NodeScore] = []
        #: Node scores registered with ``across_tiers=True``: preferences that cross node tiers.
        self.tier_crossing_score_fns: list[NodeScore] = []
        self.gang_ready_fns: list[GangReady] = []
        self.preemptable_fns: list[Preemptable] = []
        self.victim_order_fns: list[VictimOrder] = []
        self.job_valid_fns: list[JobValid] = []
        self.allocate_handlers: list[OnAllocate] = []
        self.evict_handlers: list[OnEvict] = []

        # What the cycle has decided so far.
        self.scheduled: list[Placement] = []
        self.scheduled_ids: set[str] = set()
        #: Queued jobs an action withheld from this cycle (``enqueue``: they can never run), with why.
        self.set_aside: dict[str, str] = {}
        #: Cordoned queues: their evicted jobs may return, nothing new of theirs starts.
        self.cordoned: set[str] = {queue.name for queue in snapshot.queues if queue.cordoned}
        #: Node filters actions set for this cycle (``reserve``: reserved nodes take only preemptible jobs).
        self.node_filter_fns: list[NodeFilter] = []
        self.evicted: dict[str, Job] = {}
        self.preempted: dict[str, Job] = {}
        self.failures: dict[str, str | tuple] = {}
        #: Runs of known misfits allocate passed over: (jobs, their KnownMisfits). Their failures are
        #: looked up when first asked (:meth:`explain`), not stored per job while scheduling.
        self.passed_over: list[tuple[list[Job], KnownMisfits]] = []
        self._passed_over_failures: dict[str, str | tuple] = {}
        self._passed_over_read = 0
        self.unexamined_reason: dict[str, str] = {}
        self.timings: dict[str, float] = {}
        self.counters: Counter[str] = Counter()
        self._allowed_cache: dict[tuple, tuple[list[int], str | None]] = {}
        self._allowed_by_identity: dict[tuple, tuple] = {}
        self._interned_types: dict[tuple[int, ...], list[int]] = {}
        self._orders: dict[str, QueueOrder] = {}
        self._shortfalls: dict[tuple, str] = {}
        self._measured_share: Callable[[QueueState, Vector | None], float] | None = None

    # -- registration (called by plugins in flotilla_session_open) --------
    def add_queue_order(self, fn: QueueOrder) -> None:
        self.queue_order_fns.append(fn)

    def add_preempt_queue_order(self, fn: PreemptQueueOrder) -> None:
        self.preempt_queue_order_fns.append(fn)

    def add_job_order(self, fn: JobOrder) -> None:
        self.job_order_fns.append(fn)

    def add_predicate(self, fn: Predicate) -> None:
        self.predicate_fns.append(fn)

    def add_queue_admit(self, fn: QueueAdmit) -> None:
        self.queue_admit_fns.append(fn)

    def set_node_tiers(self, fn: NodeTiers) -> None:
        self.node_tiers_fn = fn

    def add_node_score(self, fn: NodeScore, across_tiers: bool = False) -> None:
        (self.tier_crossing_score_fns if across_tiers else self.node_score_fns).append(fn)

    def add_gang_ready(self, fn: GangReady) -> None:
        self.gang_ready_fns.append(fn)

    def add_preemptable(self, fn: Preemptable) -> None:
        self.preemptable_fns.append(fn)

    def add_victim_order(self, fn: VictimOrder) -> None:
        self.victim_order_fns.append(fn)

    def add_job_valid(self, fn: JobValid) -> None:
        self.job_valid_fns.append(fn)

    def add_event_handler(self, on_allocate: OnAllocate | None = None, on_evict: OnEvict | None = None) -> None:
        if on_allocate is not None:
            self.allocate_handlers.append(on_allocate)
        if on_evict is not None:
            self.evict_handlers.append(on_evict)

    def check_registrations(self) -> None:
        """Enforce the combine rules that are about *how many* plugins answer."""
        if len(self.queue_order_fns) != 1:
            raise SessionError(
                f"exactly one plugin must provide queue_order (a fairness policy such as assetfairness or drf); "
                f"{len(self.queue_order_fns)} did")
        if len(self.preempt_queue_order_fns) > 1:
            raise SessionError(
                f"at most one plugin may provide preempt_queue_order; {len(self.preempt_queue_order_fns)} did")

    # -- what actions ask -------------------------------------------------
    def priority_class(self, job: Job):
        return self.priority_classes[job.priority_class or self.default_priority_class]

    def job_level(self, job: Job) -> int:
        return job_level(self.priority_classes, self.default_priority_class, job)

    def vector(self, job: Job) -> Vector:
        return self.space.vector(job.requests)

    def queue_key(self, queue: QueueState, extra: Vector | None = None) -> float | tuple:
        """The fairness policy's key for ``queue`` if it also had ``extra``: allocate serves the smallest next."""
        return self.queue_order_fns[0](queue, extra)

    def measured_share(self, queue: QueueState) -> float:
        """The share of the pool ``queue`` holds, as the core measures and reports it (:mod:`flotilla.core.shares`)."""
        share = self._measured_share
        if share is None:
            share = self._measured_share = cost_share(self.space.names, self.pool, self.settings.share_weights)
        return share(queue, None)

    def preempt_rank(self, queue: QueueState) -> float | tuple:
        """Which queue's urgent jobs preempt first among equal priorities (smallest first).

        A plugin's ``preempt_queue_order`` if one is registered, else the
        measured share over the fair share.
        """
        if self.preempt_queue_order_fns:
            return self.preempt_queue_order_fns[0](queue)
        return self.measured_share(queue) / queue.fair_share if queue.fair_share > 0 else float("inf")

    def job_sort_key(self, job: Job, position: int) -> tuple:
        """Order within a queue: plugin keys first, then priority, submission time, position."""
        if self.job_order_fns:
            return (*(part for fn in self.job_order_fns for part in fn(job)), job.priority, job.submitted, position)
        return (job.priority, job.submitted, position)

    def job_valid(self, job: Job) -> str | None:
        for fn in self.job_valid_fns:
            reason = fn(job)
            if reason:
                return reason
        return None

    def admit(self, queue: QueueState, job: Job, vec: Vector) -> str | None:
        for fn in self.queue_admit_fns:
            reason = fn(queue, job, vec)
            if reason:
                return reason
        return None

    def gang_ready(self, gang: Gang, members: Sequence[Job]) -> str | None:
        for fn in self.gang_ready_fns:
            reason = fn(gang, members)
            if reason:
                return reason
        return None

    def may_preempt(self, preemptor: Job, victim: Job) -> bool:
        if not self.preemptable_fns:
            return False
        return all(fn(preemptor, victim) for fn in self.preemptable_fns)

    def victim_key(self, running: RunningJob) -> tuple:
        job = running.job
        plugin_part = tuple(part for fn in self.victim_order_fns for part in fn(job))
        return (*plugin_part, self.priority_class(job).priority, tuple(-x for x in running.vec), job.id)

    def allowed_types(self, job: Job, cluster: str | None = None) -> tuple[list[int], str | None]:
        """Node types the predicates accept for ``job`` (optionally in one cluster), and why not if none.

        Cached per job requirements for the whole cycle: predicates see
        node types, never nodes.
        """
        selector, tolerations = job.node_selector, job.tolerations
        # First by identity (jobs loaded in bulk share these objects; the snapshot keeps them alive for the
        # session), then by value.
        fast = (job.queue, job.priority_class, id(selector) if selector else 0, id(tolerations), cluster)
        hit = self._allowed_by_identity.get(fast)
        if hit is not None:
            return hit[0]
        key = (job.queue, job.priority_class, tuple(sorted(selector.items())) if selector else (), tolerations,
               cluster)
        hit = self._allowed_cache.get(key)
        if hit is not None:
            self._allowed_by_identity[fast] = (hit, selector, tolerations)
            return hit
        allowed: list[int] = []
        refusals: Counter[str] = Counter()
        for node_type in self.index.types:
            if cluster is not None and node_type.cluster != cluster:
                continue
            for fn in self.predicate_fns:
                reason = fn(job, node_type)
                if reason:
                    refusals[reason] += len(node_type.nodes)
                    break
            else:
                allowed.append(node_type.id)
        why = None
        if not allowed:
            total = sum(refusals.values())
            detail = ", ".join(f"{count} {reason}" for reason, count in sorted(refusals.items(), key=lambda kv: (-kv[1], kv[0])))
            why = f"0/{total} nodes match: {detail}" if total else "no nodes"
        # Equal lists are one object, so callers may key caches by id(types) across queues.
        allowed = self._interned_types.setdefault(tuple(allowed), allowed)
        result = (allowed, why)
        self._allowed_cache[key] = result
        self._allowed_by_identity[fast] = (result, selector, tolerations)
        return result

    def add_node_filter(self, fn: NodeFilter) -> None:
        """May ``job`` start on node ``i``? (Reservations; all filters must agree.) Set by actions, per cycle."""
        self.node_filter_fns.append(fn)

    def node_allowed(self, job: Job, i: int) -> bool:
        return all(fn(job, i) for fn in self.node_filter_fns)

    def find_node(self, job: Job, vec: Vector, level: int, types: Sequence[int], queue: QueueState) -> int | None:
        """Best node for ``job`` at ``level``: tier by tier, smallest fit, or best score when scorers exist.

        Node scores order the fitting nodes within the first tier that has
        any; scores registered across tiers (:meth:`_find_across_tiers`) weigh
        the candidates of every tier against each other.
        """
        if self.tier_crossing_score_fns:
            return self._find_across_tiers(job, vec, level, types, queue)
        filtered = bool(self.node_filter_fns)
        scored = bool(self.node_score_fns)
        for tier in self.node_tiers_fn(queue):
            if not scored and not filtered:
                found = self.index.find(vec, level, types, tier, queue.name)
                if found is not None:
                    return found
                continue
            # Scorers or filters: walk the fitting nodes (smallest first per type), skipping refused ones.
            candidates = []
            for i in self.index.iter_fitting(vec, level, types):
                if (tier == "any" or self.in_tier(i, tier, queue.name)) and (not filtered or self.node_allowed(job, i)):
                    candidates.append(i)
                    if not scored or len(candidates) >= self.settings.node_candidates:
                        break
            if candidates and not scored:
                return candidates[0]
            if candidates:
                return max(candidates, key=lambda i: (sum(fn(job, i) for fn in self.node_score_fns),
                                                      tuple(-x for x in self.index.free[i][self.index.level_of[level]]), -i))
        return None

    def _find_across_tiers(self, job: Job, vec: Vector, level: int, types: Sequence[int],
                           queue: QueueState) -> int | None:
        """Up to ``node_candidates`` fitting nodes from each tier, the best of them all.

        Best: the highest total of the across-tier scores, then the earlier
        tier, then the highest total of the within-tier scores, then the
        least free space, then the lower position.
        """
        index, limit = self.index, self.settings.node_candidates
        crossing, within = self.tier_crossing_score_fns, self.node_score_fns
        free, at = index.free, index.level_of[level]
        filtered = bool(self.node_filter_fns)
        best_key, best = None, None
        seen: set[int] = set()
        for rank, tier in enumerate(self.node_tiers_fn(queue)):
            taken = 0
            for i in index.iter_fitting(vec, level, types):
                if i in seen or not (tier == "any" or self.in_tier(i, tier, queue.name)):
                    continue
                if filtered and not self.node_allowed(job, i):
                    continue
                seen.add(i)
                key = (sum(fn(job, i) for fn in crossing), -rank, sum(fn(job, i) for fn in within),
                       tuple(-x for x in free[i][at]), -i)
                if best_key is None or key > best_key:
                    best_key, best = key, i
                taken += 1
                if taken >= limit:
                    break
        return best

    def in_tier(self, i: int, tier: str, queue: str) -> bool:
        """Is node ``i`` in ``tier`` (``own``, ``unused``, ``used``) for ``queue``?"""
        bucket = self.index.bucket(i)
        if tier == "own":
            return bucket == queue
        if tier == "unused":
            return bucket is None
        return bucket is not None

    def queue_order(self, queue: QueueState) -> QueueOrder:
        """``queue``'s queued jobs in job order, read lazily.

        The order kept between cycles, unless a plugin orders jobs: then one
        built for this cycle from the plugins' keys (they may change with time).
        """
        if not self.job_order_fns:
            return queue.queued
        order = self._orders.get(queue.name)
        if order is None:
            entries = [(*self.job_sort_key(entry[-1], entry[2]), entry[-1]) for entry in queue.queued.live_entries()]
            order = self._orders[queue.name] = QueueOrder(None, entries)
        return order

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

    def pass_over(self, jobs: list[Job], misfits: KnownMisfits) -> None:
        """Record that allocate passed over ``jobs``, known misfits of one queue, with their keys' failures."""
        self.passed_over.append((jobs, misfits))

    def flush_passed_over(self) -> None:
        """Write the passed-over jobs' failures into ``failures`` now, over what is there."""
        self._read_passed_over()
        if self._passed_over_failures:
            self.failures.update(self._passed_over_failures)
        self.passed_over, self._passed_over_failures, self._passed_over_read = [], {}, 0

    def _read_passed_over(self) -> dict[str, str | tuple]:
        found = self._passed_over_failures
        for jobs, misfits in self.passed_over[self._passed_over_read:]:
            failures = misfits.failures_of(jobs)
            found.update(zip(map(_ID, jobs), failures if isinstance(failures, list) else repeat(failures)))
        self._passed_over_read = len(self.passed_over)
        return found

    def explain(self, job: Job) -> str:
        """One short reason why ``job`` is still queued."""
        failure = self.failures.get(job.id)
        # A job passed over as a known misfit reads as its key's failure, unless something was recorded for
        # it since (an action after allocate) or a later action placed it (its failure went then too).
        if failure is None and self.passed_over and job.id not in self.scheduled_ids:
            found = self._passed_over_failures
            if self._passed_over_read != len(self.passed_over):
                found = self._read_passed_over()
            failure = found.get(job.id)
        if failure is None:
            return self.unexamined_reason.get(job.queue, "not reached this cycle")
        if isinstance(failure, str):
            return failure
        vec, level, types = failure
        text = self._shortfalls.get((vec, level, id(types)))
        return text if text is not None else self._shortfall(vec, level, types)

    def _shortfall(self, vec: Vector, level: int, types: Sequence[int]) -> str:
        total, fitting, counts = self.index.shortfall(vec, level, types)
        short = [f"{count} insufficient {name}" for name, count in zip(self.space.names, counts) if count]
        return f"{fitting}/{total} nodes fit: {', '.join(short) or 'room taken by other jobs this cycle'}"

    def _freeze_explanations(self) -> None:
        """Word the node shortfalls now: the index lives on and changes in the next cycle.

        Each distinct failure once: jobs of one shape share their failure object, so they are
        told apart by identity in a C-level pass, not walked one by one.
        """
        values = list(self.failures.values())
        distinct = dict(zip(map(id, values), values))
        for _, misfits in self.passed_over:
            distinct.update((id(failure), failure) for failure in misfits.known.values())
        for failure in distinct.values():
            if isinstance(failure, tuple):
                key = (failure[0], failure[1], id(failure[2]))
                if key not in self._shortfalls:
                    self._shortfalls[key] = self._shortfall(*failure)

    # -- closing ----------------------------------------------------------
    def close(self) -> Decisions:
        self.preempt_evicted()
        self._freeze_explanations()
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
            timings=dict(self.timings),
            counters=dict(self.counters),
        )
        return decisions


def elastic_core(session: Session, gang) -> list[Job]:
    """The members an elastic gang still needs placed together: its minimum less those running.

    Empty once the gang has started (its minimum runs); evicted members come
    first, since they can go back to their own nodes.
    """
    members = session.gangs[gang.id]
    running = sum(1 for m in members if m.id in session.running and m.id not in session.evicted)
    need = gang.min_available - running
    if need <= 0:
        return []
    pending = [m for m in members if m.id in session.evicted or m.id not in session.running]
    pending.sort(key=lambda m: m.id not in session.evicted)
    return pending[:need]


class QueueUnits:
    """A queue's scheduling units in order, read one at a time: evicted jobs first, then queued jobs.

    A unit is a single job or, for a gang, the list of its members not yet
    running (given once, at its first member's place). An elastic gang gives
    its core (:func:`elastic_core`) as one unit, and its other members one by
    one at their own places. Queued jobs come from the queue's
    :class:`QueueOrder` through a position, so a queue of a million jobs
    costs only what is reached, and :meth:`skip_known` can pass over a run of
    known misfits in bulk (allocate) where a generator could only step.
    """

    __slots__ = ("session", "queue", "evicted", "epos", "order", "position", "finished", "seen_gangs", "cores")

    def __init__(self, session: Session, queue: QueueState, evicted: Iterable[Job]):
        self.session = session
        self.queue = queue
        self.evicted = sorted(evicted, key=lambda j: session.job_sort_key(j, 0) + (j.id,)) if evicted else []
        self.epos = 0
        self.order: QueueOrder | None = None
        self.position = 0
        self.finished = False
        self.seen_gangs: set[str] = set()
        self.cores: dict[str, set[str]] = {}

    def _unit(self, job: Job):
        gang = job.gang
        if gang is None:
            return job
        session = self.session
        if gang.min_available:
            core = self.cores.get(gang.id)
            if core is None:
                members = elastic_core(session, gang)
                self.cores[gang.id] = {m.id for m in members}
                if members:
                    return members
            elif job.id in core:
                return None
            return job
        if gang.id in self.seen_gangs:
            return None
        self.seen_gangs.add(gang.id)
        return [m for m in session.gangs[gang.id]
                if m.id in session.evicted or (m.id not in session.running and m.id not in session.scheduled_ids)]

    def queued_phase(self) -> bool:
        """Whether the evicted jobs are all given and queued jobs come next (the order is open)."""
        if self.order is not None:
            return True
        if self.epos < len(self.evicted) or self.finished:
            return False
        queue, session = self.queue, self.session
        if queue.name in session.cordoned:
            session.unexamined_reason[queue.name] = f"queue {queue.name} is cordoned: it schedules nothing new"
            self.finished = True
            return False
        self.order = session.queue_order(queue)
        return True

    def next(self):
        """The next unit, or None when the queue has no more."""
        evicted = self.evicted
        while self.epos < len(evicted):
            job = evicted[self.epos]
            self.epos += 1
            found = self._unit(job)
            if found is not None:
                return found
        if self.order is None and not self.queued_phase():
            return None
        order = self.order
        placed = self.session.scheduled_ids  # by an earlier action of this cycle: not offered again
        withheld = self.session.set_aside
        while (entry := order.at(self.position)) is not None:
            self.position += 1
            job = entry[-1]
            if job.id in placed or job.id in withheld:
                continue
            if job.gang is None:
                order.offered.append(self.position - 1)
                return job
            found = self._unit(job)
            if found is not None:
                return found
        return None

    def skip_known(self, misfits: KnownMisfits, limit: int, job_valid) -> list[Job]:
        """Pass over the queued jobs ahead that are known misfits, at most ``limit``; return them.

        The run stops before the first job that is not a plain known misfit:
        another requirements key, a gang member, a job placed by an earlier
        action or set aside (:meth:`next` handles those one by one), or a job
        ``job_valid`` refuses (it is offered and gets its own reason). The
        run is read in chunks that double while they are all misfits, with
        C-level passes over each chunk; the caller records the failures.
        """
        order, session = self.order, self.session
        ahead, withheld = misfits.ahead, session.set_aside
        gangs = bool(session.gangs)
        passed: list[Job] = []
        chunk = 16
        while len(passed) < limit:
            n = min(chunk, limit - len(passed))
            jobs = list(map(_JOB, order.peek(self.position, n)))
            if not jobs:
                break
            run = misfits.run(jobs)
            if run and gangs:
                members = list(map(_GANG, jobs[:run]))
                if members.count(None) != run:
                    run = members.index(next(filter(None, members)))
            if run and (ahead or withheld):
                ids = list(map(_ID, jobs[:run]))
                stops = list(map(or_, map(ahead.__contains__, ids), map(withheld.__contains__, ids)))
                if True in stops:
                    run = stops.index(True)
            if run and job_valid is not None:
                refused = list(map(job_valid, jobs[:run]))
                if any(refused):
                    run = next(k for k, why in enumerate(refused) if why)
            if run:
                self.position += run
                passed += jobs[:run] if run < len(jobs) else jobs
            if run < n or len(jobs) < n:
                break
            chunk *= 4
        return passed


class KnownMisfits:
    """One queue's known misfits in allocate: requirements key -> the failure its first job met.

    :meth:`run` finds how many jobs at the front of a list have a known key,
    by C-level passes field by field (request mapping, priority class,
    tolerations, node selector by identity, as :func:`requirements_key`)
    rather than a key tuple per job; when the known keys are not all
    combinations of their fields' values (rare: one queue's shapes would
    have to differ in two fields at once), by key tuples.
    """

    __slots__ = ("known", "ahead", "_size", "_requests", "_classes", "_tolerations", "_selectors", "_cross",
                 "_failure", "_single")

    def __init__(self, ahead: set[str]):
        self.known: dict[tuple, object] = {}
        #: Jobs placed this cycle that may still lie ahead in a queue (earlier actions, gang members).
        self.ahead = ahead
        self._size = -1

    def __bool__(self) -> bool:
        return bool(self.known)

    def _prepare(self) -> None:
        known = self.known
        self._size = len(known)
        self._requests = {key[0] for key in known}
        self._classes = {key[1] for key in known}
        self._selectors = {key[2] for key in known}
        self._tolerations = {key[3] for key in known}
        self._cross = len(known) == len(self._requests) * len(self._classes) * len(self._selectors) * \
            len(self._tolerations)
        #: The one known key's (request mapping id, class, tolerations id) with no selector, else None.
        self._single = None
        if len(known) == 1 and self._selectors == {0}:
            key = next(iter(known))
            self._single = (key[0], key[1], key[3])
        failures = list(known.values())
        #: The failure of every known key when they share one (one shape, or one reason), else None.
        self._failure = failures[0] if all(map(is_, failures, repeat(failures[0]))) else None

    def run(self, jobs: list[Job]) -> int:
        """How many of ``jobs``, from the first, have a known requirements key."""
        if self._size != len(self.known):
            self._prepare()
        n = len(jobs)
        if not self._cross:
            ok = list(map(self.known.__contains__, _keys(jobs)))
            return ok.index(False) if False in ok else n
        if self._single is not None:
            # One known key (one shape failed so far, the usual case): every job of it, counted in C.
            requests, class_name, tolerations = self._single
            if list(map(id, map(_REQUESTS, jobs))).count(requests) == n and \
                    list(map(_CLASS, jobs)).count(class_name) == n and \
                    list(map(id, map(_TOLERATIONS, jobs))).count(tolerations) == n and \
                    (self._selectors != {0} or not any(map(_SELECTOR, jobs))):
                return n
        run = n
        # Field by field, each pass over the run the passes before it left: request mapping and tolerations
        # by identity, priority class by name.
        for allowed, field, by_identity in ((self._requests, _REQUESTS, True), (self._classes, _CLASS, False),
                                            (self._tolerations, _TOLERATIONS, True)):
            values = map(id, map(field, jobs)) if by_identity else map(field, jobs)
            ok = list(map(allowed.__contains__, values))
            if False in ok:
                run = ok.index(False)
                if not run:
                    return 0
                jobs = jobs[:run]
        selectors = self._selectors
        if selectors == {0}:
            if any(map(_SELECTOR, jobs)):
                run = list(map(truth, map(_SELECTOR, jobs))).index(True)
        else:
            chosen = list(map(_SELECTOR, jobs))
            ok = list(map(selectors.__contains__, map(mul, map(truth, chosen), map(id, chosen))))
            if False in ok:
                run = ok.index(False)
        return run

    def failures_of(self, jobs: list[Job]):
        """The failure of every job in ``jobs`` (all known misfits): one shared, or one per job."""
        if self._size != len(self.known):
            self._prepare()
        if self._failure is not None:
            return self._failure
        return list(map(self.known.__getitem__, _keys(jobs)))


def _keys(jobs: list[Job]):
    """:func:`requirements_key` of each job, in C-level passes."""
    selectors = list(map(_SELECTOR, jobs))
    return zip(map(id, map(_REQUESTS, jobs)), map(_CLASS, jobs), map(mul, map(truth, selectors), map(id, selectors)),
               map(id, map(_TOLERATIONS, jobs)))


def iter_units(session: Session, queue: QueueState, evicted: Iterable[Job]):
    """Yield a queue's scheduling units in order (see :class:`QueueUnits`)."""
    units = QueueUnits(session, queue, evicted)
    while (unit := units.next()) is not None:
        yield unit
