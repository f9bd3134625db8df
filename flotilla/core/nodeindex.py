"""The node index: what each node can still take, at each priority, searchable.

Armada's node database idea, kept apart from fairness and from the queue
iterators:

* **Allocatable at priority.** A running job is bound at a *level*: its
  priority class's priority when it is preemptible, :data:`NONPREEMPTIBLE`
  when it is not, :data:`EVICTED` while the evict action has taken it off its
  node for this cycle. A node's free space at level ``L`` is its allocatable
  minus the requests of the jobs bound at ``L`` or above, i.e. what a job of
  priority ``L`` could have if everything below it made way. On a 32-core
  node with a 10-core ``armada-default`` job and a 20-core
  ``armada-preemptible`` job that is 22 cores at 30000 and 2 at 20000; at
  :data:`EVICTED` (the lowest level) it is the space that is really free.
* **Node types.** Nodes with the same cluster, indexed labels, taints and
  schedulability share a type, so predicates run once per type, not per node.
* **Buckets per queue.** Each node is *unused*, *owned* by the one queue
  whose jobs run on it, or *shared*. Per level and type, nodes are kept in
  sorted lists keyed by their free space (resource index order, then node
  position), so "the smallest node that fits" among a queue's own nodes, the
  unused ones or the used ones is a search with skips, not a scan.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Mapping, Sequence

from sortedcontainers import SortedList

from flotilla.core.model import Node, Taint
from flotilla.core.resources import ResourceSpace, Vector

#: Level of jobs evicted by the evict action during this cycle: they still
#: hold their space for new jobs' first attempt, but anything may displace them.
EVICTED = -(1 << 62)
#: Level of non-preemptible jobs: nothing may displace them.
NONPREEMPTIBLE = 1 << 62
#: Level of resources used by pods the scheduler does not manage.
FOREIGN = NONPREEMPTIBLE

UNUSED = None


class _Shared:
    __slots__ = ()

    def __repr__(self) -> str:
        return "SHARED"


#: Bucket of nodes used by more than one queue (or by foreign pods).
SHARED = _Shared()
#: The user key of foreign pods in a node's user counts.
FOREIGN_USER = "\x00foreign"

#: Tiers a node-tier plugin may ask for, searched in the order it gives.
TIERS = ("own", "unused", "used", "any")


@dataclass(slots=True, eq=False)
class NodeType:
    """Nodes that predicates cannot tell apart."""

    id: int
    cluster: str
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    unschedulable: bool
    nodes: list[int]


class NodeIndex:
    """Free space per node and level, and best-fit search over it.

    Node positions (ints) are the handles everyone else uses. The index is
    built once per session; :meth:`bind` and :meth:`unbind` keep it current
    and are exact inverses, which is what statements rely on to discard.
    """

    def __init__(self, space: ResourceSpace, nodes: Sequence[Node], levels: Sequence[int], indexed_labels: set[str]):
        self.space = space
        self.nodes = list(nodes)
        self.levels = sorted(set(levels) | {EVICTED})
        self.level_of = {level: k for k, level in enumerate(self.levels)}
        self.position = {(node.cluster, node.name): i for i, node in enumerate(self.nodes)}
        self.allocatable: list[Vector] = [space.vector(node.resources) for node in self.nodes]
        self.free: list[list[list[int]]] = [[list(alloc) for _ in self.levels] for alloc in self.allocatable]
        self.users: list[dict[str, int]] = [{} for _ in self.nodes]
        self.jobs: list[dict[str, tuple[str, Vector, int]]] = [{} for _ in self.nodes]
        self.types: list[NodeType] = []
        self.type_of: list[int] = []
        by_key: dict[tuple, NodeType] = {}
        for i, node in enumerate(self.nodes):
            labels = tuple(sorted((k, v) for k, v in node.labels.items() if k in indexed_labels))
            key = (node.cluster, labels, node.taints, node.unschedulable)
            node_type = by_key.get(key)
            if node_type is None:
                node_type = NodeType(len(self.types), node.cluster, dict(labels), node.taints, node.unschedulable, [])
                by_key[key] = node_type
                self.types.append(node_type)
            node_type.nodes.append(i)
            self.type_of.append(node_type.id)
        levels_n, types_n = len(self.levels), len(self.types)
        self._unused = [[SortedList() for _ in range(types_n)] for _ in range(levels_n)]
        self._used = [[SortedList() for _ in range(types_n)] for _ in range(levels_n)]
        self._own: list[list[dict[str, SortedList]]] = [[{} for _ in range(types_n)] for _ in range(levels_n)]
        self._keys: list[list[tuple] | None] = [None] * len(self.nodes)
        self._bucket: list[object] = [UNUSED] * len(self.nodes)
        self._built = False

    # -- building -------------------------------------------------------
    def preload(self, i: int, job_id: str, queue: str, vec: Vector, level: int) -> None:
        """Bind a job before :meth:`build`; cheap bulk loading of running jobs."""
        assert not self._built
        self._apply(i, job_id, queue, vec, level)

    def build(self) -> None:
        """Create the sorted lists in one pass after preloading."""
        pending_unused = [[[] for _ in self.types] for _ in self.levels]
        pending_used = [[[] for _ in self.types] for _ in self.levels]
        pending_own: list[list[dict[str, list]]] = [[{} for _ in self.types] for _ in self.levels]
        for i in range(len(self.nodes)):
            bucket = self._compute_bucket(i)
            self._bucket[i] = bucket
            t = self.type_of[i]
            keys = []
            for k in range(len(self.levels)):
                key = (*self.free[i][k], i)
                keys.append(key)
                if bucket is UNUSED:
                    pending_unused[k][t].append(key)
                else:
                    pending_used[k][t].append(key)
                    if bucket is not SHARED:
                        pending_own[k][t].setdefault(bucket, []).append(key)
            self._keys[i] = keys
        for k in range(len(self.levels)):
            for t in range(len(self.types)):
                self._unused[k][t] = SortedList(pending_unused[k][t])
                self._used[k][t] = SortedList(pending_used[k][t])
                self._own[k][t] = {q: SortedList(keys) for q, keys in pending_own[k][t].items()}
        self._built = True

    # -- changing -------------------------------------------------------
    def bind(self, i: int, job_id: str, queue: str, vec: Vector, level: int) -> None:
        """Put a job on node ``i`` at ``level``."""
        old_bucket = self._bucket[i]
        self._apply(i, job_id, queue, vec, level)
        self._reindex(i, old_bucket, level)

    def unbind(self, i: int, job_id: str) -> tuple[str, Vector, int]:
        """Take a job off node ``i``; returns ``(queue, vec, level)`` so the caller can undo."""
        old_bucket = self._bucket[i]
        queue, vec, level = self.jobs[i].pop(job_id)
        free = self.free[i]
        for k, lv in enumerate(self.levels):
            if lv <= level:
                row = free[k]
                for r, amount in enumerate(vec):
                    row[r] += amount
        if level != EVICTED:
            users = self.users[i]
            users[queue] -= 1
            if not users[queue]:
                del users[queue]
        self._reindex(i, old_bucket, level)
        return queue, vec, level

    def _apply(self, i: int, job_id: str, queue: str, vec: Vector, level: int) -> None:
        free = self.free[i]
        for k, lv in enumerate(self.levels):
            if lv <= level:
                row = free[k]
                for r, amount in enumerate(vec):
                    row[r] -= amount
        if level != EVICTED:
            users = self.users[i]
            users[queue] = users.get(queue, 0) + 1
        self.jobs[i][job_id] = (queue, vec, level)

    def _compute_bucket(self, i: int) -> object:
        users = self.users[i]
        if not users:
            return UNUSED
        if len(users) == 1:
            (queue,) = users
            return SHARED if queue == FOREIGN_USER else queue
        return SHARED

    def _lists(self, i: int, k: int, bucket: object) -> list[SortedList]:
        t = self.type_of[i]
        if bucket is UNUSED:
            return [self._unused[k][t]]
        if bucket is SHARED:
            return [self._used[k][t]]
        own = self._own[k][t].get(bucket)
        if own is None:
            own = self._own[k][t][bucket] = SortedList()
        return [self._used[k][t], own]

    def _reindex(self, i: int, old_bucket: object, level: int) -> None:
        """Move node ``i``'s keys after its free space or users changed.

        A job bound at ``level`` changes the free space of the levels at or
        below it only; when the node's bucket is unchanged, only those keys move.
        """
        new_bucket = self._compute_bucket(i)
        keys = self._keys[i]
        free = self.free[i]
        if new_bucket == old_bucket:
            for k, lv in enumerate(self.levels):
                if lv > level:
                    break
                for sorted_list in self._lists(i, k, old_bucket):
                    sorted_list.remove(keys[k])
                key = keys[k] = (*free[k], i)
                for sorted_list in self._lists(i, k, old_bucket):
                    sorted_list.add(key)
            return
        self._bucket[i] = new_bucket
        for k in range(len(self.levels)):
            for sorted_list in self._lists(i, k, old_bucket):
                sorted_list.remove(keys[k])
            key = keys[k] = (*free[k], i)
            for sorted_list in self._lists(i, k, new_bucket):
                sorted_list.add(key)

    def fingerprint(self) -> tuple:
        """The sorted lists' contents (empty ones left out), to compare two indexes."""
        def keys(sorted_list: SortedList) -> list[tuple]:
            return list(sorted_list)
        return ([[keys(sl) for sl in per_level] for per_level in self._unused],
                [[keys(sl) for sl in per_level] for per_level in self._used],
                [[{queue: keys(sl) for queue, sl in own.items() if sl} for own in per_level] for per_level in self._own])

    # -- asking ---------------------------------------------------------
    def fits_on(self, i: int, vec: Vector, level: int) -> bool:
        row = self.free[i][self.level_of[level]]
        for r, amount in enumerate(vec):
            if amount > row[r]:
                return False
        return True

    def bucket(self, i: int) -> object:
        return self._bucket[i]

    def _tier_lists(self, k: int, t: int, tier: str, queue: str) -> list[SortedList]:
        if tier == "own":
            own = self._own[k][t].get(queue)
            return [own] if own else []
        if tier == "unused":
            return [self._unused[k][t]]
        if tier == "used":
            return [self._used[k][t]]
        return [self._unused[k][t], self._used[k][t]]

    def find(self, vec: Vector, level: int, types: Sequence[int], tier: str, queue: str) -> int | None:
        """The node with the least free space at ``level`` on which ``vec`` fits, in one tier.

        ``tier`` is ``own`` (nodes only ``queue`` uses), ``unused``, ``used``
        (everything in use, own nodes included: they did not fit in the own
        tier, so they are passed over cheaply) or ``any``. Ties cannot
        happen: keys end with the node's position.
        """
        k = self.level_of[level]
        best: tuple | None = None
        for t in types:
            for sorted_list in self._tier_lists(k, t, tier, queue):
                key = _first_fit(sorted_list, vec, best)
                if key is not None:
                    best = key
        return None if best is None else best[-1]

    def iter_fitting(self, vec: Vector, level: int, types: Sequence[int]) -> Iterator[int]:
        """Every node of ``types`` on which ``vec`` fits at ``level``, smallest first per type."""
        k = self.level_of[level]
        for t in types:
            for sorted_list in (self._unused[k][t], self._used[k][t]):
                yield from _all_fits(sorted_list, vec)

    def shortfall(self, vec: Vector, level: int, types: Sequence[int]) -> tuple[int, int, list[int]]:
        """Nodes of ``types``: how many, on how many ``vec`` fits, and per resource on how many it is short.

        A scan, used only to explain a failure once per distinct request.
        """
        k = self.level_of[level]
        counts = [0] * len(vec)
        total = fitting = 0
        for t in types:
            for i in self.types[t].nodes:
                total += 1
                row = self.free[i][k]
                short = False
                for r, amount in enumerate(vec):
                    if amount > row[r]:
                        counts[r] += 1
                        short = True
                fitting += not short
        return total, fitting, counts


