"""Why a job waits, as data: a code, the rule that refused, the values its words quote, and nodes counted per cause.

After kube-scheduler's ``framework.Status``: the core and the actions make
:class:`Reason` values, and text is made only at the edges (the API, the CLI,
pod conditions, the dashboard), by ``str(reason)``. What reads a reason to
decide something (the metrics' categories, the dashboard's, whether a pod's
condition changed) reads its fields, never its words, so a wording may change
without moving any job from one category to another.

A reason has:

* ``code``: one of :data:`CODES`, the category ``/metrics`` counts it under;
* ``cause``: the rule that refused, one of :data:`WORDINGS`' keys (``insufficient``,
  ``taint``, ``queue_limit``, ...; ``text`` for words a plugin outside this package wrote);
* ``detail``: the values the words quote (a resource, a taint's key and value, a queue's name...);
* ``counts``: for a node reason (cause ``nodes``), each node cause (a reason of one node)
  with how many nodes it refused, largest first, ties in :data:`NODE_CAUSES` order; its
  code is its first cause's, so the category is the most common cause's whatever the words.

Making one costs about what formatting its text did (a slotted object, no
validation); the text is made once, when first asked, and kept while the
wordings stay as they are (setting one in :data:`WORDINGS` forgets every text
made before). A reason is a
value: equal fields are equal reasons (and read the same), and it is never
changed once made. A plugin may answer a reason (``flotilla.plugin.Reason``)
or a string; a string counts as ``other`` (:func:`reason_of`).
"""

from __future__ import annotations

from typing import Callable, Iterable, Mapping, Union

#: Every code, in the order the dashboard lists them (``flotilla_queue_queued_jobs_by_reason``'s ``reason`` label).
CODES = (
    "insufficient_resources",  # nodes match but none has room now, or none is ever large enough
    "node_selector",           # the nodeSelector or required node affinity matches no node
    "taint",                   # the nodes that match have taints the job does not tolerate
    "unschedulable",           # the nodes that match are cordoned in Kubernetes (spec.unschedulable)
    "host_ports",              # the nodes with room hold a host port the job binds
    "pod_affinity",            # inter-pod affinity or anti-affinity (the job's, or running pods') refuses the nodes
    "topology_spread",         # the job's topology spread constraints refuse the nodes
    "volumes",                 # the job's persistent volume claims refuse the nodes
    "no_nodes",                # there are no nodes at all
    "queue_limit",             # the queue (or a parent) is at one of its resource limits
    "queue_cordoned",          # the queue is cordoned: it schedules nothing new
    "gang",                    # the job's gang is incomplete or does not fit as a whole
    "priority_class",          # the job names a priority class the config does not have
    "reserved_nodes",          # the job waits for nodes reserved for it to drain
    "plugin",                  # a plugin failed (raised, or answered what its point does not allow)
    "not_reached",             # the cycle stopped before this job (lookahead, or it was not examined)
    "not_counted",             # past the per-cycle count of reasons
    "other",                   # any other reason (a third-party plugin's words, a node filter's refusal)
)
OTHER = "other"


class Reason:
    """Why a job waits (module docstring): ``code``, ``cause``, ``detail`` and ``counts``; ``str()`` words it."""

    __slots__ = ("code", "cause", "detail", "counts", "_text", "_worded")

    def __init__(self, code: str, cause: str, detail: tuple = (), counts: tuple = ()):
        self.code = code
        self.cause = cause
        self.detail = detail
        self.counts = counts
        self._worded = -1

    def __str__(self) -> str:
        if self._worded == _WORDED[0]:
            return self._text
        wording = WORDINGS[self.cause]
        text = self._text = wording.format(*self.detail) if wording.__class__ is str else wording(self)
        self._worded = _WORDED[0]
        return text

    message = __str__

    def _key(self) -> tuple:
        return self.code, self.cause, self.detail, self.counts

    def __eq__(self, other) -> bool:
        return other.__class__ is Reason and (self is other or self._key() == other._key())

    def __ne__(self, other) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash((self.cause, self.detail, self.counts))

    def __repr__(self) -> str:
        counts = f", counts={self.counts!r}" if self.counts else ""
        return f"Reason({self.code!r}, {self.cause!r}, {self.detail!r}{counts})"

    def __reduce__(self):
        return Reason, (self.code, self.cause, self.detail, self.counts)


#: What a reason may be where one is recorded: a :class:`Reason`, or words a plugin wrote (``other``).
Why = Union[Reason, str]


