"""The extension points: each declared once here, typed, with its contract and combine rule.

An extension point is a plain callable a plugin registers on the session
in :func:`~flotilla.core.hookspecs.flotilla_session_open`; actions call it
in their inner loops, where a pluggy call (a few microseconds each) would
cost too much. Each one is a :class:`~typing.Protocol` below: its
``__call__`` is the signature, its docstring the contract. The session's
registration methods take their parameter types from these protocols, and
:data:`EXTENSION_POINTS` pairs each with the method that registers it and
the one rule by which several plugins' answers combine.
``docs/plugins-reference.md`` is generated from this module
(``scripts/plugins-reference``) and a test checks that it is current.

A node is an ``int``: its position in the session's node list, valid for
the session it was given by. Resources are a :data:`~flotilla.core.resources.Vector`
(ints in the order of ``session.space.names``; cpu in millicores).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, Sequence

if TYPE_CHECKING:
    from flotilla.core.cyclestate import QueueState
    from flotilla.core.model import Gang, Job
    from flotilla.core.nodeindex import NodeType
    from flotilla.core.resources import Vector


class QueueOrder(Protocol):
    """A sortable key for ``queue`` if it also had ``extra`` (a resource vector, or None for as it is).

    Allocate serves next the queue whose key would be smallest (in a queue
    tree, level by level among siblings); ties go to the queue name that
    sorts first. The keys of one policy must compare with each other: all
    floats, or all tuples of floats (a strict-priority policy returns
    ``(tier, share / fair_share)``). Only queues with work offer it, and they
    have a fair share above 0. A function whose answer moves with its own
    queue's allocation only may say so with the attribute
    ``own_usage_only = True``: allocate then computes a waiting offer's key
    once, not again at each pick. The key is never reported: the share that
    ``schedule-once``, the service and ``simulate`` show is measured by the
    core (:mod:`flotilla.core.shares`), whatever policy orders the queues.
    """

    def __call__(self, queue: QueueState, extra: Vector | None, /) -> float | tuple[float, ...]: ...


class PreemptQueueOrder(Protocol):
    """Among urgent jobs of equal priority, whose queue preempts first: the smallest key first.

    Optional: a policy that only orders queues (``queue_order``) need not
    provide it; the default is the queue's measured share over its fair share.
    """

    def __call__(self, queue: QueueState, /) -> float | tuple[float, ...]: ...


class JobOrder(Protocol):
    """A sort key for ``job`` within its queue; smaller runs first. Evicted jobs always come first."""

    def __call__(self, job: Job, /) -> tuple: ...


class Predicate(Protocol):
    """May ``job`` go on nodes of this type? None for yes, a short reason for no.

    The reason is printed after a count of the nodes it refused, as
    kube-scheduler's are (``0/8 nodes are available: 3 node(s) are in
    another rack``), so word it to follow ``node(s)``. The core's Kubernetes
    feasibility (:mod:`flotilla.core.feasibility`: unschedulable nodes,
    NoSchedule and NoExecute taints, nodeSelector and node affinity) is
    always asked first; a plugin's predicate can only refuse more. Called once
    per job requirements and node type and cached for the cycle: depend only
    on the job's queue, priority class, node selector and tolerations.
    """

    def __call__(self, job: Job, node_type: NodeType, /) -> str | None: ...


class QueueAdmit(Protocol):
    """May ``queue`` take ``job`` (whose requests are ``vec``) now? None for yes, a reason for no.

    The core's queue limits (:mod:`flotilla.core.limits`) are always asked
    first; a plugin adds rules of its own (a cap on running jobs, say).
    """

    def __call__(self, queue: QueueState, job: Job, vec: Vector, /) -> str | None: ...


class NodeTiers(Protocol):
    """The node sets to search in order for ``queue``'s jobs, each one of ``own``, ``unused``, ``used``, ``any``.

    ``own``: nodes only this queue uses; ``unused``: nodes nobody uses;
    ``used``: nodes others use. A job goes to the first set that has a node
    it fits on; within a set, to the node with the least free space that
    fits (or the best scored one, see ``node_score``).
    """

    def __call__(self, queue: QueueState, /) -> Sequence[str]: ...


class NodeScore(Protocol):
    """How much ``job`` prefers ``node`` (a node position); higher is better. Any finite number.

    As kube-scheduler's score plugins: the score is asked of every fitting
    node the job may take (nodes that pass every filter), or, on 100 nodes
    and more, of kube-scheduler's sample of them
    (``allocate.percentageOfNodesToScore``, default adaptive: 50% less 1%
    per 125 nodes, at least 5% and at least 100 nodes), taken in node order
    from where the last sample stopped, never by free space. One plugin's
    scores are then normalised over those nodes (its highest maps to 100,
    the others in proportion; when some are below 0 the lowest maps to 0),
    multiplied by the plugin's ``weight:`` in the config (default 1) and
    added to the other plugins'. Only how scores compare matters: a score
    of 10 or 1 on the one node preferred is the same preference.

    Registered plainly, scores order the fitting nodes *within* the first
    tier (``node_tiers``) that has any. A score registered with
    ``across_tiers=True`` is a preference strong enough to cross tiers:
    allocate then weighs the fitting nodes of *every* tier and takes the
    highest total of the across-tier scores; only among equal totals does
    the earlier tier, then the within-tier score, decide.
    """

    def __call__(self, job: Job, node: int, /) -> float: ...


class NodeFilter(Protocol):
    """May ``job`` start on ``node``? For per-node rules predicates cannot express (they see node types).

    The ``reserve`` action sets one per cycle so that reserved nodes take
    only preemptible jobs.
    """

    def __call__(self, job: Job, node: int, /) -> bool: ...


class GangReady(Protocol):
    """Is this gang complete enough to place? None for yes, a reason for no.

    ``members`` are the members offered together. Placement itself is all or
    nothing on one cluster.
    """

    def __call__(self, gang: Gang, members: Sequence[Job], /) -> str | None: ...


class Preemptable(Protocol):
    """May running job ``victim`` be displaced to make room for ``preemptor`` (urgency preemption)?"""

    def __call__(self, preemptor: Job, victim: Job, /) -> bool: ...


class VictimOrder(Protocol):
    """A sort key for an eligible victim on a node; the preempt action takes victims in this order until the preemptor fits."""

    def __call__(self, victim: Job, /) -> tuple: ...


class Reclaimable(Protocol):
    """May running job ``victim`` of ``queue`` be reclaimed, its queue then holding ``left``? (Volcano's ReclaimableFn.)

    Reclaim is preemption to fair share (the ``evict`` action): another
    queue's job of an equal or higher priority class takes the victim's room.
    The core weighs the jobs at risk one unit (a gang whole) at a time in
    victim order (``reclaim_order``), keeping its own floor first (the
    queue's ``protectedFractionOfFairShare`` of its fair share); a unit
    every plugin lets go is evicted, and ``left`` shrinks by it for the
    next. ``left`` is a :data:`Vector`: what ``queue`` would hold with this
    victim and those taken before it gone. Answer False to keep the victim
    on its node this cycle (a quota policy: while ``left`` would fall below
    the queue's nominal quota). Called during ``evict`` only, once per
    victim at risk; urgency preemption asks ``preemptable`` instead.
    """

    def __call__(self, queue: QueueState, victim: Job, left: Vector, /) -> bool: ...


class ReclaimOrder(Protocol):
    """A sort key for a victim of reclaim; the smallest is weighed (and so reclaimed) first.

    A unit (a gang) takes its members' smallest key. Ties fall to the
    core's order: lowest priority class first, largest first, highest id
    (natural order) first. Never the submission order, so the victims do
    not depend on the order jobs came in; a key that reads submission times
    makes them depend on it.
    """

    def __call__(self, victim: Job, /) -> tuple: ...


class JobValid(Protocol):
    """Is ``job`` acceptable at all? None for yes; a refused job stays queued with the reason.

    Called once per job the allocate action examines, not for every queued
    job. A check whose answer depends on the job's priority class alone may
    say so with the attribute ``by_priority_class = True``: allocate then
    passes over a run of known misfits (same requirements, so the same class)
    without calling it per job.
    """

    def __call__(self, job: Job, /) -> str | None: ...


class OnAllocate(Protocol):
    """``job`` was placed on ``node`` (or an evicted job returned to its node), as a statement commits."""

    def __call__(self, job: Job, node: int, /) -> None: ...


class OnEvict(Protocol):
    """Running ``job`` was evicted or preempted from ``node``; it no longer counts for its queue."""

    def __call__(self, job: Job, node: int, /) -> None: ...


@dataclass(frozen=True)
class ExtensionPoint:
    """One extension point: its protocol (signature and contract), how to register it, and how answers combine."""

    name: str
    register: str
    protocol: type
    combine: str

    @property
    def contract(self) -> str:
        return inspect.cleandoc(self.protocol.__doc__ or "")

    @property
    def signature(self) -> str:
        """``(name: Type, ...) -> Result``, as declared on the protocol's ``__call__``."""
        call = inspect.signature(self.protocol.__call__)
        params = [f"{p.name}: {p.annotation}" for p in call.parameters.values() if p.name != "self"]
        return f"({', '.join(params)}) -> {call.return_annotation}"


EXTENSION_POINTS: tuple[ExtensionPoint, ...] = (
    ExtensionPoint("queue_order", "add_queue_order", QueueOrder,
                   "exactly one plugin provides it (the fairness policy); none or two is a configuration error"),
    ExtensionPoint("preempt_queue_order", "add_preempt_queue_order", PreemptQueueOrder,
                   "optional; at most one plugin provides it, two is a configuration error; default the queue's "
                   "measured share over its fair share"),
    ExtensionPoint("job_order", "add_job_order", JobOrder,
                   "keys are concatenated in plugin order, so the first plugin that tells two jobs apart decides; "
                   "ties fall back to priority, then submission time, then position"),
    ExtensionPoint("predicate", "add_predicate", Predicate,
                   "all must agree; the core's feasibility first, then plugins in order; the first refusal, with "
                   "its reason, wins"),
    ExtensionPoint("queue_admit", "add_queue_admit", QueueAdmit,
                   "all must agree; the core's queue limits first, then plugins in order; the first refusal, with "
                   "its reason, wins"),
    ExtensionPoint("node_tiers", "set_node_tiers", NodeTiers,
                   "the last plugin to set it wins; default `('any',)`"),
    ExtensionPoint("node_score", "add_node_score", NodeScore,
                   "each plugin's scores normalised to 0..100 over the nodes weighed, times its `weight:` "
                   "(default 1), added up, within tiers and across tiers (`across_tiers=True`) separately; the "
                   "highest total wins; ties by least free space, then node position"),
    ExtensionPoint("node_filter", "add_node_filter", NodeFilter,
                   "all must agree; a node any filter refuses is skipped"),
    ExtensionPoint("gang_ready", "add_gang_ready", GangReady,
                   "all must agree; the first refusal, with its reason, wins"),
    ExtensionPoint("preemptable", "add_preemptable", Preemptable,
                   "all must agree: a victim is eligible only if every plugin says yes; with none registered "
                   "nothing may be preempted"),
    ExtensionPoint("victim_order", "add_victim_order", VictimOrder,
                   "keys are concatenated in plugin order; then lowest priority, largest request, id"),
    ExtensionPoint("reclaimable", "add_reclaimable", Reclaimable,
                   "all must agree, after the core's protected floor: a unit is reclaimed only if every plugin says "
                   "yes for each of its members at risk"),
    ExtensionPoint("reclaim_order", "add_reclaim_order", ReclaimOrder,
                   "keys are concatenated in plugin order; then lowest priority class, largest, highest id"),
    ExtensionPoint("job_valid", "add_job_valid", JobValid,
                   "the first refusal, with its reason, wins"),
    ExtensionPoint("on_allocate", "add_event_handler", OnAllocate,
                   "every handler is called, in plugin order (`add_event_handler(on_allocate=...)`)"),
    ExtensionPoint("on_evict", "add_event_handler", OnEvict,
                   "every handler is called, in plugin order (`add_event_handler(on_evict=...)`)"),
)
