"""What one cycle decided, in the shape every consumer shares.

``schedule-once`` prints it, the simulator and the service apply it, and the
``lease`` action hands it to cluster backends. Reasons for jobs left queued
are produced on demand: a cycle over a million queued jobs should not build
a million strings nobody reads. ``why`` gives a job's reason as data (its
code is what metrics count); ``explain`` its words, for people.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable

from flotilla.core.model import Job


@dataclass(frozen=True, slots=True)
class Placement:
    job: Job
    cluster: str
    node: str
    #: What the placement chose for the job's unbound claims: ``(claim, PV)``, PV empty to provision
    #: (:mod:`flotilla.core.volumes`); the backend binds them before the pod.
    volumes: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class QueueReport:
    name: str
    weight: float
    fair_share: float
    share: float
    allocated: dict[str, str]
    parent: str | None = None


def natural_key(text: str) -> tuple:
    """Sort ``a-2`` before ``a-10``: digits compare as numbers."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text))


@dataclass(slots=False)
class Decisions:
    scheduled: list[Placement]
    preempted: list[Job]
    queued: list[Job]
    queues: dict[str, QueueReport]
    explain: Callable[[Job], str] = field(repr=False, default=lambda job: "")
    #: A queued job's reason as data (:class:`~flotilla.core.reasons.Reason`, or a plugin's words).
    why: Callable[[Job], object] = field(repr=False, default=lambda job: "")
    timings: dict[str, float] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)
    #: Per queue, the head of what stays queued in the order the queue offers it next, and whether more follow
    #: (:meth:`~flotilla.core.session.Session.queue_heads`); only when the cycle was asked for them.
    heads: dict[str, tuple[list[Job], bool]] = field(default_factory=dict)
    #: Plugin failures of the cycle: (plugin, point, error) -> how many times (:mod:`flotilla.core.extensions`).
    plugin_errors: dict[tuple[str, str, str], int] = field(default_factory=dict)
    #: The earliest time after this cycle's at which an action or plugin may decide otherwise by time alone (a
    #: reservation's ``after`` running out, say), None for none: a simulation's clock jumps no further.
    wake: float | None = None

    @cached_property
    def reasons(self) -> dict[str, str]:
        """One short reason per job left queued."""
        return {job.id: self.explain(job) for job in self.queued}

    def by_cluster(self) -> dict[str, tuple[list[Placement], list[Job]]]:
        """Starts and preemptions grouped per cluster, for the lease action."""
        out: dict[str, tuple[list[Placement], list[Job]]] = {}
        for placement in self.scheduled:
            out.setdefault(placement.cluster, ([], []))[0].append(placement)
        for job in self.preempted:
            out.setdefault(job.cluster or "", ([], []))[1].append(job)
        return out

    def to_dict(self) -> dict:
        """The ``schedule-once`` output (spec section 3), in a stable order."""
        return {
            "scheduled": [{"job": p.job.id, "cluster": p.cluster, "node": p.node} for p in self.scheduled],
            "preempted": sorted((job.id for job in self.preempted), key=natural_key),
            "queued": sorted((job.id for job in self.queued), key=natural_key),
            "reasons": {job_id: self.reasons[job_id] for job_id in sorted(self.reasons, key=natural_key)},
            "queues": {
                name: {"fairShare": round(q.fair_share, 6), "share": round(q.share, 6), "allocated": q.allocated,
                       **({"parent": q.parent} if q.parent is not None else {})}
                for name, q in sorted(self.queues.items())
            },
        }
