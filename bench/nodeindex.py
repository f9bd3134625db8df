"""The node index's moves and searches, timed, for the layouts tried: binds, finds and unbinds per second.

A benchmark, not a test: it prints figures and asserts nothing about time.

    python bench/nodeindex.py [--repeat 3] [--only buckets,sortedlist]
    python bench/nodeindex.py --node-changes [--jobs 1000000]

Layouts (each answers exactly the same: ``--check`` compares every find):

* ``sortedlist``: the layout before buckets. One sortedcontainers
  ``SortedList`` of ``(*free, position)`` keys per level, node type and tier
  list (unused, used, and one per owning queue); a placement removes and
  re-adds the node's key in every list whose level changed (two lists per
  level when the node is owned by one queue: used and own).
* ``per-level``: one ``SortedList`` per level and type holding every node;
  the tier (own, unused, used) is filtered at query time, skipping nodes of
  other tiers. Half the moves of ``sortedlist`` on owned nodes, but a search
  walks past the nodes of other tiers.
* ``buckets+tree``: nodes with equal free vectors share a bucket (a dict from
  free vector to positions) and the distinct vectors are kept in a
  ``SortedList`` (a tree keyed by free space).
* ``buckets``: the same buckets with the distinct vectors in a plain sorted
  Python list (``bisect``/``insort``, C loops on short lists): what
  ``flotilla/core/nodeindex.py`` uses.

Workloads, each by this process's CPU time, best of ``--repeat``:

* ``mixed``: bench/cycle.py's 10,000-node cluster (9,000 CPU nodes of 16/32/64
  cores and 64/128/256 GiB, 1,000 tainted 64-core GPU nodes: two node types),
  100 queues, its five CPU job shapes and the GPU shape (one job in 50), half
  of them non-preemptible, best fit by tiers (own, unused, used);
* ``uniform 1q`` / ``uniform 10q``: 1,000 nodes of 32 cores / 256 GiB, 1-core
  4 GiB preemptible jobs, from one queue or ten.

Per workload: ``place`` (a find through the tiers and a bind, until 90,000
jobs, or the cluster, are placed), ``find`` (finds only, on the filled
index), ``evict`` (each placed job unbound and bound back at the evicted
level, then the reverse: what the evict action and a discard do), ``unbind``
(every job taken off).

``--node-changes`` times instead what a node change costs the kept state:
bench/cycle.py's default snapshot (10,000 nodes, ``--jobs`` queued), one
cycle run and its placements running, then a sync after each change (a node
cordoned, tainted, relabelled, resized, appended, removed from the middle,
added to the middle, and two nodes swapped, which rebuilds from scratch),
in CPU milliseconds, the garbage collector paused as ``run_cycle`` pauses it.
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import time
from bisect import bisect_left
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

from sortedcontainers import SortedList

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from flotilla.core.model import Node, Taint  # noqa: E402
from flotilla.core.nodeindex import (EVICTED, FOREIGN_USER, NONPREEMPTIBLE, SHARED, UNUSED, FreeBuckets,  # noqa: E402
                                     NodeIndex, NodeType)
from flotilla.core.resources import ResourceSpace, Vector  # noqa: E402

GIB = 2**30
LEVELS = [20000, 30000]


class SortedListIndex:
    """The layout before buckets: one sorted list of ``(*free, position)`` keys per level, type and tier.

    Kept here, as it was, to be measured against.
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
                key = _first_fit_keys(sorted_list, vec, best)
                if key is not None:
                    best = key
        return None if best is None else best[-1]

    def iter_fitting(self, vec: Vector, level: int, types: Sequence[int]) -> Iterator[int]:
        """Every node of ``types`` on which ``vec`` fits at ``level``, smallest first per type."""
        k = self.level_of[level]
        for t in types:
            for sorted_list in (self._unused[k][t], self._used[k][t]):
                yield from _all_fits_keys(sorted_list, vec)

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


def _first_fit_keys(sorted_list: SortedList, vec: Vector, bound: tuple | None) -> tuple | None:
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


def _all_fits_keys(sorted_list: SortedList, vec: Vector) -> Iterator[int]:
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


