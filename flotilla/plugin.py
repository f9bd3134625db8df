"""The public plugin API: everything a Flotilla plugin needs, in one import.

A plugin is a class whose constructor takes the ``args:`` mapping of its
entry in the config's ``plugins:`` list, with methods marked :data:`hookimpl`.
Its ``flotilla_session_open(session)`` registers plain callables on the
session (:class:`PluginSession`), which the actions call in their inner
loops. A package exposes the class through the ``flotilla.plugins``
entry-point group; one line of YAML switches it on. ``docs/plugins.md``
walks through writing, testing and installing one; ``docs/plugins-reference.md``
is the reference of every extension point (its signature, contract and
combine rule).

.. code-block:: python

    from flotilla.plugin import PluginSession, hookimpl, take_args

    class Nothing:
        def __init__(self, args):
            take_args(args)                     # no arguments: a typo in the config is an error

        @hookimpl
        def flotilla_session_open(self, session: PluginSession):
            session.add_job_valid(lambda job: None)

Stability promise
-----------------
Every name in ``__all__`` here, and the fixtures of :mod:`flotilla.testing`,
is **stable across minor versions**: a name keeps its meaning, a function its
parameters and result, a type the fields and methods written down here; a
minor version may add (new names, new session methods, new optional
parameters, new fields), never remove or change. Removing or changing one
waits for a major version and is announced in the release notes one minor
version ahead. The extension points a plugin registers on are part of this
promise, with the contracts ``docs/plugins-reference.md`` states, and so are
the placement primitive's stages and their order (``docs/actions.md``): a
minor version may add a rule within a stage, never let through what a stage
refuses.

**Everything else is internal** and may change in any release without
notice: every other module (``flotilla.core``, ``flotilla.actions``,
``flotilla.plugins``, ``flotilla.contrib``, ``flotilla.config``, ...), and
any attribute of the session or of these types that is not written down
here (``session.index``, ``session.state``, ``session.snapshot``, ...). A
plugin that reaches into them works today and may break on the next release.

What a plugin sees
------------------
* :class:`Job`: a job, queued or running (its requests as integers:
  millicores for cpu, base units otherwise).
* :data:`Queue`: a queue during one cycle: ``name``, ``weight``,
  ``fair_share`` (its weight over the active queues' weights), ``allocated``
  (a :data:`Vector` of what its running jobs and this cycle's placements
  hold), ``limits``, ``running`` (how many jobs it runs), ``parent``, and
  ``active`` (it has jobs queued or running).
* :class:`NodeType`: what a ``predicate`` sees; nodes that predicates cannot
  tell apart (one cluster, the same indexed labels, taints and
  schedulability) share one.
* **A node is an int.** ``node_score``, ``node_filter``, ``on_allocate`` and
  ``on_evict`` receive a node as its position in the session's node list:
  an index valid for the session it was given by (not across cycles, where
  nodes come and go). Read it with :func:`node_at` (the :class:`Node`: name,
  cluster, labels, taints, resources), :func:`node_free` and
  :func:`node_allocatable` (resource vectors). Positions are ints so that a
  node search over ten thousand nodes compares ints, not objects.
* :data:`Vector`: resources as a tuple of ints in the session's order,
  ``session.space.names``; ``session.vector(job)`` gives a job's. When
  nodes declare ``pods``, the last entry (``session.space.slot``) counts
  pod slots: 1 in a job's vector; it is no resource to weigh or share
  (:func:`weight_vector` gives it 0).
* The callable each extension point takes, as a typed ``Protocol``
  (:class:`QueueOrder`, :class:`QueueAdmit`, :class:`NodeScore`, ...), to
  annotate yours with; each is declared once, in the core, with its
  contract, and ``docs/plugins-reference.md`` is generated from them.

What an action sees
-------------------
An action (:class:`Action`: ``name`` and ``execute(session)``) is a step of
the cycle; ``docs/actions.md`` walks from nothing to an installed one. It
sees an :class:`ActionSession`: what a plugin sees, plus the placement
primitive, the only way to start a job (:meth:`ActionSession.place`, and
:meth:`ActionSession.statement` for a gang's members together). The core
checks every rule there, whoever asks, and answers a refusal as one type,
:class:`Refused` (``stage``, one of :data:`STAGES`, and ``reason``).
:func:`queued_jobs`, :func:`node_positions`, :func:`find_node` and
:func:`wait_reason` read queues and nodes and record why a job waits.

Helpers
-------
* :func:`take_args`: check a plugin's ``args`` against its defaults, so an
  unknown key is a config error that names the plugin, not a silent no-op.
* :func:`parse_weights`, :func:`weight_vector`, :func:`asset_share`: Armada's
  asset cost (``cpu + w_gpu * gpu + w_memory * memory``) and a queue's share
  of the pool by it, as the built-in ``assetfairness`` measures it.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterator, Mapping, Protocol, Sequence

from flotilla.core.cyclestate import QueueState, RunningJob
from flotilla.core.extensions import (GangReady, JobOrder, JobValid, NodeFilter, NodeScore, NodeTiers, OnAllocate, OnEvict,
                                      Preemptable, PreemptQueueOrder, Predicate, QueueAdmit, QueueOrder, Reclaimable,
                                      ReclaimOrder, VictimOrder)
from flotilla.core.hookspecs import hookimpl
from flotilla.core.model import Gang, Job, Node, PriorityClass, Taint, Toleration
from flotilla.core.nodeindex import EVICTED, NodeType
from flotilla.core.placement import STAGES, Refused
from flotilla.core.reasons import CODES, Reason
from flotilla.core import shares
from flotilla.core.resources import ResourceSpace, Vector

#: A queue during one cycle, as plugins see it (see the module docstring for its fields).
Queue = QueueState

#: The asset-cost weights of Armada's default: cpu and gpus count, memory does not.
DEFAULT_WEIGHTS: Mapping[str, float] = shares.DEFAULT_SHARE_WEIGHTS


class PluginSession(Protocol):
    """The session as a plugin sees it in ``flotilla_session_open``: what it may read and call.

    Read what you need once, at open; register callables that look up what
    they precomputed. The session must not be changed from a plugin: it is
    the actions' to change, through statements.
    """

    @property
    def now(self) -> float:
        """The snapshot's time, in seconds (simulated time in ``simulate``, the wall clock in ``serve``)."""

    @property
    def space(self) -> ResourceSpace:
        """The resource names in vector order (``space.names``, ``space.position[name]``)."""

    @property
    def pool(self) -> Vector:
        """The allocatable resources of every node of every cluster, summed."""

    @property
    def queues(self) -> Mapping[str, Queue]:
        """Every queue by name; leaves and, in a queue tree, their parents."""

    @property
    def running(self) -> Mapping[str, RunningJob]:
        """The running jobs by id: ``.job`` (:class:`Job`), ``.node`` (a node position), ``.vec``."""

    @property
    def gangs(self) -> Mapping[str, Sequence[Job]]:
        """Each gang's members (queued and running), by gang id."""

    def vector(self, job: Job) -> Vector:
        """``job``'s requests as a :data:`Vector`."""

    def priority_class(self, job: Job) -> PriorityClass:
        """``job``'s priority class (the config's default when it names none)."""

    def wake_at(self, when: float) -> None:
        """Ask for a cycle at ``when`` (the snapshot's clock, seconds) for a rule of yours that changes with time
        alone; ``simulate`` stops its clock there instead of jumping past it."""

    # -- registration: one method per extension point (docs/plugins-reference.md) --
    def add_queue_order(self, fn: QueueOrder) -> None: ...

    def add_preempt_queue_order(self, fn: PreemptQueueOrder) -> None: ...

    def add_job_order(self, fn: JobOrder) -> None: ...

    def add_predicate(self, fn: Predicate) -> None: ...

    def add_queue_admit(self, fn: QueueAdmit) -> None: ...

    def set_node_tiers(self, fn: NodeTiers) -> None: ...

    def add_node_score(self, fn: NodeScore, across_tiers: bool = False) -> None: ...

    def add_node_filter(self, fn: NodeFilter) -> None: ...

    def add_gang_ready(self, fn: GangReady) -> None: ...

    def add_preemptable(self, fn: Preemptable) -> None: ...

    def add_victim_order(self, fn: VictimOrder) -> None: ...

    def add_reclaimable(self, fn: Reclaimable) -> None: ...

    def add_reclaim_order(self, fn: ReclaimOrder) -> None: ...

    def add_job_valid(self, fn: JobValid) -> None: ...

    def add_event_handler(self, on_allocate: OnAllocate | None = None, on_evict: OnEvict | None = None) -> None: ...


