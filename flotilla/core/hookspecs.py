"""The contract between actions and plugins.

Two kinds of extension live here:

* **pluggy hooks** (``flotilla_*``), called a handful of times per cycle.
  The main one is :func:`flotilla_session_open`, where a plugin registers its
  callables on the session, as Volcano plugins do in ``OnSessionOpen``.
* **extension points**: the typed callables registered there. Actions call
  them through the session in their inner loops, where a pluggy call (a few
  microseconds each) would cost too much. :data:`EXTENSION_POINTS` lists each
  one with the session method that registers it and the one rule by which
  several plugins' answers combine.

Plugin authors: a plugin is a class taking its ``args`` mapping (from the
YAML config) in ``__init__``, with methods marked :data:`hookimpl`. Built-in
plugins are registered exactly like third-party ones; a package exposes a
plugin through the ``flotilla.plugins`` entry-point group.
"""

from __future__ import annotations

from dataclasses import dataclass

import pluggy

PROJECT = "flotilla"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def flotilla_session_open(session):
    """A session is opening on a snapshot: register this plugin's callables.

    Called once per cycle, in plugin order, before any action runs. Use the
    ``session.add_*`` methods listed in :data:`EXTENSION_POINTS`. The session
    is fully built (queues, nodes, running jobs); reading it is cheap. Do not
    change it here.
    """


@hookspec
def flotilla_session_close(session, decisions):
    """The session has closed; ``decisions`` is what it decided.

    Called once per cycle after the last action, in plugin order. Plugins
    that keep figures across cycles (decayed usage, say) update them here.
    The return value is ignored.
    """


@hookspec(firstresult=True)
def flotilla_cluster_backend(cluster_config, config, options):
    """Return a cluster backend for ``cluster_config``, or ``None`` if its ``kind`` is not yours.

    ``cluster_config`` is one entry of the config's ``clusters`` list,
    ``config`` the whole config, ``options`` what the caller's run needs of
    every backend (a mapping; ``clock``: a function giving the time the
    backend should act on, ``duration_of``: a job's run time on a
    simulated cluster, or None); take what applies, ignore the rest.

    ``firstresult``: the first plugin that answers wins. Plugins of the
    config's ``plugins`` list are asked first, in config order, then the
    built-in backends (``simulated``, ``kubernetes``), so a package can
    replace a built-in kind, or serve a kind of its own, without touching
    the scheduler. Called once per cluster when a run starts
    (:func:`flotilla.core.backend.make_backends`), not per cycle.
    """


@dataclass(frozen=True)
class ExtensionPoint:
    """One extension point: how to register it, its contract, and how answers combine."""

    name: str
    register: str
    signature: str
    combine: str
    contract: str


