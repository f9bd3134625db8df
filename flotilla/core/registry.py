"""The extension registry: what plugins register on a session, and the rules that combine their answers.

Each extension point is declared in :mod:`flotilla.core.extensions` (its
protocol, contract and combine rule); this mixin of
:class:`~flotilla.core.session.Session` holds the registered callables and
answers for them all at once, as Volcano's ``session_plugins.go`` keeps
registration and combining apart from the session's state. The core's
guarantees are registered here first, before any plugin's, and no plugin
can remove them: Kubernetes feasibility (:mod:`flotilla.core.feasibility`)
always, queue limits (:mod:`flotilla.core.limits`) whenever a queue has some.

What a plugin registers while :attr:`ExtensionRegistry.opening_plugin` names
it is guarded (:func:`flotilla.core.extensions.guard`): its failures are
:class:`~flotilla.core.extensions.PluginFailed`, which the actions catch per
job or per queue and hand to :meth:`ExtensionRegistry.plugin_failed`.
"""

from __future__ import annotations

from typing import Sequence

from flotilla.core.cyclestate import QueueState, RunningJob
from flotilla.core.extensions import (GangReady, JobOrder, JobValid, NodeFilter, NodeScore, NodeTiers, OnAllocate,
                                      OnEvict, PluginFailed, Preemptable, PreemptQueueOrder, Predicate, QueueAdmit,
                                      QueueOrder, Reclaimable, ReclaimOrder, VictimOrder, guard, inline)
from flotilla.core.feasibility import node_type_refusal
from flotilla.core.limits import queue_limit_refusal
from flotilla.core.model import Gang, Job
from flotilla.core.podplacements import pod_checked, pod_refusal
from flotilla.core.reasons import Why
from flotilla.core.resources import Vector


def _any_tier(queue: QueueState) -> tuple[str, ...]:
    """The default node tiers: every node, as one set."""
    return _ANY_TIER


_ANY_TIER = ("any",)
_ANY_TIER_INLINE = inline(_any_tier)


class SessionError(Exception):
    """The plugins registered on a session do not form a usable whole."""


