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
* **Tiers per queue.** Each node is *unused*, *owned* by the one queue
  whose jobs run on it, or *shared*. Per level and type, the unused nodes,
  the used ones and each queue's own ones are searchable by free space
  (resource index order, then node position), so "the smallest node that
  fits" among a queue's own nodes, the unused ones or the used ones is a
  search with skips, not a scan.
* **Buckets of equal free space.** Nodes of one type fill to a handful of
  distinct free vectors (32-core nodes and 1-core jobs: at most 33), so each
  of those searchable sets is a dict from free vector to the nodes that have
  it (positions, sorted) plus a plain sorted list of the distinct vectors.
  A placement moves the node from one bucket to another: list operations in
  C on short lists, instead of removing and re-adding a key in a sorted
  list of every node (``bench/nodeindex.py`` measures both, and the other
  layouts tried; the README has the figures).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from heapq import merge
from dataclasses import dataclass
from operator import add, sub
from typing import Iterator, Mapping, Sequence

from flotilla.core.model import Node, Taint
from flotilla.core.nodeaffinity import NAME_FIELD
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


class FreeBuckets:
    """A set of nodes ordered by (free vector, position), grouped by free vector.

    ``vecs`` holds the distinct free vectors in order; ``members[v]`` the
    nodes with free vector ``v`` as *negated* positions in ascending order,
    so the smallest position is the last item: the node best fit takes is
    popped off the end, in O(1).
    """

    __slots__ = ("vecs", "members")

    def __init__(self) -> None:
        self.vecs: list[Vector] = []
        self.members: dict[Vector, list[int]] = {}

    def __bool__(self) -> bool:
        return bool(self.vecs)

    def __len__(self) -> int:
        return sum(map(len, self.members.values()))

    def add(self, vec: Vector, neg: int) -> None:
        members = self.members.get(vec)
        if members is None:
            self.members[vec] = [neg]
            insort(self.vecs, vec)
        elif neg < members[-1]:
            insort(members, neg)
        else:
            members.append(neg)

    def remove(self, vec: Vector, neg: int) -> None:
        members = self.members[vec]
        if len(members) == 1:
            del self.members[vec]
            vecs = self.vecs
            del vecs[bisect_left(vecs, vec)]
        elif members[-1] == neg:
            members.pop()
        else:
            del members[bisect_left(members, neg)]

    def move(self, old: Vector, new: Vector, neg: int) -> None:
        """Node ``-neg`` goes from free vector ``old`` to ``new``."""
        all_members = self.members
        members = all_members[old]
        if len(members) == 1:
            # It was alone at ``old``: when ``new`` is also a new vector that sorts into the same gap,
            # the distinct vector is replaced in place (the common case when one node fills up).
            del all_members[old]
            vecs = self.vecs
            at = bisect_left(vecs, old)
            target = all_members.get(new)
            if target is None:
                all_members[new] = members
                if (at == 0 or vecs[at - 1] < new) and (at + 1 == len(vecs) or new < vecs[at + 1]):
                    vecs[at] = new
                else:
                    del vecs[at]
                    insort(vecs, new)
                return
            del vecs[at]
        else:
            if members[-1] == neg:
                members.pop()
            else:
                del members[bisect_left(members, neg)]
            target = all_members.get(new)
            if target is None:
                all_members[new] = [neg]
                insort(self.vecs, new)
                return
        if neg < target[-1]:
            insort(target, neg)
        else:
            target.append(neg)

    def finish(self) -> None:
        """Sort what :meth:`NodeIndex.build` appended to ``members`` (by ascending position)."""
        for members in self.members.values():
            members.reverse()
        self.vecs = sorted(self.members)

    def keys(self) -> list[tuple]:
        """``(*free, position)`` for every node, in order (what a sorted list of keys would hold)."""
        return [(*vec, -neg) for vec in self.vecs for neg in reversed(self.members[vec])]