class PerLevelIndex(SortedListIndex):
    """One sorted list per level and type holding every node; the tier is filtered at query time."""

    def build(self) -> None:
        pending = [[[] for _ in self.types] for _ in self.levels]
        for i in range(len(self.nodes)):
            self._bucket[i] = self._compute_bucket(i)
            keys = []
            for k in range(len(self.levels)):
                key = (*self.free[i][k], i)
                keys.append(key)
                pending[k][self.type_of[i]].append(key)
            self._keys[i] = keys
        self._all = [[SortedList(keys) for keys in per_level] for per_level in pending]
        self._built = True

    def _reindex(self, i: int, old_bucket: object, level: int) -> None:
        self._bucket[i] = self._compute_bucket(i)
        keys, free, t = self._keys[i], self.free[i], self.type_of[i]
        for k, lv in enumerate(self.levels):
            if lv > level:
                break
            sorted_list = self._all[k][t]
            sorted_list.remove(keys[k])
            key = keys[k] = (*free[k], i)
            sorted_list.add(key)

    def find(self, vec: Vector, level: int, types: Sequence[int], tier: str, queue: str) -> int | None:
        k = self.level_of[level]
        buckets = self._bucket
        best = None
        for t in types:
            for key in _fitting_keys(self._all[k][t], vec):
                if best is not None and key >= best:
                    break
                bucket = buckets[key[-1]]
                if tier == "any" or (bucket == queue if tier == "own" else (bucket is None) == (tier == "unused")):
                    best = key
                    break
        return None if best is None else best[-1]


def _fitting_keys(sorted_list: SortedList, vec: Vector) -> Iterator[tuple]:
    pos = sorted_list.bisect_left((vec[0],))
    while pos < len(sorted_list):
        key = sorted_list[pos]
        for j, amount in enumerate(vec):
            if key[j] < amount:
                pos = sorted_list.bisect_left((*key[:j], amount))
                break
        else:
            yield key
            pos += 1


class TreeBuckets(FreeBuckets):
    """Buckets of equal free space, the distinct vectors in a ``SortedList``."""

    __slots__ = ()

    def __init__(self) -> None:
        self.vecs = SortedList()
        self.members = {}

    def add(self, vec: Vector, neg: int) -> None:
        members = self.members.get(vec)
        if members is None:
            self.members[vec] = [neg]
            self.vecs.add(vec)
        else:
            members.insert(bisect_left(members, neg), neg)

    def remove(self, vec: Vector, neg: int) -> None:
        members = self.members[vec]
        if len(members) == 1:
            del self.members[vec]
            self.vecs.remove(vec)
        else:
            del members[bisect_left(members, neg)]

    def move(self, old: Vector, new: Vector, neg: int) -> None:
        self.remove(old, neg)
        self.add(new, neg)

    def finish(self) -> None:
        for members in self.members.values():
            members.reverse()
        self.vecs = SortedList(self.members)


class TreeIndex(NodeIndex):
    buckets_type = TreeBuckets

    def find(self, vec: Vector, level: int, types: Sequence[int], tier: str, queue: str) -> int | None:
        k = self.level_of[level]
        best, best_neg = None, 0
        for t in types:
            for buckets in self._tier_lists(k, t, tier, queue):
                key = _first_fit_tree(buckets.vecs, vec, best)
                if key is not None:
                    neg = buckets.members[key][-1]
                    if best is None or key < best or neg > best_neg:
                        best, best_neg = key, neg
        return None if best is None else -best_neg


def _first_fit_tree(vecs: SortedList, vec: Vector, bound: Vector | None) -> Vector | None:
    size = len(vecs)
    pos = vecs.bisect_left((vec[0],))
    while pos < size:
        key = vecs[pos]
        if bound is not None and key > bound:
            return None
        for j, amount in enumerate(vec):
            if key[j] < amount:
                pos = vecs.bisect_left((*key[:j], amount))
                break
        else:
            return key
    return None


LAYOUTS = {"sortedlist": SortedListIndex, "per-level": PerLevelIndex, "buckets+tree": TreeIndex,
           "buckets": NodeIndex}
TIERS = ("own", "unused", "used")


@dataclass
class Workload:
    name: str
    nodes: list[Node]
    #: (vec, level, types, queue) per job, in arrival order.
    jobs: list[tuple[Vector, int, list[int], str]]
    space: ResourceSpace


