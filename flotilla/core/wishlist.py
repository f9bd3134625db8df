"""The node wishlist (arvados-cloud-scheduling.txt: "Node manager generates wishlist based on container queue").

Given the jobs still waiting after a cycle and the config's
``nodeTemplates`` (node shapes an autoscaler could add, per cluster), say
per template how many of those jobs it would unblock and how many such nodes
would run them all. Each template is judged alone, as if it were the only
shape that could be added:

* jobs are taken in queue order (queues by name, each in its job order), a
  gang whole or not at all, and on the template's cluster only (a gang never
  spans clusters);
* a job first takes the free room left on the cluster's existing nodes after
  the cycle (its selectors, taints, affinity and host ports checked as for
  any placement); only what does not fit there needs new nodes. A gang of
  three 6-core jobs beside a node with 6 cores free needs one new 16-core
  node, not two. A job that fits wholly in free room is waiting for
  something else (a queue limit, a reservation, its turn) and no template
  is credited with it; it still takes that room from the jobs behind it;
* the jobs that need new nodes are packed onto them first fit decreasing.

Jobs that no template could run, even with the free room, are listed with
the reason.

The answer comes from a session opened on the clusters as the cycle leaves
them (its placements running, its preemptions gone) with one node per
template added, so the config's predicates decide exactly as they do for
real nodes.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from flotilla.core.decisions import Placement
from flotilla.core.model import ClusterSnapshot, Job, JobState, Node, Snapshot
from flotilla.core.nodeindex import EVICTED
from flotilla.core.quantities import format_quantity
from flotilla.core.resources import Vector


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


def compute_wishlist(scheduler, snapshot: Snapshot, waiting: Sequence[Job], templates: Sequence[Node],
                     scheduled: Sequence[Placement] = (), preempted: Iterable[Job] = ()) -> Wishlist:
    """The wishlist for ``waiting`` (the jobs left queued by a cycle on ``snapshot``) over ``templates``.

    ``scheduled`` and ``preempted`` are that cycle's decisions: the free room
    counted is what the nodes have once they are carried out.
    """
    probe, names = _probe(snapshot, waiting, templates, scheduled, preempted)
    session = scheduler.open_session(probe)
    index = session.index
    positions = [index.position[(template.cluster, name)] for template, name in zip(templates, names)]
    rooms = [_Room(session, template, p, set(positions)) for template, p in zip(templates, positions)]
    unfit: dict[str, str] = {}
    for unit in _units(session):
        vecs = [session.vector(member) for member in unit]
        allowed = [session.allowed_types(member)[0] for member in unit]
        outcomes = [room.place(unit, vecs, allowed) for room in rooms]
        if all(outcome is None for outcome in outcomes):
            for member, vec, types in zip(unit, vecs, allowed):
                unfit[member.id] = (_no_template(session, member, vec, types, positions)
                                    or f"gang {member.gang.id if member.gang else member.id}: no template fits "
                                       f"every member with the free room")
    wishes = [TemplateWish(template.name, template.cluster, room.jobs, first_fit_decreasing(room.new, room.capacity))
              for template, room in zip(templates, rooms)]
    return Wishlist(wishes, unfit)


def _probe(snapshot: Snapshot, waiting: Sequence[Job], templates: Sequence[Node], scheduled: Sequence[Placement],
           preempted: Iterable[Job]) -> tuple[Snapshot, list[str]]:
    """The clusters after the cycle's decisions, one node per template added; and each template node's name.

    A template whose name is taken by a node of its cluster gets primes
    appended (``cpu-16'``): a name no Kubernetes node can have.
    """
    gone = {job.id for job in preempted}
    started: dict[str, list[Job]] = {}
    for placement in scheduled:
        started.setdefault(placement.cluster, []).append(dataclasses.replace(
            placement.job, state=JobState.RUNNING, cluster=placement.cluster, node=placement.node))
    clusters = {cluster.name: ClusterSnapshot(
        cluster.name, list(cluster.nodes), [job for job in cluster.running if job.id not in gone]
        + started.get(cluster.name, []), dict(cluster.foreign)) for cluster in snapshot.clusters}
    names = []
    for template in templates:
        cluster = clusters.setdefault(template.cluster, ClusterSnapshot(template.cluster, []))
        taken = {node.name for node in cluster.nodes}
        name = template.name
        while name in taken:
            name += "'"
        names.append(name)
        cluster.nodes.append(dataclasses.replace(template, name=name, resources=dict(template.resources)))
    probe = Snapshot(list(clusters.values()), list(waiting), snapshot.queues, snapshot.priority_classes,
                     snapshot.default_priority_class, snapshot.now)
    return probe, names


def _units(session) -> Iterable[list[Job]]:
    """The waiting jobs in queue order, a gang's waiting members together at its first one's place."""
    done_gangs: set[str] = set()
    for name in sorted(session.queues):
        for job in session.queued_in_order(session.queues[name]):
            if job.gang is None:
                yield [job]
            elif job.gang.id not in done_gangs:
                done_gangs.add(job.gang.id)
                yield [m for m in session.gangs[job.gang.id] if m.id not in session.running]


class _Room:
    """One template's account: the free room it leaves on its cluster's existing nodes, the jobs it unblocks
    and the requests its new nodes would hold."""

    def __init__(self, session, template: Node, position: int, template_positions: set[int]):
        self.session = session
        self.index = session.index
        self.cluster = template.cluster
        self.position = position
        self.capacity: Vector = self.index.allocatable[position]
        self.templates = template_positions
        self.level = self.index.level_of[EVICTED]
        #: Existing nodes' free room where this account has taken some (else the index's free row holds).
        self.free: dict[int, list[int]] = {}
        #: Host ports this account's jobs bind, per existing node.
        self.ports: set[tuple[int, str, int]] = set()
        self.jobs = 0
        self.new: list[Vector] = []
        self._cluster_types: dict[int, list[int]] = {}

    def place(self, unit: list[Job], vecs: list[Vector], allowed: list[list[int]]) -> int | None:
        """Put ``unit`` in free room and on new nodes of the template: how many members need a new node.

        None (and nothing taken) when some member fits neither; 0 when the
        free room holds it all (the template is not credited with it).
        """
        taken: list[tuple[int, Vector, Job]] = []
        new: list[Vector] = []
        type_of = self.index.type_of
        for k in sorted(range(len(unit)), key=vecs.__getitem__, reverse=True):
            job, vec, types = unit[k], vecs[k], allowed[k]
            i = self._existing(job, vec, types)
            if i is not None:
                self._take(i, vec, job, -1)
                taken.append((i, vec, job))
            elif type_of[self.position] in types and all(a <= c for a, c in zip(vec, self.capacity)):
                new.append(vec)
            else:
                for i, vec, job in taken:
                    self._take(i, vec, job, 1)
                return None
        if new:
            self.new.extend(new)
            self.jobs += len(unit)
        return len(new)

    def _existing(self, job: Job, vec: Vector, types: list[int]) -> int | None:
        """An existing node of the cluster with room for ``job`` left, or None."""
        index, free, ports = self.index, self.free, job.host_ports
        check = bool(ports) or bool(self.session.node_filter_fns)
        for i in index.iter_fitting(vec, EVICTED, self._in_cluster(types)):
            if i in self.templates:
                continue
            row = free.get(i)
            if row is not None and any(a > f for a, f in zip(vec, row)):
                continue
            if check and (not self.session.node_allowed(job, i)
                          or any((i, protocol, port) in self.ports for protocol, port in ports)):
                continue
            return i
        return None

    def _in_cluster(self, types: list[int]) -> list[int]:
        found = self._cluster_types.get(id(types))   # allowed_types interns equal lists: one object each
        if found is None:
            found = self._cluster_types[id(types)] = [t for t in types if self.index.types[t].cluster == self.cluster]
        return found

    def _take(self, i: int, vec: Vector, job: Job, sign: int) -> None:
        row = self.free.get(i)
        if row is None:
            row = self.free[i] = list(self.index.free[i][self.level])
        for r, amount in enumerate(vec):
            row[r] += sign * amount
        for protocol, port in job.host_ports:
            (self.ports.add if sign < 0 else self.ports.discard)((i, protocol, port))


def _no_template(session, job: Job, vec: Vector, types: list[int], positions: list[int]) -> str | None:
    """Why no template could run ``job`` even as an empty node, or None if one could."""
    index = session.index
    allowed = set(types)
    fitting = [p for p in positions if index.type_of[p] in allowed]
    if not fitting:
        refusals: Counter[str] = Counter()
        for p in positions:
            node_type = index.types[index.type_of[p]]
            for fn in session.predicate_fns:
                reason = fn(job, node_type)
                if reason:
                    refusals[reason] += 1
                    break
        detail = ", ".join(f"{count} {reason}" for reason, count in sorted(refusals.items(), key=lambda kv: (-kv[1], kv[0])))
        return f"0/{len(positions)} nodes match: {detail}"
    largest = [0] * len(vec)
    for p in fitting:
        alloc = index.allocatable[p]
        if all(a <= f for a, f in zip(vec, alloc)):
            return None
        largest = [max(m, f) for m, f in zip(largest, alloc)]
    names = session.space.names
    short = [f"{names[r]} {format_quantity(a, names[r])} > largest {format_quantity(largest[r], names[r])}"
             for r, a in enumerate(vec) if a > largest[r]]
    return "fits no node: " + (", ".join(short) or "no single node has all of " +
                               ", ".join(f"{n} {format_quantity(a, n)}" for n, a in zip(names, vec) if a))


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