def _first_fit(sorted_list: SortedList, vec: Vector, bound: tuple | None) -> tuple | None:
    """Smallest key in ``sorted_list`` that fits ``vec`` and is below ``bound``.

    When a key fails on component ``j`` while the components before it fit,
    every key sharing that prefix with a smaller component ``j`` fails too,
    so the search jumps past them with one bisection.
    """
    if not sorted_list or not vec:
        return sorted_list[0] if sorted_list and (bound is None or sorted_list[0] < bound) else None
    size = len(sorted_list)
    pos = sorted_list.bisect_left((vec[0],))
    while pos < size:
        key = sorted_list[pos]
        if bound is not None and key >= bound:
            return None
        for j, amount in enumerate(vec):
            if key[j] < amount:
                pos = sorted_list.bisect_left((*key[:j], amount))
                break
        else:
            return key
    return None


def _all_fits(sorted_list: SortedList, vec: Vector) -> Iterator[int]:
    if not vec:
        for key in sorted_list:
            yield key[-1]
        return
    pos = sorted_list.bisect_left((vec[0],))
    while pos < len(sorted_list):
        key = sorted_list[pos]
        for j, amount in enumerate(vec):
            if key[j] < amount:
                pos = sorted_list.bisect_left((*key[:j], amount))
                break
        else:
            yield key[-1]
            pos += 1
