"""The node wishlist (arvados-cloud-scheduling.txt: "Node manager generates wishlist based on container queue").

Given the jobs still waiting after a cycle and the config's
``nodeTemplates`` (node shapes an autoscaler could add, per cluster), say
per template how many of those jobs it would unblock and how many such nodes
would run them all: jobs are taken in queue order (queues by name, each in
its job order), a gang whole or not at all, and packed first fit
decreasing. Jobs that no template could run are listed with the reason.

The answer comes from a session opened on the templates themselves (one
node per template, nothing running), so the config's predicates (selectors,
taints) decide exactly as they do for real nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from flotilla.core.feasibility import never_fits
from flotilla.core.model import ClusterSnapshot, Job, Node, Snapshot


@dataclass(slots=True)
class TemplateWish:
    name: str
    cluster: str
    jobs: int = 0
    nodes: int = 0


@dataclass(slots=True)
class Wishlist:
    templates: list[TemplateWish]
    unfit: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"templates": {t.name: {"cluster": t.cluster, "jobs": t.jobs, "nodes": t.nodes} for t in self.templates},
                "unfit": dict(self.unfit)}


def compute_wishlist(scheduler, snapshot: Snapshot, waiting: Sequence[Job], templates: Sequence[Node]) -> Wishlist:
    """The wishlist for ``waiting`` (the jobs left queued by a cycle on ``snapshot``) over ``templates``."""
    clusters: dict[str, list[Node]] = {}
    for template in templates:
        clusters.setdefault(template.cluster, []).append(template)
    probe = Snapshot([ClusterSnapshot(name, nodes) for name, nodes in clusters.items()], list(waiting),
                     snapshot.queues, snapshot.priority_classes, snapshot.default_priority_class, snapshot.now)
    session = scheduler.open_session(probe)
    index = session.index
    wishes = [TemplateWish(node.name, node.cluster) for node in index.nodes]
    taken: list[list[Job]] = [[] for _ in wishes]   # per template: the jobs it would run, in queue order
    unfit: dict[str, str] = {}
    done_gangs: set[str] = set()

    def fits_template(job: Job, i: int, types: list[int]) -> bool:
        return index.type_of[i] in types and all(a <= f for a, f in zip(session.vector(job), index.allocatable[i]))

    for name in sorted(session.queues):
        for job in session.queued_in_order(session.queues[name]):
            if job.gang is not None:
                if job.gang.id in done_gangs:
                    continue
                done_gangs.add(job.gang.id)
                unit = [m for m in session.gangs[job.gang.id] if m.id not in session.running]
            else:
                unit = [job]
            allowed = [session.allowed_types(member)[0] for member in unit]
            fitting = [i for i in range(len(wishes)) if all(fits_template(m, i, t) for m, t in zip(unit, allowed))]
            if not fitting:
                for member in unit:
                    reason = never_fits(session, member)
                    unfit[member.id] = reason or f"gang {job.gang.id}: no template fits every member"
                continue
            for i in fitting:
                taken[i].extend(unit)
    for i, wish in enumerate(wishes):
        wish.jobs = len(taken[i])
        wish.nodes = first_fit_decreasing([session.vector(job) for job in taken[i]], index.allocatable[i])
    return Wishlist(wishes, unfit)


def first_fit_decreasing(vectors: list[tuple[int, ...]], capacity: tuple[int, ...]) -> int:
    """How many nodes of ``capacity`` hold every vector: largest first (index order), each in the first that fits."""
    nodes: list[list[int]] = []
    for vec in sorted(vectors, reverse=True):
        for free in nodes:
            if all(a <= f for a, f in zip(vec, free)):
                break
        else:
            free = list(capacity)
            nodes.append(free)
        for r, amount in enumerate(vec):
            free[r] -= amount
    return len(nodes)