EXTENSION_POINTS: tuple[ExtensionPoint, ...] = (
    ExtensionPoint(
        "queue_order", "add_queue_order", "(queue: QueueState, extra: Vector | None) -> float | tuple[float, ...]",
        "exactly one plugin provides it (the fairness policy); none or two is a configuration error",
        "A sortable key for the queue if it also had `extra` (a resource vector, or None for as it is). "
        "Allocate serves next the queue whose key would be smallest; ties go to the queue name that sorts "
        "first. Keys of one policy must compare with each other: all floats, or all tuples of floats (a "
        "strict-priority policy says `(tier, share / fair_share)`). A queue with no fair share "
        "(`queue.fair_share == 0`) never offers work. A function whose answer moves with its own queue's "
        "allocation only may say so with the attribute `own_usage_only = True`: allocate then computes a "
        "waiting offer's key once, not again at each pick. The key is not reported: the share "
        "`schedule-once`, the service and `simulate` show is measured by the core (flotilla.core.shares).",
    ),
    ExtensionPoint(
        "preempt_queue_order", "add_preempt_queue_order", "(queue: QueueState) -> float | tuple[float, ...]",
        "optional; at most one plugin provides it, two is a configuration error; default the queue's "
        "measured share over its fair share",
        "Among urgent jobs of equal priority, whose queue preempts first: the smallest key first. A policy "
        "that only orders queues (queue_order) need not provide it.",
    ),
    ExtensionPoint(
        "job_order", "add_job_order", "(job: Job) -> tuple",
        "sort keys are concatenated in plugin order, so the first plugin that tells two jobs apart "
        "decides (first non-zero answer wins); ties fall back to priority, then submission time, then id",
        "A sort key for the job within its queue; smaller runs first. Evicted jobs always come first.",
    ),
    ExtensionPoint(
        "predicate", "add_predicate", "(job: Job, node_type: NodeType) -> str | None",
        "all must agree; the first refusal, with its reason, wins; the core's Kubernetes feasibility "
        "(flotilla.core.feasibility) is always asked first",
        "May this job go on nodes of this type? Return None for yes or a short reason for no. "
        "Called once per job requirements and node type, cached for the cycle: depend only on the "
        "job's queue, priority class, node selector and tolerations.",
    ),
    ExtensionPoint(
        "queue_admit", "add_queue_admit", "(queue: QueueState, job: Job, vec: Vector) -> str | None",
        "all must agree; the first refusal, with its reason, wins; the core's queue limits "
        "(flotilla.core.limits) are always asked first",
        "May this queue take this job now? None for yes, a reason for no. Queue limits are the core's; "
        "a plugin adds rules of its own (a cap on running jobs, say).",
    ),
    ExtensionPoint(
        "node_tiers", "set_node_tiers", "(queue: QueueState) -> Sequence[str]",
        "the last plugin to set it wins; default ('any',)",
        "The node sets to search in order, each from 'own', 'unused', 'used', 'any'; "
        "within a set the node with the least free space that fits is chosen.",
    ),
    ExtensionPoint(
        "node_score", "add_node_score", "(job: Job, node: int) -> float",
        "scores add up; the highest total wins; ties by least free space, then node position",
        "Optional. When any is registered, allocate scores up to `allocate.nodeCandidates` fitting "
        "nodes of the first tier that has any instead of taking the smallest.",
    ),
    ExtensionPoint(
        "node_filter", "add_node_filter", "(job: Job, node: int) -> bool",
        "all must agree; a node any filter refuses is skipped (searches then walk the fitting nodes)",
        "May this job start on this node? For per-node rules predicates cannot express (they see node "
        "types); the reserve action sets one per cycle so that reserved nodes take only preemptible jobs.",
    ),
    ExtensionPoint(
        "gang_ready", "add_gang_ready", "(gang: Gang, members: Sequence[Job]) -> str | None",
        "all must agree; the first refusal, with its reason, wins",
        "Is this gang complete enough to place? Placement itself is all or nothing on one cluster.",
    ),
    ExtensionPoint(
        "preemptable", "add_preemptable", "(preemptor: Job, victim: Job) -> bool",
        "all must agree (intersection): a victim is eligible only if every plugin says yes; "
        "with no plugin registered nothing may be preempted",
        "May running job `victim` be displaced to make room for `preemptor` (urgency preemption)?",
    ),
    ExtensionPoint(
        "victim_order", "add_victim_order", "(victim: Job) -> tuple",
        "sort keys are concatenated in plugin order; default lowest priority, then largest request, then id",
        "Which eligible victims on a node go first; the preempt action takes them in this order "
        "until the preemptor fits.",
    ),
    ExtensionPoint(
        "job_valid", "add_job_valid", "(job: Job) -> str | None",
        "the first refusal, with its reason, wins",
        "Is this job acceptable at all? A refused job stays queued with the reason. Called once per "
        "job the allocate action examines, not for every queued job. A check whose answer depends on the "
        "job's priority class alone may say so with the attribute `by_priority_class = True`: allocate then "
        "passes over a run of known misfits (same requirements, so the same class) without calling it per job.",
    ),
    ExtensionPoint(
        "on_allocate", "add_event_handler", "(job: Job, node: int) -> None",
        "all handlers are called, in plugin order, when a statement commits",
        "A job was placed (or an evicted job returned to its node).",
    ),
    ExtensionPoint(
        "on_evict", "add_event_handler", "(job: Job, node: int) -> None",
        "all handlers are called, in plugin order, when a statement commits",
        "A running job was evicted or preempted; it no longer counts for its queue.",
    ),
)
