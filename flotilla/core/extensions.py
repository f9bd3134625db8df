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

A plugin's callable may fail: raise, or answer a value its protocol does
not allow (a NaN, a ``None`` where a number is due). The session calls it
through a guard (:func:`guard`) that turns either into
:class:`PluginFailed`, naming the plugin and the point; what fails then is
written per point, in its protocol's docstring and as its ``scope``
(``job``: the job asked about waits; ``queue``: the queue leaves the cycle;
``event``: counted, the decision stands). The core's own callables
(feasibility, queue limits, an action's node filter) are not guarded.

A node is an ``int``: its position in the session's node list, valid for
the session it was given by. Resources are a :data:`~flotilla.core.resources.Vector`
(ints in the order of ``session.space.names``; cpu in millicores).
"""

from __future__ import annotations

import functools
import inspect
import math
from dataclasses import dataclass
from numbers import Real
from operator import eq
from typing import TYPE_CHECKING, Callable, NamedTuple, Protocol, Sequence

from flotilla.core.reasons import Reason, make

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

    When it fails (raises, or answers anything but a finite number or a
    tuple of finite numbers, or a number where earlier answers were tuples
    or the other way round), the queue it was asked about leaves the cycle:
    nothing more of it is placed and every job of it waits with the reason
    ``plugin NAME failed at queue_order: ExcType: message``.
    """

    def __call__(self, queue: QueueState, extra: Vector | None, /) -> float | tuple[float, ...]: ...


class PreemptQueueOrder(Protocol):
    """Among urgent jobs of equal priority, whose queue preempts first: the smallest key first.

    Optional: a policy that only orders queues (``queue_order``) need not
    provide it; the default is the queue's measured share over its fair share.
    When it fails (as ``queue_order``), the queue leaves the cycle's
    preemption: its urgent jobs displace no one and wait with the reason.
    """

    def __call__(self, queue: QueueState, /) -> float | tuple[float, ...]: ...


class JobOrder(Protocol):
    """A sort key for ``job`` within its queue; smaller runs first. Evicted jobs always come first.

    When it fails (raises, answers anything but a tuple, or a tuple holding
    a NaN), that job waits with the reason and the rest of its queue is
    ordered without it.
    """

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

    When it fails (raises, or answers anything but None or a string), the
    job asked about waits with the reason ``plugin NAME failed at predicate:
    ExcType: message``.
    """

    def __call__(self, job: Job, node_type: NodeType, /) -> str | None: ...


class QueueAdmit(Protocol):
    """May ``queue`` take ``job`` (whose requests are ``vec``) now? None for yes, a reason for no.

    The core's queue limits (:mod:`flotilla.core.limits`) are always asked
    first; a plugin adds rules of its own (a cap on running jobs, say).
    When it fails (raises, or answers anything but None or a string), the job waits with the reason.
    """

    def __call__(self, queue: QueueState, job: Job, vec: Vector, /) -> str | None: ...


class NodeTiers(Protocol):
    """The node sets to search in order for ``queue``'s jobs, each one of ``own``, ``unused``, ``used``, ``any``.

    ``own``: nodes only this queue uses; ``unused``: nodes nobody uses;
    ``used``: nodes others use. A job goes to the first set that has a node
    it fits on; within a set, to the node with the least free space that
    fits (or the best scored one, see ``node_score``).

    When it fails (raises, or answers anything but a sequence of those
    names), the queue leaves the cycle, as for ``queue_order``.
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

    When it fails (raises, or answers anything but a finite number), the job
    being placed waits with the reason; it is placed nowhere this cycle.
    """

    def __call__(self, job: Job, node: int, /) -> float: ...


class NodeFilter(Protocol):
    """May ``job`` start on ``node``? For per-node rules predicates cannot express (they see node types).

    The ``reserve`` action sets one per cycle so that reserved nodes take
    only preemptible jobs. When it fails (raises, or answers anything but
    a bool), the job being placed waits with the reason.
    """

    def __call__(self, job: Job, node: int, /) -> bool: ...


class GangReady(Protocol):
    """Is this gang complete enough to place? None for yes, a reason for no.

    ``members`` are the members offered together. Placement itself is all or
    nothing on one cluster. When it fails (raises, or answers anything but
    None or a string), every member offered waits with the reason.
    """

    def __call__(self, gang: Gang, members: Sequence[Job], /) -> str | None: ...


class Preemptable(Protocol):
    """May running job ``victim`` be displaced to make room for ``preemptor`` (urgency preemption)?

    When it fails (raises, or answers anything but a bool), the preemptor
    waits with the reason and displaces no one this cycle.
    """

    def __call__(self, preemptor: Job, victim: Job, /) -> bool: ...


class VictimOrder(Protocol):
    """A sort key for an eligible victim on a node; the preempt action takes victims in this order until the preemptor fits.

    When it fails (raises, answers anything but a tuple, or a tuple holding
    a NaN), the job being placed waits with the reason and displaces no one.
    """

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
    victim at risk; urgency preemption asks ``preemptable`` instead. When
    it fails (raises, or answers anything but a bool), ``evict`` reclaims
    nothing this cycle.
    """

    def __call__(self, queue: QueueState, victim: Job, left: Vector, /) -> bool: ...


class ReclaimOrder(Protocol):
    """A sort key for a victim of reclaim; the smallest is weighed (and so reclaimed) first.

    A unit (a gang) takes its members' smallest key. Ties fall to the
    core's order: lowest priority class first, largest first, on the node
    where its queue has the fewest jobs at risk first, highest id (natural
    order) first. Never the submission order, so the victims do
    not depend on the order jobs came in; a key that reads submission times
    makes them depend on it. When it fails (raises, answers anything but a
    tuple, or a tuple holding a NaN), ``evict`` reclaims nothing this cycle.
    """

    def __call__(self, victim: Job, /) -> tuple: ...


class JobValid(Protocol):
    """Is ``job`` acceptable at all? None for yes; a refused job stays queued with the reason.

    Called once per job the allocate action examines, not for every queued
    job. A check whose answer depends on the job's priority class alone may
    say so with the attribute ``by_priority_class = True``: allocate then
    passes over a run of known misfits (same requirements, so the same class)
    without calling it per job. When it fails (raises, or answers
    anything but None or a string), the job waits with the reason.
    """

    def __call__(self, job: Job, /) -> str | None: ...


class OnAllocate(Protocol):
    """``job`` was placed on ``node`` (or an evicted job returned to its node), as a statement commits.

    When it raises, the failure is counted and shown; the placement stands
    (it is already made), and the other handlers are still called.
    """

    def __call__(self, job: Job, node: int, /) -> None: ...


class OnEvict(Protocol):
    """Running ``job`` was evicted or preempted from ``node``; it no longer counts for its queue.

    When it raises, the failure is counted and shown; the eviction stands.
    """

    def __call__(self, job: Job, node: int, /) -> None: ...


@dataclass(frozen=True)
class ExtensionPoint:
    """One extension point: its protocol (signature and contract), how to register it, how answers combine,
    and what its failure leaves out (``scope``: ``job``, ``queue`` or ``event``; ``subject``: the position of
    the argument it is asked about)."""

    name: str
    register: str
    protocol: type
    combine: str
    scope: str = "job"
    subject: int = 0

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
                   "exactly one plugin provides it (the fairness policy); none or two is a configuration error",
                   scope="queue"),
    ExtensionPoint("preempt_queue_order", "add_preempt_queue_order", PreemptQueueOrder,
                   "optional; at most one plugin provides it, two is a configuration error; default the queue's "
                   "measured share over its fair share", scope="queue"),
    ExtensionPoint("job_order", "add_job_order", JobOrder,
                   "keys are concatenated in plugin order, so the first plugin that tells two jobs apart decides; "
                   "ties fall back to priority, then submission time, then position"),
    ExtensionPoint("predicate", "add_predicate", Predicate,
                   "all must agree; the core's feasibility first, then plugins in order; the first refusal, with "
                   "its reason, wins"),
    ExtensionPoint("queue_admit", "add_queue_admit", QueueAdmit,
                   "all must agree; the core's queue limits first, then plugins in order; the first refusal, with "
                   "its reason, wins", subject=1),
    ExtensionPoint("node_tiers", "set_node_tiers", NodeTiers,
                   "the last plugin to set it wins; default `('any',)`", scope="queue"),
    ExtensionPoint("node_score", "add_node_score", NodeScore,
                   "each plugin's scores normalised to 0..100 over the nodes weighed, times its `weight:` "
                   "(default 1), added up, within tiers and across tiers (`across_tiers=True`) separately; the "
                   "highest total wins; ties by least free space, then node position"),
    ExtensionPoint("node_filter", "add_node_filter", NodeFilter,
                   "all must agree; a node any filter refuses is skipped"),
    ExtensionPoint("gang_ready", "add_gang_ready", GangReady,
                   "all must agree; the first refusal, with its reason, wins", subject=1),
    ExtensionPoint("preemptable", "add_preemptable", Preemptable,
                   "all must agree: a victim is eligible only if every plugin says yes; with none registered "
                   "nothing may be preempted"),
    ExtensionPoint("victim_order", "add_victim_order", VictimOrder,
                   "keys are concatenated in plugin order; then lowest priority, largest request, id"),
    ExtensionPoint("reclaimable", "add_reclaimable", Reclaimable,
                   "all must agree, after the core's protected floor: a unit is reclaimed only if every plugin says "
                   "yes for each of its members at risk"),
    ExtensionPoint("reclaim_order", "add_reclaim_order", ReclaimOrder,
                   "keys are concatenated in plugin order; then lowest priority class, largest, fewest at risk on its node, highest id"),
    ExtensionPoint("job_valid", "add_job_valid", JobValid,
                   "the first refusal, with its reason, wins"),
    ExtensionPoint("on_allocate", "add_event_handler", OnAllocate,
                   "every handler is called, in plugin order (`add_event_handler(on_allocate=...)`)",
                   scope="event"),
    ExtensionPoint("on_evict", "add_event_handler", OnEvict,
                   "every handler is called, in plugin order (`add_event_handler(on_evict=...)`)",
                   scope="event"),
)