# -- actions -----------------------------------------------------------------

class PlacementGroup(Protocol):
    """Placements that stand or fall together (a gang's members): ``session.statement()``.

    Each :meth:`allocate` takes effect in the session at once (the next
    member sees the room the previous one took); :meth:`commit` records
    them all as decisions, :meth:`discard` undoes them all. Exactly one of
    the two ends a group.
    """

    def allocate(self, job: Job, node: int) -> Refused | None:
        """Place ``job`` on ``node`` in this group, through :meth:`ActionSession.place`; None when placed."""

    def commit(self) -> None: ...

    def discard(self) -> None: ...


class ActionSession(PluginSession, Protocol):
    """The session as an action sees it in ``execute(session)``: what a plugin sees, and the placement primitive.

    The primitive is the only way to start a job: the core asks every rule,
    in one order, and refuses what any rule refuses, with a :class:`Refused`
    naming the step and the reason (``docs/actions.md`` lists them):

    ``gang`` (a gang's members go together), ``job`` (``job_valid``),
    ``queue`` (queue limits and ``queue_admit``), ``nodes`` (taints,
    node selector and affinity, predicates, a gang's place), ``node``
    (host ports, claims, pod rules, node filters) and ``fit`` (free room).

    Ask about a job once with :meth:`clear` (the node types it may use),
    pick a node, and :meth:`place` it; or :meth:`place` it straight away,
    which clears it first. A gang: :meth:`clear_gang`, then per member
    :meth:`clear_member` and ``statement().allocate``.
    """

    def clear(self, job: Job, place: str | None = None) -> list[int] | Refused:
        """Steps gang to nodes for one job, in its own queue: the node types it may use (in cluster ``place``), or
        :class:`Refused`."""

    def clear_gang(self, members: Sequence[Job], queue: Queue | None = None) -> Refused | None:
        """Steps gang to queue for a gang's members placed together, admitted as their sum by ``queue`` (one of
        their queues; default the first member's); None when cleared."""

    def clear_member(self, member: Job, place: str | None = None) -> list[int] | Refused:
        """Step nodes for a member of the gang cleared last: its node types (in cluster ``place``)."""

    def place(self, job: Job, node: int, stmt: PlacementGroup | None = None) -> Refused | None:
        """Place queued ``job`` on ``node`` (in ``stmt``, or committed at once) if every rule allows it;
        None when placed, else :class:`Refused`."""

    def statement(self) -> PlacementGroup:
        """A new :class:`PlacementGroup`."""