def code_of(reason: Why | None) -> str:
    """The code of ``reason``: its own, or ``other`` for words a plugin wrote."""
    return reason.code if reason.__class__ is Reason else OTHER


def reason_of(reason: Why) -> Reason:
    """``reason`` as a :class:`Reason` (words a plugin wrote become cause ``text``, code ``other``)."""
    return reason if reason.__class__ is Reason else Reason(OTHER, "text", (str(reason),))


# -- the rules' reasons ------------------------------------------------------------------------
#: How many times a wording was set: a text made under another count is made again.
_WORDED = [0]


class _Wordings(dict):
    """Cause -> its wording; setting one (``WORDINGS[cause] = ...``) forgets every text made so far."""

    def __setitem__(self, cause: str, wording) -> None:
        super().__setitem__(cause, wording)
        _WORDED[0] += 1


#: The code of each cause.
CAUSES: dict[str, str] = {}
#: The wording of each cause: a format string over ``detail``, or a function of the reason.
WORDINGS: dict[str, Union[str, Callable[[Reason], str]]] = _Wordings()


def _cause(name: str, code: str, wording) -> str:
    CAUSES[name] = code
    WORDINGS[name] = wording
    return name


def make(cause: str, *detail) -> Reason:
    """The reason of ``cause`` (a key of :data:`CAUSES`) quoting ``detail``."""
    return Reason(CAUSES[cause], cause, detail)


# Node causes, in the order ties between equal counts list them (the order of kube-scheduler's words), each a
# reason of one node: ``Insufficient cpu``, ``node(s) had untolerated taint {gpu: yes}``.
NODE_CAUSES = (
    _cause("insufficient", "insufficient_resources", "Insufficient {0}"),
    _cause("too_many_pods", "insufficient_resources", "Too many pods"),
    _cause("volume_bind_conflict", "volumes", "node(s) didn't find available persistent volumes to bind"),
    _cause("host_ports", "host_ports", "node(s) didn't have free ports for the requested pod ports"),
    _cause("node_selector", "node_selector", "node(s) didn't match Pod's node affinity/selector"),
    _cause("pod_affinity", "pod_affinity", "node(s) didn't match pod affinity rules"),
    _cause("pod_anti_affinity", "pod_affinity", "node(s) didn't match pod anti-affinity rules"),
    _cause("spread", "topology_spread", "node(s) didn't match pod topology spread constraints"),
    _cause("spread_missing_label", "topology_spread",
           "node(s) didn't match pod topology spread constraints (missing required label)"),
    _cause("existing_anti_affinity", "pod_affinity", "node(s) didn't satisfy existing pods anti-affinity rules"),
    _cause("volume_zone_conflict", "volumes", "node(s) had no available volume zone"),
    _cause("taint", "taint", "node(s) had untolerated taint {{{0}: {1}}}"),
    _cause("volume_node_conflict", "volumes", "node(s) had volume node affinity conflict"),
    _cause("volume_pv_missing", "volumes",
           "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"),
    _cause("node_filter", OTHER, "node(s) were refused by a node filter"),
    _cause("unschedulable", "unschedulable", "node(s) were unschedulable"),
    _cause("text", OTHER, "{0}"),
)
_RANK = {cause: rank for rank, cause in enumerate(NODE_CAUSES)}


def cause_order(cause: Why) -> tuple:
    """Where a node cause sorts among others: :data:`NODE_CAUSES` order, then the values it quotes (a
    resource, a taint); a plugin's words last, by their text."""
    if cause.__class__ is Reason:
        return _RANK.get(cause.cause, len(_RANK)), cause.detail
    return len(_RANK), (cause,)


def _tie_key(item: tuple) -> tuple:
    """Largest count first, equal counts in :func:`cause_order`."""
    return -item[1], cause_order(item[0])


def _word_nodes(reason: Reason) -> str:
    """``<available>/<total> nodes are available: <count> <cause>, ...``, largest count first, ties by words."""
    available = reason.detail[0]
    total = available + sum(count for _, count in reason.counts)
    listed = sorted(((count, str(cause)) for cause, count in reason.counts), key=lambda kv: (-kv[0], kv[1]))
    detail = ", ".join(f"{count} {cause}" for count, cause in listed) or "room taken by other jobs this cycle"
    return f"{available}/{total} nodes are available: {detail}"


_cause("nodes", "insufficient_resources", _word_nodes)