#: Each point by name.
POINTS: dict[str, ExtensionPoint] = {point.name: point for point in EXTENSION_POINTS}


class PluginFailed(Exception):
    """A plugin's callable raised, or answered what its point does not allow.

    ``reason`` is what the jobs it leaves waiting read: ``plugin NAME failed
    at POINT: ExcType: message``. ``subject`` is what the point was asked
    about (a job, a gang's members, a queue); ``scope`` says what the
    failure leaves out (:class:`ExtensionPoint`).
    """

    def __init__(self, plugin: str, point: str, error: BaseException | str, subject=None, scope: str = "job"):
        self.plugin = plugin
        self.point = point
        if isinstance(error, BaseException):
            lines = str(error).strip().splitlines()
            error = f"{type(error).__name__}: {lines[0][:200]}" if lines else type(error).__name__
        self.error: str = error
        self.subject = subject
        self.scope = scope
        super().__init__(self.reason)

    @property
    def why(self) -> Reason:
        """What the jobs it leaves waiting read, as data (code ``plugin``)."""
        return make("plugin_failed", self.plugin, self.point, self.error)

    @property
    def reason(self) -> str:
        return f"plugin {self.plugin} failed at {self.point}: {self.error}"


def _number(answer) -> bool:
    cls = answer.__class__
    if cls is float or cls is int:
        return answer - answer == 0  # false for NaN and the infinities
    return isinstance(answer, Real) and not isinstance(answer, bool) and math.isfinite(answer)