def mixed(jobs: int = 90_000, queues: int = 100) -> Workload:
    """bench/cycle.py's default cluster and job mix (see the module docstring)."""
    rng = random.Random(0)
    gpu_taint = (Taint("nvidia.com/gpu", "present", "NoSchedule"),)
    nodes = []
    for i in range(10_000):
        if i % 10 == 0:
            nodes.append(Node(f"gpu-{i}", "c1", {"cpu": 64000, "memory": 512 * GIB, "nvidia.com/gpu": 8},
                              {"kind": "gpu"}, gpu_taint))
        else:
            nodes.append(Node(f"cpu-{i}", "c1", {"cpu": rng.choice([16000, 32000, 64000]),
                                                  "memory": rng.choice([64, 128, 256]) * GIB}, {"kind": "cpu"}))
    space = ResourceSpace({"cpu", "memory", "nvidia.com/gpu"})
    shapes = [space.vector(s) for s in ({"cpu": 1000, "memory": 4 * GIB}, {"cpu": 2000, "memory": 8 * GIB},
                                        {"cpu": 4000, "memory": 16 * GIB}, {"cpu": 8000, "memory": 32 * GIB},
                                        {"cpu": 500, "memory": 1 * GIB})]
    gpu = space.vector({"cpu": 4000, "memory": 32 * GIB, "nvidia.com/gpu": 1})
    work = []
    for j in range(jobs):
        queue = f"q{rng.randrange(queues):03d}"
        if j % 50 == 0:
            work.append((gpu, NONPREEMPTIBLE, [0], queue))  # type 0: the GPU nodes (node 0 is one)
        else:
            work.append((shapes[rng.randrange(len(shapes))], 20000, [1], queue))
    return Workload(f"mixed 10,000 nodes, {queues} queues", nodes, work, space)


def uniform(queues: int, nodes: int = 1000) -> Workload:
    space = ResourceSpace({"cpu", "memory"})
    node_list = [Node(f"node-{i:05d}", "c1", {"cpu": 32000, "memory": 256 * GIB}) for i in range(nodes)]
    vec = space.vector({"cpu": 1000, "memory": 4 * GIB})
    work = [(vec, 20000, [0], f"q{j % queues:03d}") for j in range(nodes * 32)]
    return Workload(f"uniform {nodes:,} x 32 cores, {queues} queue{'s' * (queues > 1)}, 1-core jobs",
                    node_list, work, space)


def run(layout, workload: Workload) -> tuple[dict[str, float], list[int | None]]:
    """One pass of every phase; per phase, operations per CPU second."""
    clock = time.process_time
    index = layout(workload.space, workload.nodes, LEVELS, {"kind"})
    index.build()
    rates = {}
    placed, chosen = [], []
    started = clock()
    for j, (vec, level, types, queue) in enumerate(workload.jobs):
        for tier in TIERS:
            node = index.find(vec, EVICTED, types, tier, queue)
            if node is not None:
                break
        chosen.append(node)
        if node is not None:
            index.bind(node, f"j{j}", queue, vec, level)
            placed.append((node, f"j{j}", queue, vec, level))
    rates["place"] = len(placed) / (clock() - started)
    probes = workload.jobs[:20_000]
    started = clock()
    for vec, level, types, queue in probes:
        for tier in TIERS:
            if index.find(vec, EVICTED, types, tier, queue) is not None:
                break
    rates["find"] = len(probes) / (clock() - started)
    started = clock()
    for node, job_id, queue, vec, level in placed:
        index.unbind(node, job_id)
        index.bind(node, job_id, queue, vec, EVICTED)
    for node, job_id, queue, vec, level in placed:
        index.unbind(node, job_id)
        index.bind(node, job_id, queue, vec, level)
    rates["evict"] = 4 * len(placed) / (clock() - started)
    started = clock()
    for node, job_id, *_ in placed:
        index.unbind(node, job_id)
    rates["unbind"] = len(placed) / (clock() - started)
    return rates, chosen