class ExtensionRegistry:
    """The registered callables of every extension point, and their combined answers (a mixin of Session)."""

    def _open_registry(self) -> None:
        """Empty registrations but the core's own; needs ``queues`` and ``space``."""
        self.queue_order_fns: list[QueueOrder] = []
        self.preempt_queue_order_fns: list[PreemptQueueOrder] = []
        self.job_order_fns: list[JobOrder] = []
        self.predicate_fns: list[Predicate] = [node_type_refusal]
        self.queue_admit_fns: list[QueueAdmit] = []
        if any(queue.limit_vector is not None for queue in self.queues.values()):
            self.queue_admit_fns.append(queue_limit_refusal(self.space.names))
        self.node_tiers_fn: NodeTiers = _any_tier
        #: ``node_tiers_fn`` taken apart for the node search's common path, and the answer it last accepted.
        self.node_tiers_inline = _ANY_TIER_INLINE
        self.node_tiers_accepted = None
        #: The plugin whose ``flotilla_session_open`` is running (the scheduler sets it around each call), so that
        #: what it registers can carry its config (its node scores' ``weight:``); None outside those calls.
        self.opening_plugin: str | None = None
        self.node_score_fns: list[NodeScore] = []
        #: Node scores registered with ``across_tiers=True``: preferences that cross node tiers.
        self.tier_crossing_score_fns: list[NodeScore] = []
        #: Each score's weight (its plugin's ``weight:``), aligned with the two lists above.
        self.node_score_weights: list[float] = []
        self.tier_crossing_score_weights: list[float] = []
        #: The plugins that registered a node score this session.
        self.score_plugins: set[str] = set()
        #: Node filters actions set for this cycle (``reserve``: reserved nodes take only preemptible jobs).
        self.node_filter_fns: list[NodeFilter] = []
        self.gang_ready_fns: list[GangReady] = []
        self.preemptable_fns: list[Preemptable] = []
        self.victim_order_fns: list[VictimOrder] = []
        self.reclaimable_fns: list[Reclaimable] = []
        self.reclaim_order_fns: list[ReclaimOrder] = []
        self.job_valid_fns: list[JobValid] = []
        self.allocate_handlers: list[OnAllocate] = []
        self.evict_handlers: list[OnEvict] = []
        #: (plugin, point, error) -> how many times it failed this cycle.
        self.plugin_errors: dict[tuple[str, str, str], int] = {}
        #: Queues a plugin failure left out of the cycle, with the reason their jobs read.
        self.failed_queues: dict[str, Why] = {}

    def _guarded(self, point: str, fn):
        plugin = self.opening_plugin
        return fn if plugin is None else guard(point, plugin, fn, self.plugin_failed)

    def plugin_failed(self, failure: PluginFailed, jobs: Sequence[Job] = ()) -> None:
        """Record a plugin's failure: counted; a queue-scoped one leaves its queue out of the cycle, and the
        queued ``jobs`` (those the caller was placing) wait with its reason."""
        key = (failure.plugin, failure.point, failure.error)
        self.plugin_errors[key] = self.plugin_errors.get(key, 0) + 1
        if failure.scope == "queue" and failure.subject is not None:
            self.failed_queues.setdefault(failure.subject.name, failure.why)
        for job in jobs:
            if job.id not in self.evicted:
                self.failures[job.id] = failure.why

    def fail_queue(self, name: str, reason: Why) -> None:
        """Leave queue ``name`` out of the rest of the cycle: its jobs wait with ``reason``."""
        self.failed_queues.setdefault(name, reason)

    # -- registration (called by plugins in flotilla_session_open) --------
    def add_queue_order(self, fn: QueueOrder) -> None:
        fn = self._guarded("queue_order", fn)
        self.queue_order_fns.append(fn)

    def add_preempt_queue_order(self, fn: PreemptQueueOrder) -> None:
        fn = self._guarded("preempt_queue_order", fn)
        self.preempt_queue_order_fns.append(fn)

    def add_job_order(self, fn: JobOrder) -> None:
        fn = self._guarded("job_order", fn)
        self.job_order_fns.append(fn)

    def add_predicate(self, fn: Predicate) -> None:
        fn = self._guarded("predicate", fn)
        self.predicate_fns.append(fn)

    def add_queue_admit(self, fn: QueueAdmit) -> None:
        fn = self._guarded("queue_admit", fn)
        self.queue_admit_fns.append(fn)

    def set_node_tiers(self, fn: NodeTiers) -> None:
        fn = self._guarded("node_tiers", fn)
        self.node_tiers_fn = fn
        self.node_tiers_inline = inline(fn)
        self.node_tiers_accepted = None

    def add_node_score(self, fn: NodeScore, across_tiers: bool = False) -> None:
        plugin = self.opening_plugin
        fn = self._guarded("node_score", fn)
        weight = self.settings.score_weights.get(plugin, 1.0) if plugin is not None else 1.0
        if across_tiers:
            self.tier_crossing_score_fns.append(fn)
            self.tier_crossing_score_weights.append(weight)
        else:
            self.node_score_fns.append(fn)
            self.node_score_weights.append(weight)
        if plugin is not None:
            self.score_plugins.add(plugin)

    def add_gang_ready(self, fn: GangReady) -> None:
        fn = self._guarded("gang_ready", fn)
        self.gang_ready_fns.append(fn)

    def add_preemptable(self, fn: Preemptable) -> None:
        fn = self._guarded("preemptable", fn)
        self.preemptable_fns.append(fn)

    def add_victim_order(self, fn: VictimOrder) -> None:
        fn = self._guarded("victim_order", fn)
        self.victim_order_fns.append(fn)

    def add_reclaimable(self, fn: Reclaimable) -> None:
        self.reclaimable_fns.append(self._guarded("reclaimable", fn))

    def add_reclaim_order(self, fn: ReclaimOrder) -> None:
        self.reclaim_order_fns.append(self._guarded("reclaim_order", fn))

    def add_job_valid(self, fn: JobValid) -> None:
        fn = self._guarded("job_valid", fn)
        self.job_valid_fns.append(fn)

    def add_event_handler(self, on_allocate: OnAllocate | None = None, on_evict: OnEvict | None = None) -> None:
        if on_allocate is not None:
            self.allocate_handlers.append(self._guarded("on_allocate", on_allocate))
        if on_evict is not None:
            self.evict_handlers.append(self._guarded("on_evict", on_evict))

    def check_registrations(self) -> None:
        """Enforce the combine rules that are about *how many* plugins answer."""
        if len(self.queue_order_fns) != 1:
            raise SessionError(
                f"exactly one plugin must provide queue_order (a fairness policy such as assetfairness or drf); "
                f"{len(self.queue_order_fns)} did")
        if len(self.preempt_queue_order_fns) > 1:
            raise SessionError(
                f"at most one plugin may provide preempt_queue_order; {len(self.preempt_queue_order_fns)} did")

    def add_node_filter(self, fn: NodeFilter) -> None:
        """May ``job`` start on node ``i``? (Reservations; all filters must agree.) Set by actions, per cycle."""
        self.node_filter_fns.append(self._guarded("node_filter", fn))
        self._found = None  # a node search's answer predates this filter

    def node_allowed(self, job: Job, i: int, making_way: frozenset[str] | set[str] = frozenset()) -> bool:
        """May ``job`` start on node ``i``: none of its host ports is held there (but by jobs ``making_way``),
        its pod rules and the held pods' anti-affinity allow it (:mod:`flotilla.core.podplacements`), its claims
        can be had there this cycle (:class:`~flotilla.core.volumes.VolumePicks`), and the node filters agree."""
        ports = job.host_ports
        if ports and not self.state.ports.free(i, ports) and \
                not (making_way and self.state.ports.holders(i, ports) <= making_way):
            return False
        if job.claims and self.volume_picks is not None and not self.volume_picks.allowed(job, i):
            return False
        if (job.pod_rules is not None or self.state.pods.anti) and pod_refusal(self, job, i) is not None:
            return False
        return all(fn(job, i) for fn in self.node_filter_fns)

    def node_checked(self, job: Job) -> bool:
        """Whether ``job``'s nodes must pass :meth:`node_allowed` one by one (node filters, host ports, claims, pod
        rules, held pods' anti-affinity selecting it); for nearly every job, no."""
        return bool(self.node_filter_fns) or bool(job.host_ports) or bool(job.claims) or \
            ((job.pod_rules is not None or bool(self.state.pods.anti)) and pod_checked(self, job))

    # -- combined answers -------------------------------------------------
    def queue_key(self, queue: QueueState, extra: Vector | None = None) -> float | tuple:
        """The fairness policy's key for ``queue`` if it also had ``extra``: allocate serves the smallest next."""
        return self.queue_order_fns[0](queue, extra)

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

    def sorted_by_job_order(self, jobs) -> list[Job]:
        """``jobs`` in job order (ties by id); if a plugin's job order fails, in the core's order (priority,
        submission time, id), the failure recorded: evicted and running jobs have no queue place to lose."""
        try:
            return sorted(jobs, key=lambda j: self.job_sort_key(j, 0) + (j.id,))
        except PluginFailed as failure:
            self.plugin_failed(failure)
            return sorted(jobs, key=lambda j: (j.priority, j.submitted, j.id))

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

    def reclaim_key(self, job: Job) -> tuple:
        """The plugins' ``reclaim_order`` keys for ``job``, concatenated (empty without any)."""
        return tuple(part for fn in self.reclaim_order_fns for part in fn(job))