class NodeIndex:
    """Free space per node and level, and best-fit search over it.

    Node positions (ints) are the handles everyone else uses. The index is
    built once and kept between cycles; :meth:`bind` and :meth:`unbind` keep
    it current and are exact inverses, which is what statements rely on to
    discard. ``free[i][k]`` is node ``i``'s free space at level ``levels[k]``
    (a tuple, replaced when it changes; it is also the node's key in its
    buckets).
    """

    #: What holds one searchable set (``bench/nodeindex.py`` swaps it to measure other layouts).
    buckets_type = FreeBuckets

    def __init__(self, space: ResourceSpace, nodes: Sequence[Node], levels: Sequence[int], indexed_labels: set[str]):
        self.space = space
        self.nodes = list(nodes)
        self.levels = sorted(set(levels) | {EVICTED})
        self.level_of = {level: k for k, level in enumerate(self.levels)}
        self.position = {(node.cluster, node.name): i for i, node in enumerate(self.nodes)}
        self.allocatable: list[Vector] = [space.allocatable(node.resources) for node in self.nodes]
        levels_n = len(self.levels)
        self.free: list[list[Vector]] = [[alloc] * levels_n for alloc in self.allocatable]
        self.users: list[dict[str, int]] = [{} for _ in self.nodes]
        self.jobs: list[dict[str, tuple[str, Vector, int]]] = [{} for _ in self.nodes]
        self.indexed_labels = indexed_labels
        self.types: list[NodeType] = []
        self.type_of: list[int] = []
        self._type_by_key: dict[tuple, NodeType] = {}
        for i, node in enumerate(self.nodes):
            node_type = self._type_for(node)
            node_type.nodes.append(i)
            self.type_of.append(node_type.id)
        types_n = len(self.types)
        self._unused = [[self.buckets_type() for _ in range(types_n)] for _ in range(levels_n)]
        self._used = [[self.buckets_type() for _ in range(types_n)] for _ in range(levels_n)]
        self._own: list[list[dict[str, FreeBuckets]]] = [[{} for _ in range(types_n)] for _ in range(levels_n)]
        #: Per node and level, the bucket sets the node is in (unused; used; used and its owner's).
        self._homes: list[list[tuple[FreeBuckets, ...]]] = [[] for _ in self.nodes]
        self._bucket: list[object] = [UNUSED] * len(self.nodes)
        #: Per node, the free vectors (per level) under which it sits in its type's *used* buckets, or None.
        self._in_used: list[list[Vector] | None] = [None] * len(self.nodes)
        #: Nodes whose place in the used buckets may be out of date (see :meth:`_flush`).
        self._stale: set[int] = set()
        self._upto: dict[int, int] = {}
        self._built = False

    def type_key(self, node: Node) -> tuple:
        indexed = self.indexed_labels
        labels = [(k, v) for k, v in node.labels.items() if k in indexed]
        if NAME_FIELD in indexed:  # some job's node affinity selects by name: each node its own type
            labels.append((NAME_FIELD, node.name))
        return (node.cluster, tuple(sorted(labels)), node.taints, node.unschedulable)

    def _type_for(self, node: Node) -> NodeType:
        key = self.type_key(node)
        node_type = self._type_by_key.get(key)
        if node_type is None:
            node_type = NodeType(len(self.types), node.cluster, dict(key[1]), node.taints, node.unschedulable, [])
            self._type_by_key[key] = node_type
            self.types.append(node_type)
        return node_type

    # -- building -------------------------------------------------------
    def preload(self, i: int, job_id: str, queue: str, vec: Vector, level: int) -> None:
        """Bind a job before :meth:`build`; cheap bulk loading of running jobs."""
        assert not self._built
        free = self.free[i]
        for k, lv in enumerate(self.levels):
            if lv > level:
                break
            free[k] = tuple(map(sub, free[k], vec))
        if level != EVICTED:
            users = self.users[i]
            users[queue] = users.get(queue, 0) + 1
        self.jobs[i][job_id] = (queue, vec, level)

    def build(self) -> None:
        """Fill the buckets in one pass after preloading."""
        self._fill()
        self._built = True

    def _fill(self) -> None:
        levels = range(len(self.levels))
        self._stale = set()
        for i in range(len(self.nodes)):
            bucket = self._bucket[i] = self._compute_bucket(i)
            homes = self._homes[i] = self._homes_for(i, bucket)
            free = self.free[i]
            neg = -i
            used = bucket is not UNUSED
            self._in_used[i] = list(free) if used else None
            t = self.type_of[i]
            for k in levels:
                vec = free[k]
                for buckets in (*homes[k], self._used[k][t]) if used else homes[k]:
                    members = buckets.members.get(vec)
                    if members is None:
                        buckets.members[vec] = [neg]
                    else:
                        members.append(neg)
        for per_level in (self._unused, self._used):
            for per_type in per_level:
                for buckets in per_type:
                    buckets.finish()
        for per_level in self._own:
            for per_type in per_level:
                for buckets in per_type.values():
                    buckets.finish()

    # -- nodes changing -------------------------------------------------
    def update_nodes(self, nodes: Sequence[Node]) -> list[int] | None:
        """Make the index describe ``nodes`` (all clusters' nodes, in snapshot order) without rebinding jobs.

        Nodes are matched by (cluster, name). A node whose allocatable
        changed is resized in place; one whose type changed (an indexed
        label, its taints, cordoned or uncordoned) moves to its new type;
        nodes added after every existing one are appended. Positions must
        stay what a fresh build would give (they are the tie-break of every
        search), so a node added before existing ones or a node removed
        renumbers the nodes after it: the per-node state is kept, the
        buckets are refilled from it (O(nodes), no job rebound), and the
        returned list maps each old position to its new one (-1: removed)
        for the caller's handles; None when no position changed. Types are
        renumbered by their first node, as a fresh build numbers them.

        Removed nodes must hold no job (take them off first). Raises
        ``ValueError`` when the existing nodes come in another order or a
        name repeats: the caller then builds afresh.
        """
        self._flush()
        position = self.position
        keys = [(node.cluster, node.name) for node in nodes]
        if len(set(keys)) != len(keys):
            raise ValueError("a node name repeats")
        old_of = list(map(position.get, keys))
        kept = [p for p in old_of if p is not None]
        if any(a >= b for a, b in zip(kept, kept[1:])):
            raise ValueError("the nodes come in another order")
        removed = len(self.nodes) - len(kept)
        if removed and any(self.jobs[p] for p in set(range(len(self.nodes))).difference(kept)):
            raise ValueError("a removed node still holds jobs")
        for node, p in zip(nodes, old_of):
            if p is None or self.nodes[p] is node:
                continue
            vec = self._allocatable_of(node)
            if vec != self.allocatable[p]:
                self._resize(p, vec)
            if self.type_key(node) != self.type_key(self.nodes[p]):
                self._retype(p, node)
            self.nodes[p] = node
        appended = len(kept) == len(self.nodes) and all(p is not None for p in old_of[:len(kept)])
        if appended:
            for node in nodes[len(kept):]:
                self._append(node)
            self._order_types()
            return None
        moved = [-1] * len(self.nodes)
        self._relayout(nodes, old_of)
        for new, old in enumerate(old_of):
            if old is not None:
                moved[old] = new
        return moved

    def _allocatable_of(self, node: Node) -> Vector:
        """``node``'s resources as a vector, not cached: a producer may send every node as a new object each
        cycle, and the space's cache (by mapping identity) would keep every one of them."""
        return self.space.allocatable(node.resources)

    def set_indexed_labels(self, indexed_labels: set[str]) -> None:
        """Type nodes by other label keys (nodes keep their positions and state; the buckets are refilled)."""
        self.indexed_labels = indexed_labels
        self._relayout(self.nodes, list(range(len(self.nodes))))

    def _resize(self, i: int, vec: Vector) -> None:
        """Node ``i``'s allocatable becomes ``vec``: every level's free space moves by the difference."""
        delta = tuple(map(sub, vec, self.allocatable[i]))
        self.allocatable[i] = vec
        self._move_free(i, range(len(self.levels)), add, delta)

    def _retype(self, i: int, node: Node) -> None:
        """Node ``i`` leaves its type's buckets for those of ``node``'s type (created if new)."""
        self._flush()
        free, neg = self.free[i], -i
        for k, homes in enumerate(self._homes[i]):
            for buckets in homes:
                buckets.remove(free[k], neg)
        held = self._in_used[i]
        if held is not None:
            for k, vec in enumerate(held):
                self._used[k][self.type_of[i]].remove(vec, neg)
            self._in_used[i] = None
        self.types[self.type_of[i]].nodes.remove(i)
        node_type = self._type_for(node)
        self._grow_type_lists()
        insort(node_type.nodes, i)
        self.type_of[i] = node_type.id
        homes = self._homes[i] = self._homes_for(i, self._bucket[i])
        for k in range(len(self.levels)):
            for buckets in homes[k]:
                buckets.add(free[k], neg)
        if self._bucket[i] is not UNUSED:
            self._stale.add(i)

    def _append(self, node: Node) -> None:
        """A new node after every other one: unused, all its room free."""
        i = len(self.nodes)
        alloc = self._allocatable_of(node)
        self.nodes.append(node)
        self.position[(node.cluster, node.name)] = i
        self.allocatable.append(alloc)
        self.free.append([alloc] * len(self.levels))
        self.users.append({})
        self.jobs.append({})
        node_type = self._type_for(node)
        self._grow_type_lists()
        node_type.nodes.append(i)
        self.type_of.append(node_type.id)
        self._bucket.append(UNUSED)
        self._in_used.append(None)
        homes = self._homes_for(i, UNUSED)
        self._homes.append(homes)
        for k in range(len(self.levels)):
            for buckets in homes[k]:
                buckets.add(alloc, -i)

    def _grow_type_lists(self) -> None:
        """Buckets for types created since the lists were made."""
        for k in range(len(self.levels)):
            while len(self._unused[k]) < len(self.types):
                self._unused[k].append(self.buckets_type())
                self._used[k].append(self.buckets_type())
                self._own[k].append({})

    def _order_types(self) -> None:
        """Drop empty types and number the others by their first node, as a fresh build does."""
        self._flush()
        order = sorted((t for t in self.types if t.nodes), key=lambda t: t.nodes[0])
        if len(order) == len(self.types) and all(t.id == k for k, t in enumerate(order)):
            return
        self._unused = [[per_type[t.id] for t in order] for per_type in self._unused]
        self._used = [[per_type[t.id] for t in order] for per_type in self._used]
        self._own = [[per_type[t.id] for t in order] for per_type in self._own]
        for k, node_type in enumerate(order):
            node_type.id = k
            for i in node_type.nodes:
                self.type_of[i] = k
        self.types = order
        self._type_by_key = {key: t for key, t in self._type_by_key.items() if t.nodes}

    def _relayout(self, nodes: Sequence[Node], old_of: list[int | None]) -> None:
        """Renumber the nodes as ``nodes`` orders them, keeping each kept node's state, and refill the buckets."""
        levels_n = len(self.levels)
        allocatable, free, users, jobs = [], [], [], []
        for node, p in zip(nodes, old_of):
            if p is None:
                alloc = self._allocatable_of(node)
                allocatable.append(alloc)
                free.append([alloc] * levels_n)
                users.append({})
                jobs.append({})
            else:
                allocatable.append(self.allocatable[p])
                free.append(self.free[p])
                users.append(self.users[p])
                jobs.append(self.jobs[p])
        self.nodes = list(nodes)
        self.position = {(node.cluster, node.name): i for i, node in enumerate(self.nodes)}
        self.allocatable, self.free, self.users, self.jobs = allocatable, free, users, jobs
        self.types, self.type_of, self._type_by_key = [], [], {}
        for i, node in enumerate(self.nodes):
            node_type = self._type_for(node)
            node_type.nodes.append(i)
            self.type_of.append(node_type.id)
        types_n = len(self.types)
        self._unused = [[self.buckets_type() for _ in range(types_n)] for _ in range(levels_n)]
        self._used = [[self.buckets_type() for _ in range(types_n)] for _ in range(levels_n)]
        self._own = [[{} for _ in range(types_n)] for _ in range(levels_n)]
        self._homes = [[] for _ in self.nodes]
        self._bucket = [UNUSED] * len(self.nodes)
        self._in_used = [None] * len(self.nodes)
        self._fill()

    # -- changing -------------------------------------------------------
    def bind(self, i: int, job_id: str, queue: str, vec: Vector, level: int) -> None:
        """Put a job on node ``i`` at ``level``."""
        self.jobs[i][job_id] = (queue, vec, level)
        if level != EVICTED:
            users = self.users[i]
            count = users.get(queue, 0)
            users[queue] = count + 1
            if not count:  # a new user: the node may change tier
                self._shift(i, self._bucket[i], vec, level, sub)
                return
        # Same users: the node stays in its bucket sets, only the levels up to ``level`` move.
        free, homes, neg = self.free[i], self._homes[i], -i
        for k in range(self._levels_upto(level)):
            old = free[k]
            new = free[k] = tuple(map(sub, old, vec))
            for buckets in homes[k]:
                buckets.move(old, new, neg)
        if self._bucket[i] is not UNUSED:
            self._stale.add(i)

    def unbind(self, i: int, job_id: str) -> tuple[str, Vector, int]:
        """Take a job off node ``i``; returns ``(queue, vec, level)`` so the caller can undo."""
        queue, vec, level = self.jobs[i].pop(job_id)
        if level != EVICTED:
            users = self.users[i]
            count = users[queue] - 1
            if not count:  # its last job of that user: the node may change tier
                del users[queue]
                self._shift(i, self._bucket[i], vec, level, add)
                return queue, vec, level
            users[queue] = count
        free, homes, neg = self.free[i], self._homes[i], -i
        for k in range(self._levels_upto(level)):
            old = free[k]
            new = free[k] = tuple(map(add, old, vec))
            for buckets in homes[k]:
                buckets.move(old, new, neg)
        if self._bucket[i] is not UNUSED:
            self._stale.add(i)
        return queue, vec, level

    def relevel(self, i: int, job_id: str, level: int) -> int:
        """Move a job bound on node ``i`` to ``level`` (what unbinding and binding it again does, in one step).

        Eviction and return change only a job's level: the free space moves
        at the levels between its old and new one, not at every level twice.
        Returns the old level.
        """
        jobs = self.jobs[i]
        queue, vec, was = jobs[job_id]
        if level == was:
            return was
        if (was == EVICTED) != (level == EVICTED):
            # The job stops (or starts) counting as a user of the node: when that changes who uses it, the
            # node may change tier, which unbinding and binding handle.
            users = self.users[i]
            count = users.get(queue, 0)
            if count == (1 if level == EVICTED else 0):
                self.unbind(i, job_id)
                self.bind(i, job_id, queue, vec, level)
                return was
            users[queue] = count - 1 if level == EVICTED else count + 1
        jobs[job_id] = (queue, vec, level)
        if level < was:
            self._move_free(i, range(self._levels_upto(level), self._levels_upto(was)), add, vec)
        else:
            self._move_free(i, range(self._levels_upto(was), self._levels_upto(level)), sub, vec)
        return was

    def _move_free(self, i: int, levels: range, op, vec: Vector) -> None:
        """Node ``i``'s free space at the levels ``levels`` moves by ``vec`` (``op``: add or sub), within the
        bucket sets the node is in (its users, and so its tier, are unchanged). :meth:`bind` and
        :meth:`unbind` do the same inline: they are the index's hottest calls."""
        free, homes, neg = self.free[i], self._homes[i], -i
        for k in levels:
            old = free[k]
            new = free[k] = tuple(map(op, old, vec))
            for buckets in homes[k]:
                buckets.move(old, new, neg)
        if self._bucket[i] is not UNUSED:
            self._stale.add(i)

    def _levels_upto(self, level: int) -> int:
        """How many levels are at or below ``level`` (the ones a job bound at ``level`` changes)."""
        upto = self._upto.get(level)
        if upto is None:
            upto = self._upto[level] = bisect_right(self.levels, level)
        return upto

    def _shift(self, i: int, old_bucket: object, vec: Vector, level: int, op) -> None:
        """Change node ``i``'s free space by ``vec`` (``op`` is add or sub) at the levels up to ``level``.

        A job bound at ``level`` changes the free space of the levels at or
        below it only; when the node's bucket (unused, own, shared) is
        unchanged, only those levels move, each within the bucket sets the
        node is already in.
        """
        free = self.free[i]
        new_bucket = self._compute_bucket(i)
        neg = -i
        if new_bucket == old_bucket:
            homes = self._homes[i]
            for k, lv in enumerate(self.levels):
                if lv > level:
                    break
                old = free[k]
                new = free[k] = tuple(map(op, old, vec))
                for buckets in homes[k]:
                    buckets.move(old, new, neg)
            if new_bucket is not UNUSED:
                self._stale.add(i)
            return
        old_homes = self._homes[i]
        self._bucket[i] = new_bucket
        homes = self._homes[i] = self._homes_for(i, new_bucket)
        for k, lv in enumerate(self.levels):
            old = new = free[k]
            if lv <= level:
                new = free[k] = tuple(map(op, old, vec))
            before, after = old_homes[k], homes[k]
            for buckets in before:
                if buckets in after:
                    buckets.move(old, new, neg)
                else:
                    buckets.remove(old, neg)
            for buckets in after:
                if buckets not in before:
                    buckets.add(new, neg)
        self._stale.add(i)

    def _compute_bucket(self, i: int) -> object:
        users = self.users[i]
        if not users:
            return UNUSED
        if len(users) == 1:
            (queue,) = users
            return SHARED if queue == FOREIGN_USER else queue
        return SHARED

    def _homes_for(self, i: int, bucket: object) -> list[tuple[FreeBuckets, ...]]:
        t = self.type_of[i]
        levels = range(len(self.levels))
        if bucket is UNUSED:
            return [(self._unused[k][t],) for k in levels]
        if bucket is SHARED:
            return [() for _ in levels]
        homes = []
        for k in levels:
            own = self._own[k][t]
            buckets = own.get(bucket)
            if buckets is None:
                buckets = own[bucket] = self.buckets_type()
            homes.append((buckets,))
        return homes

    def _flush(self) -> None:
        """Bring the used buckets up to date.

        A node in use sits in its own queue's buckets (or none, when
        shared) and in the used ones. Binds and unbinds move it in the
        former at once but only mark it here: the used buckets are searched
        only after the own and unused tiers found nothing (with best fit),
        so a node that takes many jobs in a row moves there once, on the
        next search that needs them, instead of once per job.
        """
        stale = self._stale
        if not stale:
            return
        in_used, bucket_of, type_of, all_free, used = self._in_used, self._bucket, self.type_of, self.free, self._used
        for i in stale:
            held = in_used[i]
            t = type_of[i]
            neg = -i
            if bucket_of[i] is UNUSED:
                if held is not None:
                    for k, vec in enumerate(held):
                        used[k][t].remove(vec, neg)
                    in_used[i] = None
            elif held is None:
                free = all_free[i]
                for k, vec in enumerate(free):
                    used[k][t].add(vec, neg)
                in_used[i] = list(free)
            else:
                for k, vec in enumerate(all_free[i]):
                    old = held[k]
                    if old != vec:
                        used[k][t].move(old, vec, neg)
                        held[k] = vec
        stale.clear()

    def fingerprint(self) -> tuple:
        """Each searchable set's keys in order (empty own sets left out), to compare two indexes."""
        self._flush()
        return ([[b.keys() for b in per_level] for per_level in self._unused],
                [[b.keys() for b in per_level] for per_level in self._used],
                [[{queue: b.keys() for queue, b in own.items() if b} for own in per_level] for per_level in self._own])

    # -- asking ---------------------------------------------------------
    def fits_on(self, i: int, vec: Vector, level: int) -> bool:
        row = self.free[i][self.level_of[level]]
        for r, amount in enumerate(vec):
            if amount > row[r]:
                return False
        return True

    def bucket(self, i: int) -> object:
        return self._bucket[i]

    def _tier_lists(self, k: int, t: int, tier: str, queue: str) -> tuple[FreeBuckets, ...]:
        if tier == "own":
            own = self._own[k][t].get(queue)
            return (own,) if own else ()
        if tier == "unused":
            return (self._unused[k][t],)
        if tier == "used":
            return (self._used[k][t],)
        return (self._unused[k][t], self._used[k][t])

    def find(self, vec: Vector, level: int, types: Sequence[int], tier: str, queue: str) -> int | None:
        """The node with the least free space at ``level`` on which ``vec`` fits, in one tier.

        ``tier`` is ``own`` (nodes only ``queue`` uses), ``unused``, ``used``
        (everything in use, own nodes included: they did not fit in the own
        tier, so they are passed over cheaply) or ``any``. Ties cannot
        happen: keys end with the node's position.
        """
        if tier != "own" and tier != "unused" and self._stale:
            self._flush()
        k = self.level_of[level]
        best: Vector | None = None
        best_neg = 0
        for t in types:
            for buckets in self._tier_lists(k, t, tier, queue):
                key = _first_fit(buckets.vecs, vec, best)
                if key is not None:
                    neg = buckets.members[key][-1]
                    if best is None or key < best or neg > best_neg:
                        best, best_neg = key, neg
        return None if best is None else -best_neg

    def iter_fitting(self, vec: Vector, level: int, types: Sequence[int]) -> Iterator[int]:
        """Every node of ``types`` on which ``vec`` fits at ``level``, smallest first per type.

        Per type, the unused nodes come first, then the used ones. The index
        must not change while this is being read.
        """
        self._flush()
        k = self.level_of[level]
        for t in types:
            for buckets in (self._unused[k][t], self._used[k][t]):
                members = buckets.members
                for key in _all_fits(buckets.vecs, vec):
                    for neg in reversed(members[key]):
                        yield -neg

    def iter_fitting_in(self, vec: Vector, level: int, types: Sequence[int], tier: str, queue: str) -> Iterator[int]:
        """:meth:`iter_fitting` within one tier (as :meth:`find` reads tiers): only the tier's own lists are
        walked, so a filtered search of the ``own`` tier does not pass over every other node."""
        self._flush()
        k = self.level_of[level]
        for t in types:
            for buckets in self._tier_lists(k, t, tier, queue):
                members = buckets.members
                for key in _all_fits(buckets.vecs, vec):
                    for neg in reversed(members[key]):
                        yield -neg

    def iter_fitting_from(self, vec: Vector, level: int, types: Sequence[int], tier: str, queue: str,
                          start: int) -> Iterator[int]:
        """:meth:`iter_fitting_in` in node position order from ``start`` on, wrapping round to the nodes before it.

        kube-scheduler's sample order (its ``nextStartNodeIndex``): where a
        node sits in the node list decides when it is met, never how much
        room it has. Each bucket's nodes are already in position order, so
        this merges the fitting buckets' lists: the first ``k`` nodes cost
        about ``k`` steps plus one per fitting bucket, not one per fitting
        node. The index must not change while this is being read.
        """
        self._flush()
        k = self.level_of[level]
        n = len(self.nodes)
        lanes = []
        for t in types:
            for buckets in self._tier_lists(k, t, tier, queue):
                members = buckets.members
                for key in _all_fits(buckets.vecs, vec):
                    negs = members[key]                 # negated positions, ascending: positions descending
                    split = bisect_right(negs, -start)  # negs[:split]: the positions at or after start
                    lanes.append(_rotated(negs, split, start, n))
        for distance in (lanes[0] if len(lanes) == 1 else merge(*lanes)):
            yield (start + distance) % n

    def free_total(self, types: Sequence[int], level: int) -> list[int]:
        """The free space at ``level`` of every node of ``types`` added up (a node over its room adds nothing).

        Read from the buckets: one step per distinct free vector, not per node.
        """
        self._flush()
        k = self.level_of[level]
        total = [0] * len(self.space)
        for t in types:
            for buckets in (self._unused[k][t], self._used[k][t]):
                for vec, members in buckets.members.items():
                    n = len(members)
                    for r, amount in enumerate(vec):
                        if amount > 0:
                            total[r] += amount * n
        return total

    def shortfall(self, vec: Vector, level: int, types: Sequence[int]) -> tuple[list[int], list[int]]:
        """Nodes of ``types`` at ``level``: those ``vec`` fits on, and per resource how many are short of it first.

        A node short of several resources counts once, under the first of
        them in the space's order (pod slots before the others, as
        kube-scheduler checks them), so the counts and the fitting nodes add
        up to the nodes of ``types``. A scan, used only to explain a failure
        once per distinct request.
        """
        k = self.level_of[level]
        counts = [0] * len(vec)
        fitting = []
        # Pod slots first, as NodeResourcesFit checks them (flotilla.core.resources).
        slot = self.space.slot
        wanted = vec[slot] if slot >= 0 else 0
        for t in types:
            for i in self.types[t].nodes:
                row = self.free[i][k]
                if wanted and wanted > row[slot]:
                    counts[slot] += 1
                    continue
                for r, amount in enumerate(vec):
                    if amount > row[r]:
                        counts[r] += 1
                        break
                else:
                    fitting.append(i)
        return fitting, counts


