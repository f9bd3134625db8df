"""Allocate's choice of the next unit: the offer whose queue has the smallest ``queue_order`` key.

Every queue with work offers its next unit; the picker files the offers by
the fairness policy's key (``session.queue_order_fns[0]``, see
:mod:`flotilla.core.extensions`) and hands back the best. :class:`FlatPicker`
serves queues without parents, one heap of offers; :class:`TreePicker`
serves a queue tree, level by level: at the root, then in the chosen queue,
and so on down, the child whose key would be smallest if it got the unit it
offers (ties to the name that sorts first) is taken. Every queue keeps a
heap of its children's keys; placing a unit re-files only the keys on the
path from its leaf to the root.

A key the policy fails to give (:class:`~flotilla.core.extensions.PluginFailed`:
it raised, or answered a NaN, None, or a tuple among floats) leaves its
queue out of the cycle: the picker records the failure on the session and
files nothing for the queue (in a tree, nothing below the queue whose key
failed).
"""

from __future__ import annotations

import heapq

from flotilla.core.cyclestate import QueueState
from flotilla.core.extensions import PluginFailed, inline


class FlatPicker:
    """Allocate's next unit when no queue has a parent: one heap of the queues' offers.

    Same interface as :class:`TreePicker`: after
    ``pop`` the caller ``offer``s the queue's next unit or ``drop``s the queue.
    """

    def __init__(self, session):
        self.session = session
        self.heap: list[tuple[float, str, object, object, object, tuple]] = []
        self.key = session.queue_order_fns[0]
        #: The policy's own callable and its guard taken apart: its keys are asked per unit offered, so the
        #: guard's checks are made here, where the keys are filed (:class:`~flotilla.core.extensions.Inline`).
        self.raw, self.failed, self.check = inline(self.key)
        #: Floats are the policy's keys (its guard's check has seen one): a finite float needs no check call.
        self.floats = getattr(self.check, "floats", None)
        #: The policy says a queue's key moves with its own allocation only (asset fairness): a waiting
        #: offer's key stays exact, since only the queue's own placements change its allocation.
        self.steady = getattr(self.key, "own_usage_only", False)

    def _key(self, queue, vec):
        """The policy's key for ``queue`` with ``vec`` more, or None when it fails (the failure recorded): the
        guard's work, inline."""
        failed = self.failed
        if failed is None:
            return self.raw(queue, vec)
        try:
            key = self.raw(queue, vec)
        except Exception as exc:
            self.session.plugin_failed(failed(exc, queue))
            return None
        if self.floats and key.__class__ is float and key - key == 0:
            return key  # the usual key: a finite float from a policy whose keys are floats
        problem = self.check(key)
        if problem is not None:
            self.session.plugin_failed(failed(problem, queue))
            return None
        return key

    def offer(self, queue, unit, run, vec) -> None:
        failed = self.failed
        if failed is None:
            key = self.raw(queue, vec)
        else:
            # _key, inlined: one offer per unit placed.
            try:
                key = self.raw(queue, vec)
            except Exception as exc:
                self.session.plugin_failed(failed(exc, queue))
                return
            if not (self.floats and key.__class__ is float and key - key == 0):
                problem = self.check(key)
                if problem is not None:
                    self.session.plugin_failed(failed(problem, queue))
                    return
        # Queue names are unique, so the heap never compares what follows them.
        heapq.heappush(self.heap, (key, queue.name, queue, unit, run, vec))

    def drop(self, queue) -> None:
        """Nothing to do: ``pop`` already took the queue's entry."""

    def pop(self):
        heap = self.heap
        while heap:
            key, name, queue, unit, run, vec = heapq.heappop(heap)
            # Alone in the heap, or with a key that cannot have moved, the offer stands as filed.
            if heap and not self.steady:
                current = self._key(queue, vec)
                if current is None:
                    continue
                if current > key and current > heap[0][0]:
                    # A policy whose keys move with other queues' allocations: re-file and look again.
                    heapq.heappush(heap, (current, name, queue, unit, run, vec))
                    continue
            return queue, unit, run, vec
        return None


class TreePicker:
    """Allocate's next unit over a queue tree; see the module docstring.

    ``offer`` files a leaf's next unit, ``pop`` takes the best unit down the
    tree (its leaf stays filed until the caller offers its next unit or
    drops the leaf), ``drop`` withdraws a leaf that has nothing more to offer.
    """

    def __init__(self, session):
        self.session = session
        self.heaps: dict[str | None, list[tuple[float, str, int]]] = {}
        self.version: dict[str, int] = {}
        self.head: dict[str, tuple[object, object, tuple]] = {}
        self.leaf: dict[str, str] = {}
        #: The policy's callable and its guard taken apart, as in :class:`FlatPicker`: a key is asked per queue
        #: on the path of every unit placed, so the guard's checks are made here, a finite float from a policy
        #: whose keys are floats needing none.
        self.raw, self.failed, self.check = inline(session.queue_order_fns[0])
        self.floats = getattr(self.check, "floats", None)

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
        session = self.session
        raw, failed_with, check, floats = self.raw, self.failed, self.check, self.floats
        failed = session.failed_queues
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
            reason = failed.get(name) if failed else None
            if reason is None:
                # The guard's work, inline (FlatPicker.offer): one call to the policy per queue on the path.
                try:
                    node_key = raw(node, self.head[leaf][2])
                except Exception as exc:
                    if failed_with is not None:
                        failure = failed_with(exc, node)
                    elif isinstance(exc, PluginFailed):   # the core's own key (not guarded) raises it as it is
                        failure = exc
                    else:
                        raise
                    session.plugin_failed(failure)
                    reason = failure.why
                else:
                    if failed_with is not None and not (floats and node_key.__class__ is float
                                                        and node_key - node_key == 0):
                        problem = check(node_key)
                        if problem is not None:
                            failure = failed_with(problem, node)
                            session.plugin_failed(failure)
                            reason = failure.why
            if reason is not None:
                # Its key failed (now or earlier): withdrawn, and the leaf that offered through it with it.
                session.fail_queue(leaf, reason)
                self.head.pop(leaf, None)
                continue
            self.leaf[name] = leaf
            heapq.heappush(self.heaps.setdefault(node.parent, []), (node_key, name, version))