def _finite_number(answer) -> str | None:
    if _number(answer):
        return None
    if isinstance(answer, Real) and not isinstance(answer, bool):
        return f"ValueError: answered {answer!r}, not a finite number"
    return f"TypeError: answered {_shown(answer)}, not a number"


#: A finite float is always a good number: the guard checks it inline.
_finite_number.floats = [True]


def _reason(answer) -> str | None:
    if answer is None or answer.__class__ is str or answer.__class__ is Reason:
        return None
    return f"TypeError: answered {_shown(answer)}, not None or a string"


def _bool(answer) -> str | None:
    if answer is True or answer is False:
        return None
    return f"TypeError: answered {_shown(answer)}, not a bool"


def _sort_key(answer) -> str | None:
    if answer.__class__ is not tuple:
        return f"TypeError: answered {_shown(answer)}, not a tuple"
    if not all(map(eq, answer, answer)):  # only a NaN is not equal to itself
        return f"ValueError: answered {_shown(answer)}, which holds a NaN"
    return None


_TIERS = frozenset(("own", "unused", "used", "any"))


def _tiers(answer) -> str | None:
    if answer.__class__ is tuple:
        try:
            if answer in _GOOD_TIERS:
                return None
        except TypeError:  # it holds something unhashable: not tiers
            pass
    if isinstance(answer, (list, tuple)) and all(tier.__class__ is str and tier in _TIERS for tier in answer):
        if answer.__class__ is tuple and len(_GOOD_TIERS) < 64:
            _GOOD_TIERS.add(answer)
        return None
    return f"TypeError: answered {_shown(answer)}, not a sequence of own, unused, used, any"


