"""Queue limits, shared by every fairness policy.

A queue's ``limits`` are fractions of the pool (``{cpu: 0.25}``: at most a
quarter of all cpu). Fairness plugins call :func:`register_queue_limits` in
their ``flotilla_session_open`` so that swapping the policy keeps the limits.
"""

from __future__ import annotations


def register_queue_limits(session) -> None:
    names = session.space.names

    def within_limits(queue, job, vec):
        limit = queue.limit_vector
        if limit is None:
            return None
        allocated = queue.allocated
        for r, amount in enumerate(vec):
            if amount and allocated[r] + amount > limit[r]:
                name = names[r]
                return f"queue {queue.name} at its {name} limit {queue.limits[name]:g}"
        return None

    if any(queue.limit_vector is not None for queue in session.queues.values()):
        session.add_queue_admit(within_limits)