def nodes_available(available: int, causes: Mapping[Why, int] | Iterable[tuple[Why, int]]) -> Reason:
    """Nodes counted per cause (``{cause: nodes}``), ``available`` of them with room: the reason's code is its
    most common cause's (ties in :data:`NODE_CAUSES` order); with no cause, ``insufficient_resources``."""
    items = causes.items() if causes.__class__ is dict or isinstance(causes, Mapping) else causes  # dict: no ABC check
    counts = tuple((cause, count) for cause, count in items if count)
    if len(counts) > 1:
        counts = tuple(sorted(counts, key=_tie_key))
    code = code_of(counts[0][0]) if counts else "insufficient_resources"
    return Reason(code, "nodes", (available,), counts)


def insufficient(resource: str) -> Reason:
    """kube-scheduler's reason for a node short of ``resource``: ``Insufficient cpu``, ``Too many pods``."""
    found = _INSUFFICIENT.get(resource)
    if found is None:
        found = TOO_MANY_PODS if resource == "pods" else make("insufficient", resource)
        if len(_INSUFFICIENT) < 256:
            _INSUFFICIENT[resource] = found
    return found


#: Each resource's ``insufficient`` reason, made once (a reason is never changed once made).
_INSUFFICIENT: dict[str, Reason] = {}


def untolerated_taint(key: str, value: str) -> Reason:
    return make("taint", key, value)


TOO_MANY_PODS = make("too_many_pods")


def _word_on_node(reason: Reason) -> str:
    node, causes = reason.detail
    return f"node {node}: " + (", ".join(map(str, causes)) or "no room")


_cause("on_node", OTHER, _word_on_node)


def on_node(node: str, causes: Iterable[Why]) -> Reason:
    """A refusal on one node (``node n1: Insufficient cpu``): the code of its first cause."""
    causes = tuple(causes)
    return Reason(code_of(causes[0]) if causes else "insufficient_resources", "on_node", (node, causes))


# Reasons about the job or its queue.
_cause("no_nodes", "no_nodes", "no nodes")
NO_NODES = make("no_nodes")
_cause("not_in_place", "other", "node {0} is not in the place the job may use")
_cause("queue_limit", "queue_limit", "queue {0} at its {1} limit {2:g}")
_cause("queue_cordoned", "queue_cordoned", "queue {0} is cordoned: it schedules nothing new")
_cause("unknown_queue", OTHER, "unknown queue {0!r}")
_cause("lookahead", "not_reached", "lookahead {0} reached in queue {1}")
_cause("not_reached", "not_reached", "not reached this cycle")
_cause("not_examined", "not_reached", "not examined in the last cycle")
_cause("not_counted", "not_counted", "not counted (past the per-cycle limit)")
_cause("unknown_priority_class", "priority_class", "unknown priority class {0}")
_cause("reserved_nodes", "reserved_nodes", "waiting for {0} reserved node{1} ({2})")
_cause("plugin_failed", "plugin", "plugin {0} failed at {1}: {2}")
_cause("already_placed", OTHER, "{0} is already placed")
_cause("fits_no_node", "insufficient_resources", "fits no node: {0}")
# A gang's reasons: the code is the gang's; what follows its id is worded by the rule.
_cause("gang_queued", "gang", "gang {0}: {1} of {2} members queued")
_cause("gang_fit", "gang", "gang {0}: {1} of {2} members fit")
_cause("gang_minimum", "gang", "gang {0}: waiting for its minimum of {1} to start")
_cause("gang_together", "gang", "gang {0}: its members are placed together")
_cause("gang_partial", "gang", "gang {0}: its members are placed together ({1} to place, {2} given)")
_cause("gang_member", "gang", "gang {0}: {1}: {2}")
_cause("gang_not_one", "gang", "the jobs given are not one gang's members")
_cause("gang_not_cleared", "gang", "{0} is not a member of the gang cleared last")
_cause("gang_no_label", "gang", "gang {0} of {1} does not fit in any single {2} domain: no node has label {2}")
_cause("gang_domains", "gang", "gang {0} of {1} does not fit in any single {2} domain: 0/{3} domains fit: {4}")


__all__ = ["CAUSES", "CODES", "NODE_CAUSES", "NO_NODES", "OTHER", "Reason", "TOO_MANY_PODS", "WORDINGS", "Why", "cause_order", "code_of",
           "insufficient", "make", "nodes_available", "on_node", "reason_of", "untolerated_taint"]