class Action(Protocol):
    """A step of the cycle, named in the config's ``actions:`` list (``docs/actions.md``).

    A package exposes the class through the ``flotilla.actions`` entry-point
    group under a name no built-in action has. Its constructor takes the
    ``args`` mapping of its config entry (check it with :func:`take_args`;
    a class whose constructor takes nothing is given no ``args``). One object
    lives as long as the scheduler: ``execute`` is called once per cycle,
    after the actions before it in the list, with the cycle's session.
    """

    name: str

    def execute(self, session: ActionSession) -> None: ...


def queued_jobs(session: ActionSession, queue: Queue) -> Iterator[Job]:
    """``queue``'s queued jobs in job order (the plugins' job order, priority, submission), less those placed or
    set aside this cycle; read lazily, so stopping early costs only what was read."""
    order = session.queued_in_order(queue)  # type: ignore[attr-defined]
    placed, aside = session.scheduled_ids, session.set_aside  # type: ignore[attr-defined]
    position = 0
    while (entry := order.at(position)) is not None:
        position += 1
        job = entry[-1]
        if job.id not in placed and job.id not in aside:
            yield job


def node_positions(session: ActionSession) -> range:
    """Every node of the session, as the positions the rest of the API takes."""
    return range(len(session.index.nodes))  # type: ignore[attr-defined]


def find_node(session: ActionSession, job: Job, types: Sequence[int], queue: Queue) -> int | None:
    """The node the core's own search picks for ``job`` among ``types`` (what :meth:`ActionSession.clear` gave):
    the node-tier plugin's tiers, node scores, then the least free room that fits; None if none fits now."""
    return session.find_node(job, session.vector(job), EVICTED, types, queue)  # type: ignore[attr-defined]


def wait_reason(session: ActionSession, job: Job, reason: Reason | str) -> None:
    """Record why ``job`` waits: the reason ``schedule-once``, the API and the dashboard show for it, unless a
    later action places it or records another. A :class:`Reason` keeps its code (a refusal's ``why``, say);
    words count as ``other``."""
    session.failures[job.id] = reason if reason.__class__ is Reason else str(reason)  # type: ignore[attr-defined]


# -- nodes -------------------------------------------------------------------

