"""Queue limits, shared by every fairness policy.

A queue's ``limits`` are fractions of the pool (``{cpu: 0.25}``: at most a
quarter of all cpu). In a queue tree they hold at every level: a job is
admitted only if its queue and every queue above it stay within theirs. Fairness plugins call :func:`register_queue_limits` in
their ``flotilla_session_open`` so that swapping the policy keeps the limits.
"""

from __future__ import annotations


def register_queue_limits(session) -> None:
    names = session.space.names

    def within_limits(queue, job, vec):
        for level in queue.chain:
            limit = level.limit_vector
            if limit is None:
                continue
            allocated = level.allocated
            for r, amount in enumerate(vec):
                if amount and allocated[r] + amount > limit[r]:
                    name = names[r]
                    return f"queue {level.name} at its {name} limit {level.limits[name]:g}"
        return None

    if any(queue.limit_vector is not None for queue in session.queues.values()):
        session.add_queue_admit(within_limits)
