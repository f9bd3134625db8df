"""Queue limits: a queue never holds more than its ``limits`` fractions of the pool.

A queue's ``limits`` are fractions of the pool (``{cpu: 0.25}``: at most a
quarter of all cpu). In a queue tree they hold at every level: a job is
admitted only if its queue and every queue above it stay within theirs.
The session registers the check as its first queue admission rule, before
any plugin's, whenever some queue has limits, so no fairness policy can
drop them; plugins may add admission rules of their own (all must agree).
"""

from __future__ import annotations

from typing import Callable, Sequence

from flotilla.core.reasons import Reason, make


def queue_limit_refusal(names: Sequence[str]) -> Callable:
    """``refusal(queue, job, vec)``: why taking ``vec`` would put ``queue`` or a queue above it over its limit.

    ``names`` are the resource names in vector order, for the reason's detail.
    """

    def refusal(queue, job, vec) -> Reason | None:
        for level in queue.chain:
            limit = level.limit_vector
            if limit is None:
                continue
            allocated = level.allocated
            for r, amount in enumerate(vec):
                if amount and allocated[r] + amount > limit[r]:
                    name = names[r]
                    return make("queue_limit", level.name, name, level.limits[name])
        return None

    return refusal