def node_changes(jobs: int) -> None:
    from dataclasses import replace

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from cycle import after, build_snapshot

    from flotilla.config import load_config
    from flotilla.scheduler import Scheduler
    from flotilla.core.cyclestate import CycleState
    from flotilla.core.logs import configure_logging

    configure_logging("warning")
    scheduler = Scheduler(load_config(None))
    first = build_snapshot(scheduler, 10_000, 100, jobs, 0)
    decisions = scheduler.run_cycle(first, random.Random(0), actions=[a for a in scheduler.actions
                                                                       if a.name != "lease"])
    snapshot = after(first, decisions)
    resources = tuple(scheduler.settings.indexed_resources)
    state = CycleState()
    state.sync(snapshot, resources)
    state.sync(snapshot, resources)
    clock = time.process_time
    print(f"10,000 nodes, {jobs:,} queued, {len(snapshot.running()):,} running; CPU ms per sync")

    def timed(label: str, nodes: list[Node]) -> None:
        nonlocal snapshot
        cluster = snapshot.clusters[0]
        gone = {node.name for node in cluster.nodes} - {node.name for node in nodes}
        running = [job for job in cluster.running if job.node not in gone]
        snapshot = replace(snapshot, clusters=[replace(cluster, nodes=nodes, running=running)])
        rebuilds = state.rebuilds
        gc.disable()  # as run_cycle does around the whole cycle, the sync included
        started = clock()
        state.sync(snapshot, resources)
        elapsed = clock() - started
        gc.enable()
        print(f"  {label:<44} {elapsed * 1000:8.1f}"
              f"{'  (rebuilt)' if state.rebuilds != rebuilds else ''}", flush=True)

    timed("nothing changed", list(snapshot.clusters[0].nodes))
    nodes = list(snapshot.clusters[0].nodes)
    timed("a node cordoned", nodes[:5] + [replace(nodes[5], unschedulable=True)] + nodes[6:])
    nodes = list(snapshot.clusters[0].nodes)
    timed("a node tainted", nodes[:7] + [replace(nodes[7], taints=(Taint("dedicated", "x", "NoSchedule"),))]
          + nodes[8:])
    nodes = list(snapshot.clusters[0].nodes)
    timed("a node relabelled (indexed label)", nodes[:9] + [replace(nodes[9], labels={"kind": "gpu"})] + nodes[10:])
    nodes = list(snapshot.clusters[0].nodes)
    timed("a node resized", nodes[:11] + [replace(nodes[11], resources={**nodes[11].resources, "cpu": 128000})]
          + nodes[12:])
    nodes = list(snapshot.clusters[0].nodes)
    timed("a node appended", nodes + [Node("cpu-new", "c1", {"cpu": 32000, "memory": 128 * GIB}, {"kind": "cpu"})])
    nodes = list(snapshot.clusters[0].nodes)
    timed("a node removed (position 5,000: renumbering)", nodes[:5000] + nodes[5001:])
    nodes = list(snapshot.clusters[0].nodes)
    timed("a node added at position 5,000 (renumbering)",
          nodes[:5000] + [Node("cpu-mid", "c1", {"cpu": 32000, "memory": 128 * GIB}, {"kind": "cpu"})] + nodes[5000:])
    nodes = list(snapshot.clusters[0].nodes)
    timed("two nodes swapped (a reorder: rebuilds)", [nodes[1], nodes[0], *nodes[2:]])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", default=",".join(LAYOUTS), help="comma-separated layouts")
    parser.add_argument("--node-changes", action="store_true", help="time node changes in the kept state instead")
    parser.add_argument("--jobs", type=int, default=1_000_000, help="queued jobs (--node-changes)")
    args = parser.parse_args()
    if args.node_changes:
        node_changes(args.jobs)
        return
    layouts = {name: LAYOUTS[name] for name in args.only.split(",")}
    print("operations per CPU second, best of", args.repeat, "(place: a find through the tiers and a bind; "
          "evict: unbind + bind)")
    for workload in (mixed(), uniform(1), uniform(10)):
        print(f"\n{workload.name}")
        print(f"  {'layout':<14} {'place/s':>10} {'find/s':>10} {'evict/s':>10} {'unbind/s':>10}")
        answers = {}
        for name, layout in layouts.items():
            best: dict[str, float] = {}
            for _ in range(args.repeat):
                rates, answers[name] = run(layout, workload)
                for phase, rate in rates.items():
                    best[phase] = max(best.get(phase, 0.0), rate)
            print(f"  {name:<14} {best['place']:>10,.0f} {best['find']:>10,.0f} {best['evict']:>10,.0f} "
                  f"{best['unbind']:>10,.0f}", flush=True)
        first = next(iter(answers.values()))
        print("  same placements in every layout:", all(chosen == first for chosen in answers.values()))


if __name__ == "__main__":
    main()
