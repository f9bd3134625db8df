"""``ownerfairshare``: per-owner fair share inside a queue (volcano-scheduler.txt's namespace fair share).

Jobs carry an owner: the submitting user (annotation ``flotilla.io/owner``,
which the service stamps on every job it accepts) or the namespace
(``flotilla.io/namespace``), as ``ownerFrom`` chooses. Within a queue, the
owners' jobs interleave by the owners' shares instead of strictly by
submission time: an owner's ``k``-th queued job sorts at ``(running + k) /
weight``, where ``running`` is what the owner already runs in the queue. So
ten jobs of one user are not stuck behind a thousand of another's: with room
for four, each gets two.

Built on the ``job_order`` extension point: the keys are computed once per
cycle when the session opens (one pass and one sort per owner), and allocate
reads them as plain floats.

Args: ``ownerFrom`` (``user``, the default, or ``namespace``), ``weights``
(owner -> positive number, default 1 each), ``default`` (the owner of jobs
without one; default ``""``, one shared anonymous owner).
"""

from __future__ import annotations

from collections import Counter
from typing import Mapping

from flotilla.core.model import NAMESPACE_ANNOTATION, OWNER_ANNOTATION
from flotilla.plugin import hookimpl, take_args

SOURCES = {"user": OWNER_ANNOTATION, "namespace": NAMESPACE_ANNOTATION}


class OwnerFairShare:
    def __init__(self, args: Mapping | None = None):
        taken = take_args(args, ownerFrom="user", weights={}, default="")
        if taken["ownerFrom"] not in SOURCES:
            raise ValueError(f"ownerFrom must be one of {', '.join(SOURCES)}, got {taken['ownerFrom']!r}")
        self.annotation = SOURCES[taken["ownerFrom"]]
        weights = taken["weights"]
        if not isinstance(weights, Mapping):
            raise ValueError("weights must map owners to positive numbers")
        for owner, weight in weights.items():
            if isinstance(weight, bool) or not isinstance(weight, (int, float)) or weight <= 0:
                raise ValueError(f"weights.{owner} must be a positive number, got {weight!r}")
        self.weights = {str(owner): float(weight) for owner, weight in weights.items()}
        self.default = str(taken["default"])

    def owner(self, job) -> str:
        return job.annotations.get(self.annotation, self.default) if job.annotations else self.default

    @hookimpl
    def flotilla_session_open(self, session):
        owner = self.owner
        running = Counter((r.job.queue, owner(r.job)) for r in session.running.values())
        keys: dict[str, float] = {}
        for queue in session.queues.values():
            by_owner: dict[str, list[tuple]] = {}
            for entry in queue.queued.live_entries():   # (priority, submitted, seq, job): the queue's own order
                job = entry[-1]
                by_owner.setdefault(owner(job), []).append((entry[0], entry[1], entry[2], job.id))
            for name, entries in by_owner.items():
                entries.sort()
                weight = self.weights.get(name, 1.0)
                base = running[(queue.name, name)]
                for rank, entry in enumerate(entries, start=1):
                    keys[entry[3]] = (base + rank) / weight
        get = keys.get
        session.add_job_order(lambda job: (get(job.id, 0.0),))