def _first_fit(vecs: list[Vector], vec: Vector, bound: Vector | None) -> Vector | None:
    """Smallest free vector in ``vecs`` (sorted) that fits ``vec`` and is not above ``bound``.

    When a vector fails on component ``j`` while the components before it
    fit, every vector sharing that prefix with a smaller component ``j``
    fails too, so the search jumps past them with one bisection.
    """
    if not vecs:
        return None
    if not vec:
        key = vecs[0]
        return key if bound is None or key <= bound else None
    size = len(vecs)
    pos = bisect_left(vecs, (vec[0],))
    while pos < size:
        key = vecs[pos]
        if bound is not None and key > bound:
            return None
        for j, amount in enumerate(vec):
            if key[j] < amount:
                pos = bisect_left(vecs, (*key[:j], amount), pos + 1)
                break
        else:
            return key
    return None


def _rotated(negs: list[int], split: int, start: int, n: int) -> Iterator[int]:
    """One bucket's nodes (``negs``: negated positions, ascending) as distances from ``start`` in rotated order:
    the positions from ``start`` on (``negs[:split]``), then those before it; lazily, for a sample that stops early."""
    for j in range(split - 1, -1, -1):
        yield -negs[j] - start
    for j in range(len(negs) - 1, split - 1, -1):
        yield n - start - negs[j]


def _all_fits(vecs: list[Vector], vec: Vector) -> Iterator[Vector]:
    if not vec:
        yield from vecs
        return
    pos = bisect_left(vecs, (vec[0],))
    while pos < len(vecs):
        key = vecs[pos]
        for j, amount in enumerate(vec):
            if key[j] < amount:
                pos = bisect_left(vecs, (*key[:j], amount), pos + 1)
                break
        else:
            yield key
            pos += 1
