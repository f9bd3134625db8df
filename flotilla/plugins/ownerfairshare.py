"""``ownerfairshare``: per-owner fair share inside a queue (volcano-scheduler.txt's namespace fair share).

Jobs carry an owner: the submitting user (annotation ``flotilla.io/owner``,
which the service stamps on every job it accepts) or the namespace
(``flotilla.io/namespace``), as ``ownerFrom`` chooses. Within a queue, the
owners' jobs interleave by the owners' usage instead of strictly by
submission time: an owner's ``k``-th queued job sorts at ``(running +
queued) / weight``, where ``running`` is what the owner already runs in the
queue and ``queued`` is what its first ``k`` queued jobs ask for.

What counts is chosen by ``by``:

* ``cost`` (the default): a job's asset cost, the weighted sum of its
  requests with the config's ``resourceWeights`` (those of
  ``assetfairness`` or ``decayedusage``, else Armada's defaults: a core or
  a gpu costs one, memory nothing), the same measure queues' shares are
  reported by. An owner running 6 cores is behind one running nothing for
  6 cores' worth of jobs, not for one job.
* ``jobs``: every job counts one, whatever it asks for. Ten jobs of one
  user are then not stuck behind a thousand of another's: with room for
  four, each gets two.

Built on the ``job_order`` extension point: the keys are computed once per
cycle when the session opens (one pass and one sort per owner), and allocate
reads them as plain floats.

Args: ``by`` (``cost``, the default, or ``jobs``), ``ownerFrom`` (``user``,
the default, or ``namespace``), ``weights`` (owner -> positive number,
default 1 each), ``default`` (the owner of jobs without one; default ``""``,
one shared anonymous owner).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Callable, Mapping

from flotilla.core.model import NAMESPACE_ANNOTATION, OWNER_ANNOTATION
from flotilla.plugin import hookimpl, take_args, weight_vector

SOURCES = {"user": OWNER_ANNOTATION, "namespace": NAMESPACE_ANNOTATION}
MEASURES = ("cost", "jobs")


class OwnerFairShare:
    def __init__(self, args: Mapping | None = None):
        taken = take_args(args, by="cost", ownerFrom="user", weights={}, default="")
        if taken["by"] not in MEASURES:
            raise ValueError(f"by must be one of {', '.join(MEASURES)}, got {taken['by']!r}")
        self.by = taken["by"]
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

    def measure(self, session) -> Callable[[tuple[int, ...]], float]:
        """What a resource vector counts for: its asset cost (``by: cost``) or one (``by: jobs``)."""
        if self.by == "jobs":
            return lambda vec: 1.0
        # The core's own measure (the config's resourceWeights), so owners are ordered by the figure users see.
        w = weight_vector(session, session.settings.share_weights)
        return lambda vec: sum(a * b for a, b in zip(w, vec))

    @hookimpl
    def flotilla_session_open(self, session):
        owner, measure, vector = self.owner, self.measure(session), session.vector
        costs: dict[int, float] = {}

        def cost(job) -> float:
            # Jobs loaded in bulk share their requests mapping: one sum per distinct shape, not per job.
            found = costs.get(id(job.requests))
            if found is None:
                found = costs[id(job.requests)] = measure(vector(job))
            return found

        running: dict[tuple[str, str], float] = defaultdict(float)
        for r in session.running.values():
            running[(r.job.queue, owner(r.job))] += cost(r.job)
        keys: dict[str, float] = {}
        for queue in session.queues.values():
            by_owner: dict[str, list[tuple]] = {}
            for entry in queue.queued.live_entries():   # (priority, submitted, seq, job): the queue's own order
                job = entry[-1]
                by_owner.setdefault(owner(job), []).append((entry[0], entry[1], entry[2], job))
            for name, entries in by_owner.items():
                entries.sort(key=lambda e: e[:3])
                weight = self.weights.get(name, 1.0)
                used = running[(queue.name, name)]
                for entry in entries:
                    job = entry[3]
                    used += cost(job)
                    keys[job.id] = used / weight
        get = keys.get
        session.add_job_order(lambda job: (get(job.id, 0.0),))