#: Tuples of tiers found good (a plugin answers one of a few constants, session after session).
_GOOD_TIERS: set[tuple] = set()


def _shown(answer) -> str:
    text = repr(answer)
    return text if len(text) <= 60 else text[:57] + "..."


def _queue_key_check():
    """A check for one policy's queue keys this cycle: finite numbers, or tuples of them, never both."""
    kinds: list[str] = []

    def check(answer) -> str | None:
        if answer.__class__ is tuple:
            kind = "tuple"
            for part in answer:
                if not _number(part):
                    return f"{'ValueError' if isinstance(part, Real) and not isinstance(part, bool) else 'TypeError'}" \
                           f": answered {_shown(answer)}, not a tuple of finite numbers"
        else:
            problem = _finite_number(answer)
            if problem is not None:
                return problem
            kind = "number"
        if not kinds:
            kinds.append(kind)
            if kind == "number":
                check.floats.append(True)  # floats are this policy's keys: the guard checks them inline
        elif kinds[0] != kind:
            return f"TypeError: answered {_shown(answer)} where earlier answers were {kinds[0]}s"
        return None

    check.floats = []
    return check


#: The answer each point must give, checked by its guard (None: any answer is taken).
_CHECKS: dict[str, Callable[[], Callable[[object], str | None]] | Callable[[object], str | None] | None] = {
    "queue_order": _queue_key_check, "preempt_queue_order": _queue_key_check,
    "job_order": _sort_key, "victim_order": _sort_key,
    "predicate": _reason, "queue_admit": _reason, "gang_ready": _reason, "job_valid": _reason,
    "node_tiers": _tiers, "node_score": _finite_number, "node_filter": _bool, "preemptable": _bool,
    "reclaimable": _bool, "reclaim_order": _sort_key,
    "on_allocate": None, "on_evict": None,
}
_STATEFUL = {"queue_order", "preempt_queue_order"}

#: Attributes a callable may carry to say how it may be called, with the points whose protocols define them; a
#: guard keeps them.
_PROMISES = {"own_usage_only": ("queue_order",), "by_priority_class": ("job_valid",)}


def _failed(who: tuple, error, subject) -> PluginFailed:
    """The failure of the guarded callable ``who`` names (plugin, point, scope)."""
    return PluginFailed(who[0], who[1], error, subject, who[2])


# ``who`` is (plugin, point, scope), read only when the callable fails: a guard is made for every registration at
# every session open, so each holds as few cells as it can. Guards of one and two arguments are made in guard()
# itself (a call less per registration); these are the others.
def _guard3(fn, who, at, check):
    def guarded(a, b, c):
        try:
            answer = fn(a, b, c)
        except Exception as exc:
            raise _failed(who, exc, (a, b, c)[at]) from exc
        problem = check(answer)
        if problem is not None:
            raise _failed(who, problem, (a, b, c)[at])
        return answer
    return guarded


def _by_priority_class(fn, who):
    """A guarded ``job_valid`` whose answer depends on the job's priority class alone (its promise): asked once
    per class, the answer kept for the session."""
    answers: dict = {}

    def guarded(job):
        try:
            return answers[job.priority_class]
        except KeyError:
            pass
        try:
            answer = fn(job)
        except Exception as exc:
            raise _failed(who, exc, job) from exc
        if answer is not None and answer.__class__ is not str and answer.__class__ is not Reason:
            raise _failed(who, _reason(answer), job)
        answers[job.priority_class] = answer
        return answer
    return guarded


def _spec(point: str) -> tuple:
    """What guarding a callable at ``point`` needs, read once per point (not at every registration): its scope,
    the position of its subject, its check (or what makes a fresh one, for a stateful check), whether the
    check is stateful, its number of arguments (from its protocol), the promises its callables may carry, and
    whether a finite float is a good answer (a stateful check says so itself, as its answers come)."""
    declared = POINTS[point]
    arity = len(inspect.signature(declared.protocol.__call__).parameters) - 1
    promises = tuple(promise for promise in _PROMISES if point in _PROMISES[promise])
    check = _CHECKS[point]
    spec = _SPECS[point] = (declared.scope, declared.subject, check, point in _STATEFUL, arity, promises,
                            getattr(check, "floats", None))
    return spec


#: Each point's :func:`_spec`, once asked.
_SPECS: dict[str, tuple] = {}


