"""Hierarchical queues: fair shares down the tree, and progressive filling level by level.

A queue may name a ``parent``; only leaf queues hold jobs. A queue's fair
share is its weight over its *active* siblings' weights (a queue is active
when it or a queue below it has jobs queued or running), times its parent's
fair share; top-level queues share the whole pool. Queues without parents
are the flat case and get exactly the flat shares (weight over the active
queues' weights).

An inner queue's allocation is the sum of the leaves below it (statements
charge the whole chain, :func:`charge`), so fairness keys, limits and reports
apply at every level.

:class:`TreePicker` is allocate's choice of the next unit when the queues
form a tree: at the root, then in the chosen queue, and so on down, the
child whose ``queue_order`` key would be smallest if it got the unit it
offers (ties to the name that sorts first) is taken. Every queue keeps a
heap of its children's keys; placing a unit re-files only the keys on the
path from its leaf to the root.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Iterable, Mapping

if TYPE_CHECKING:
    from flotilla.core.session import QueueState, Session


def link(queues: dict[str, QueueState]) -> bool:
    """Set each queue's ``children`` and ``chain`` (itself, then its ancestors); True if any queue has a parent."""
    nested = False
    for queue in queues.values():
        chain = [queue]
        parent = queue.parent
        while parent is not None:
            nested = True
            ancestor = queues[parent]
            chain.append(ancestor)
            parent = ancestor.parent
        queue.chain = tuple(chain)
        if queue.parent is not None:
            queues[queue.parent].children.append(queue)
    return nested


def fair_shares(weights: Mapping[str, float], parents: Mapping[str, str | None], active: Iterable[str]) -> dict[str, float]:
    """Every queue's fair share: weight over its active siblings' weights, times its parent's share.

    ``active`` names the queues with jobs queued or running; their ancestors
    are active too. Inactive queues get 0. Siblings are summed in the order of
    ``parents``, so the flat case is exactly weight over the active weights.
    """
    live: set[str] = set()
    for name in active:
        while name is not None and name not in live:
            live.add(name)
            name = parents[name]
    children: dict[str | None, list[str]] = {}
    for name, parent in parents.items():
        if name in live:
            children.setdefault(parent, []).append(name)
    shares = dict.fromkeys(parents, 0.0)
    pending: list[tuple[str | None, float]] = [(None, 1.0)]
    while pending:
        parent, parent_share = pending.pop()
        kids = children.get(parent, ())
        total = sum(weights[name] for name in kids)
        for name in kids:
            shares[name] = weights[name] / total * parent_share
            pending.append((name, shares[name]))
    return shares


def assign_fair_shares(queues: dict[str, QueueState]) -> None:
    """Set every queue's ``fair_share`` (:func:`fair_shares`)."""
    shares = fair_shares({q.name: q.weight for q in queues.values()}, {q.name: q.parent for q in queues.values()},
                         [q.name for q in queues.values() if q.active])
    for queue in queues.values():
        queue.fair_share = shares[queue.name]


def charge(queue: QueueState, vec, sign: int) -> None:
    """Add (``sign`` 1) or take back (-1) ``vec`` in the allocation of ``queue`` and every queue above it."""
    for level in queue.chain:
        row = level.allocated
        for r, amount in enumerate(vec):
            row[r] += sign * amount


class TreePicker:
    """Allocate's next unit over a queue tree; see the module docstring.

    ``offer`` files a leaf's next unit, ``pop`` takes the best unit down the
    tree (its leaf stays filed until the caller offers its next unit or
    drops the leaf), ``drop`` withdraws a leaf that has nothing more to offer.
    """

    def __init__(self, session: Session):
        self.session = session
        self.heaps: dict[str | None, list[tuple[float, str, int]]] = {}
        self.version: dict[str, int] = {}
        self.head: dict[str, tuple[object, object, tuple]] = {}
        self.leaf: dict[str, str] = {}

    def offer(self, queue: QueueState, unit, units, vec) -> None:
        self.head[queue.name] = (unit, units, vec)
        self._refile(queue)

    def drop(self, queue: QueueState) -> None:
        self.head.pop(queue.name, None)
        self._refile(queue)

    def pop(self):
        """``(queue, unit, units, vec)`` of the best unit, or None when no leaf offers any."""
        child = self._best(None)
        if child is None:
            return None
        name = self.leaf[child]
        unit, units, vec = self.head[name]
        return self.session.queues[name], unit, units, vec

    def _best(self, parent: str | None) -> str | None:
        heap = self.heaps.get(parent)
        while heap:
            _, child, version = heap[0]
            if self.version[child] == version:
                return child
            heapq.heappop(heap)
        return None

    def _refile(self, queue: QueueState) -> None:
        """Recompute the keys from ``queue`` up to the root, filing each in its parent's heap."""
        key = self.session.queue_order_fns[0]
        for node in queue.chain:
            name = node.name
            version = self.version[name] = self.version.get(name, 0) + 1
            if node.children:
                best = self._best(name)
                leaf = self.leaf[best] if best is not None else None
            else:
                leaf = name if name in self.head else None
            if leaf is None:
                continue  # withdrawn: its stale entries are skipped; the parent recomputes without it
            self.leaf[name] = leaf
            heapq.heappush(self.heaps.setdefault(node.parent, []), (key(node, self.head[leaf][2]), name, version))
