"""Action orders that cannot work, refused with the reason (the contracts of docs/policies.md "Actions in a cycle").

Each rule follows from what an action promises to the ones after it:

* ``lease`` hands the decisions made so far to the clusters: anything after
  it decides what never reaches them.
* ``evict`` only takes preemptible jobs off their nodes inside the session;
  ``allocate`` returns them, and whatever is still evicted when ``preempt``
  starts or the cycle ends is stopped. Without an ``allocate`` after it
  (and before ``preempt``) every evicted job would be stopped for nothing.
* ``reserve``'s node filter keeps new jobs other than backfill off reserved
  nodes, and its units' jobs are passed over by ``allocate``, only if it
  runs before ``allocate``; after it, ``allocate`` fills the nodes being
  drained for the unit that same cycle.
* ``enqueue`` takes jobs that can never run out of the queues before
  ``reserve``, ``allocate`` and ``preempt`` look at them; after one of them
  such a job is looked at every cycle (and, heading its queue, reserves
  nodes it will never use).

Actions from other packages are bound by the ``lease`` rule only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from flotilla.config.errors import FieldPath

#: The actions ``enqueue`` must precede, and why in a word.
_AFTER_ENQUEUE = ("reserve", "allocate", "preempt")


def action_order_problems(actions: Sequence[str]) -> list[tuple[FieldPath, str]]:
    """``(path, message)`` for each rule ``actions`` breaks (see the module docstring); duplicates are left to
    the caller's own check."""
    problems: list[tuple[FieldPath, str]] = []
    first = {}
    for i, name in enumerate(actions):
        first.setdefault(name, i)
    order = " -> ".join(actions)
    if "lease" in first and first["lease"] != len(actions) - 1:
        later = ", ".join(actions[first["lease"] + 1:])
        problems.append((("actions", first["lease"]),
                         f"lease must be the last action ({order}): it hands the decisions made so far to the "
                         f"clusters, so what {later} decides after it never reaches them"))
    if "evict" in first:
        e = first["evict"]
        after = list(actions[e + 1:])
        allocate = after.index("allocate") if "allocate" in after else None
        preempt = after.index("preempt") if "preempt" in after else None
        if allocate is None:
            problems.append((("actions", e),
                             f"evict needs allocate after it ({order}): allocate returns evicted jobs to their "
                             f"nodes, and the ones still evicted when the cycle ends are preempted, so every "
                             f"preemptible job would be stopped for nothing"))
        elif preempt is not None and preempt < allocate:
            problems.append((("actions", e),
                             f"evict needs allocate between it and preempt ({order}): preempt stops the jobs "
                             f"still evicted when it starts, before allocate could return them to their nodes"))
    if "reserve" in first and "allocate" in first and first["allocate"] < first["reserve"]:
        problems.append((("actions", first["reserve"]),
                         f"reserve must come before allocate ({order}): its reserved nodes take only backfill "
                         f"jobs, and its units wait, only from the actions after it"))
    if "enqueue" in first:
        before = [name for name in actions[:first["enqueue"]] if name in _AFTER_ENQUEUE]
        if before:
            problems.append((("actions", first["enqueue"]),
                             f"enqueue must come before {', '.join(before)} ({order}): it sets aside the jobs "
                             f"that can never run before the others look at them"))
    return problems


__all__ = ["action_order_problems"]