def guard(point: str, plugin: str, fn: Callable, failed: Callable[[PluginFailed], None]) -> Callable:
    """``fn`` as plugin ``plugin`` registered it at ``point``, raising :class:`PluginFailed` when it fails.

    A raise or an answer the point does not allow becomes
    :class:`PluginFailed` naming the plugin and the point. An event handler
    (scope ``event``) hands its failure to ``failed`` and returns: its
    decision is already made. One call more per use: the guarded points are
    asked once per job, queue or node candidate, never per queued job but by
    a plugin's own job order. Plugins register their callables at every
    session open, so making a guard is kept to a closure and one attribute
    (``guarded_as``: the callable, (plugin, point, scope) and the check);
    what :func:`inline` gives is made from it when asked.
    """
    scope, at, check, stateful, arity, promises, floats = _SPECS.get(point) or _spec(point)
    if stateful:
        check = check()
        floats = check.floats  # non-empty once this policy's keys are floats
    if scope == "event":
        def guarded(*args):
            try:
                fn(*args)
            except Exception as exc:
                failed(PluginFailed(plugin, point, exc, args[at], scope))
        return guarded
    who = (plugin, point, scope)
    if promises and point == "job_valid" and getattr(fn, "by_priority_class", False):
        guarded = _by_priority_class(fn, who)
    elif arity == 1 and check is _reason:
        def guarded(a):
            try:
                answer = fn(a)
            except Exception as exc:
                raise _failed(who, exc, a) from exc
            if answer is None or answer.__class__ is str or answer.__class__ is Reason:
                return answer
            raise _failed(who, _reason(answer), a)
    elif arity == 1:
        accepted = None  # the last tuple answer that passed: a plugin answering one constant is checked once

        def guarded(a):
            nonlocal accepted
            try:
                answer = fn(a)
            except Exception as exc:
                raise _failed(who, exc, a) from exc
            if answer is accepted or floats and answer.__class__ is float and answer - answer == 0:
                return answer  # the usual queue key or node tiers, checked inline
            problem = check(answer)
            if problem is not None:
                raise _failed(who, problem, a)
            if answer.__class__ is tuple:
                accepted = answer
            return answer
    elif arity == 2 and check is _reason:
        def guarded(a, b):
            try:
                answer = fn(a, b)
            except Exception as exc:
                raise _failed(who, exc, (a, b)[at]) from exc
            if answer is None or answer.__class__ is str or answer.__class__ is Reason:
                return answer
            raise _failed(who, _reason(answer), (a, b)[at])
    elif arity == 2:
        def guarded(a, b):
            try:
                answer = fn(a, b)
            except Exception as exc:
                raise _failed(who, exc, (a, b)[at]) from exc
            if floats and answer.__class__ is float and answer - answer == 0:
                return answer  # the usual queue key or node score, checked inline
            problem = check(answer)
            if problem is not None:
                raise _failed(who, problem, (a, b)[at])
            return answer
    else:
        guarded = _guard3(fn, who, at, check)
    for promise in promises:
        if getattr(fn, promise, False):
            setattr(guarded, promise, True)
    guarded.guarded_as = (fn, who, check)
    return guarded


class Inline(NamedTuple):
    """A guarded callable taken apart, for the one or two call sites asked per job where the guard's own call
    would be most of the cost (:func:`inline`): the plugin's callable, what its failure becomes, and the check
    of its answers (the guard's own, so a stateful check sees every answer, inline or guarded).

    A call site calls ``fn``; an exception becomes ``failed(exc, subject)``, raised; an answer it has not
    accepted before goes through ``check`` (None: good; else the problem, raised as ``failed(problem,
    subject)``). ``failed`` is None for the core's own callables: they are not guarded, their exceptions
    propagate.
    """

    fn: Callable
    failed: Callable[[BaseException | str, object], PluginFailed] | None
    check: Callable[[object], str | None] | None


def inline(fn: Callable) -> Inline:
    """``fn`` (guarded by :func:`guard` or the core's own) as an :class:`Inline`, made when asked (a call site
    keeps it for the session)."""
    parts = getattr(fn, "guarded_as", None)
    if parts is None:
        return _inline(fn, None, None)
    raw, who, check = parts
    return _inline(raw, functools.partial(_failed, who), check)


def _inline(fn, failed, check) -> Inline:
    """An :class:`Inline`, made by the tuple's own constructor (a named tuple's ``__new__`` is a Python call)."""
    return _tuple_new(Inline, (fn, failed, check))


_tuple_new = tuple.__new__