def node_at(session: PluginSession, node: int) -> Node:
    """The :class:`Node` at position ``node`` of this session: name, cluster, labels, taints, resources."""
    return session.index.nodes[node]  # type: ignore[attr-defined]


def node_allocatable(session: PluginSession, node: int) -> Vector:
    """What node ``node`` can hold in all, as a :data:`Vector`."""
    return session.index.allocatable[node]  # type: ignore[attr-defined]


def node_free(session: PluginSession, node: int) -> Vector:
    """What is free on node ``node`` now, as a :data:`Vector`: this cycle's placements taken, evictions given back."""
    index = session.index  # type: ignore[attr-defined]
    return index.free[node][index.level_of[EVICTED]]


# -- arguments ---------------------------------------------------------------

def take_args(args: Mapping[str, Any] | None, **defaults: Any) -> dict[str, Any]:
    """``defaults`` overridden by ``args``; any key not in ``defaults`` is a ``ValueError``.

    The loader turns a ``ValueError`` (or ``TypeError``) from a plugin's
    constructor into a config error at the plugin's place in the file:
    ``plugins[5].args: plugin 'jobcap': unknown argument(s) maxRuning; expected maxRunning, perQueue``.
    """
    args = dict(args or {})
    unknown = sorted(set(args) - set(defaults))
    if unknown:
        expected = ", ".join(sorted(defaults)) or "no arguments"
        raise ValueError(f"unknown argument(s) {', '.join(unknown)}; expected {expected}")
    return {**defaults, **args}


# -- asset share -------------------------------------------------------------

def parse_weights(args: Mapping[str, Any] | None, key: str = "resourceWeights") -> dict[str, float]:
    """The ``key`` argument (default :data:`DEFAULT_WEIGHTS`) as resource name -> non-negative weight.

    ``args`` holds only ``key``: any other key is a ``ValueError``, as is a
    weight that is not a finite, non-negative number (NaN compares false with everything, so ``weight < 0``
    alone lets it through). Resources not listed weigh 0.
    """
    weights = take_args(args, **{key: DEFAULT_WEIGHTS})[key]
    if not isinstance(weights, Mapping):
        raise ValueError(f"{key} must map resource names to numbers")
    out = {}
    for name, weight in weights.items():
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0 <= weight < math.inf:
            raise ValueError(f"{key}.{name} must be a finite, non-negative number, got {weight!r}")
        out[str(name)] = float(weight)
    return out


def weight_vector(session: PluginSession, weights: Mapping[str, float]) -> tuple[float, ...]:
    """Per-unit weights aligned with the session's resource order (cpu per millicore)."""
    return shares.weight_vector(session.space.names, weights)


def asset_share(session: PluginSession, weights: Mapping[str, float]) -> Callable[[Queue, Vector | None], float]:
    """``share(queue, extra)``: the queue's asset cost (plus ``extra``'s, when given) over the pool's.

    The cost of a resource vector is ``sum(weight * amount)``; a queue's is
    that of its ``allocated``. It is the measure the core reports shares by
    (with the config's weights), so a policy built on it orders queues by
    the figure users see. Build it once per session (at open): the pool's
    cost is computed here, and ``share`` is a short loop over the resources,
    cheap enough for allocate's inner loop.
    """
    return shares.cost_share(session.space.names, session.pool, weights)


__all__ = [
    # the hook marker and what a plugin sees
    "hookimpl", "PluginSession", "Gang", "Job", "Node", "NodeType", "PriorityClass", "Queue", "ResourceSpace",
    "RunningJob", "Taint", "Toleration", "Vector", "node_allocatable", "node_at", "node_free",
    # the extension points' callable types (flotilla.core.extensions declares them; the reference documents them)
    "GangReady", "JobOrder", "JobValid", "NodeFilter", "NodeScore", "NodeTiers", "OnAllocate", "OnEvict",
    "PreemptQueueOrder", "Preemptable", "Predicate", "QueueAdmit", "QueueOrder", "Reclaimable", "ReclaimOrder",
    "VictimOrder",
    # helpers
    "DEFAULT_WEIGHTS", "asset_share", "parse_weights", "take_args", "weight_vector",
    # why a job waits, as data (a point that answers a reason may answer one; words count as ``other``)
    "CODES", "Reason",
    # actions: the protocol, the session they see, the placement primitive's refusal, helpers
    "Action", "ActionSession", "PlacementGroup", "Refused", "STAGES", "find_node", "node_positions", "queued_jobs",
    "wait_reason",
]
