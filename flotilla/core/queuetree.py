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

The queues are :class:`~flotilla.core.cyclestate.QueueState` objects (the
state module builds them with these functions, so this one does not import
it). Allocate's choice of the next unit in a tree is
:class:`~flotilla.actions.pickers.TreePicker`.
"""

from __future__ import annotations

from typing import Iterable, Mapping


def link(queues: dict) -> bool:
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


def assign_fair_shares(queues: dict) -> None:
    """Set every queue's ``fair_share`` (:func:`fair_shares`)."""
    shares = fair_shares({q.name: q.weight for q in queues.values()}, {q.name: q.parent for q in queues.values()},
                         [q.name for q in queues.values() if q.active])
    for queue in queues.values():
        queue.fair_share = shares[queue.name]


def charge(queue, vec, sign: int) -> None:
    """Add (``sign`` 1) or take back (-1) ``vec`` in the allocation of ``queue`` and every queue above it."""
    for level in queue.chain:
        row = level.allocated
        for r, amount in enumerate(vec):
            row[r] += sign * amount
