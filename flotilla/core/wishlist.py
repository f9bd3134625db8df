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

The same counts per queue (:meth:`Wishlist.by_queue`) let the service show a
user only what their own queues hold: a queue's jobs as the whole pass
credited them, and the nodes those jobs alone would need.

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
from flotilla.core.feasibility import fits_no_node
from flotilla.core.model import ClusterSnapshot, Job, JobState, Node, Snapshot
from flotilla.core.nodeindex import EVICTED, FOREIGN, FOREIGN_USER
from flotilla.core.resources import Vector
from flotilla.core.whynot import nodes_available


@dataclass(slots=True)
class TemplateWish:
    name: str
    cluster: str
    jobs: int = 0
    nodes: int = 0
    #: Per queue: (its jobs credited to the template, the nodes of the template those jobs alone need).
    queues: dict[str, tuple[int, int]] = field(default_factory=dict)


@dataclass(slots=True)
class Wishlist:
    templates: list[TemplateWish]
    unfit: dict[str, str] = field(default_factory=dict)
    #: The queue of each job in ``unfit``.
    unfit_queues: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"templates": {t.name: {"cluster": t.cluster, "jobs": t.jobs, "nodes": t.nodes} for t in self.templates},
                "unfit": dict(self.unfit)}

    def by_queue(self) -> dict[str, dict]:
        """``{queue: {"templates": {name: {cluster, jobs, nodes}}, "unfit": {job: reason}}}`` for every queue with
        a job credited to a template or unfit (``nodes``: what that queue's credited jobs alone need)."""
        out: dict[str, dict] = {}
        for t in self.templates:
            for queue, (jobs, nodes) in t.queues.items():
                entry = out.setdefault(queue, {"templates": {}, "unfit": {}})
                entry["templates"][t.name] = {"cluster": t.cluster, "jobs": jobs, "nodes": nodes}
        for job_id, reason in self.unfit.items():
            out.setdefault(self.unfit_queues[job_id], {"templates": {}, "unfit": {}})["unfit"][job_id] = reason
        return out


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
    for p in positions:   # a template node is a shape, not room: the node search must never offer it
        index.bind(p, _TEMPLATE_HOLDER, FOREIGN_USER, index.allocatable[p], FOREIGN)
    units = [(unit, [session.vector(m) for m in unit], [session.allowed_types(m)[0] for m in unit])
             for unit in _units(session)]
    placed_somewhere = [False] * len(units)
    wishes = []
    for template, p in zip(templates, positions):
        room = _Room(session, template.cluster, p)
        for u, (unit, vecs, allowed) in enumerate(units):
            if room.place(unit, vecs, allowed):
                placed_somewhere[u] = True
        room.give_back()
        wishes.append(TemplateWish(template.name, template.cluster, room.jobs,
                                   first_fit_decreasing(room.new, room.capacity),
                                   {queue: (jobs, first_fit_decreasing(new, room.capacity))
                                    for queue, (jobs, new) in room.by_queue.items()}))
    unfit: dict[str, str] = {}
    unfit_queues: dict[str, str] = {}
    for (unit, vecs, allowed), placed in zip(units, placed_somewhere):
        if not placed:
            for member, vec, types in zip(unit, vecs, allowed):
                unfit_queues[member.id] = member.queue
                why = _no_template(session, member, vec, types, positions)   # a report: its words
                unfit[member.id] = (str(why) if why else
                                    f"gang {member.gang.id if member.gang else member.id}: no template fits "
                                    f"every member with the free room")
    return Wishlist(wishes, unfit, unfit_queues)


#: What holds a template node's room in the probe's index (``FOREIGN_USER`` usage: no job id has a NUL).
_TEMPLATE_HOLDER = f"{FOREIGN_USER}/template"


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
        + started.get(cluster.name, []), dict(cluster.foreign), dict(cluster.foreign_pods), volumes=cluster.volumes,
        namespace_labels=cluster.namespace_labels)
        for cluster in snapshot.clusters}
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
    """One template's pass: the existing nodes' free room its jobs take (bound in the probe's index, given back
    at the end), the jobs it unblocks and the requests its new nodes would hold."""

    def __init__(self, session, cluster: str, position: int):
        self.session = session
        self.index = session.index
        self.cluster = cluster
        self.position = position
        self.capacity: Vector = self.index.allocatable[position]
        self.jobs = 0
        self.new: list[Vector] = []
        #: Per queue: its jobs credited, and the requests of theirs that need new nodes.
        self.by_queue: dict[str, tuple[int, list[Vector]]] = {}
        #: ``(node, job)`` for every job this pass put in free room, to give the room back.
        self.taken: list[tuple[int, Job]] = []
        self._cluster_types: dict[int, list[int]] = {}
        #: Room only shrinks in a pass, except when a unit that did not fit gives back what it took (each such
        #: return counts one here): a request that found no room stays without until the next return.
        self._returns = 0
        self._no_room: dict[tuple, int] = {}

    def place(self, unit: list[Job], vecs: list[Vector], allowed: list[list[int]]) -> bool:
        """Put ``unit`` in free room, the rest on new nodes of the template; False (nothing taken) when some
        member fits neither. The template is credited with the unit only if some member needs a new node."""
        mark = len(self.taken)
        new: list[Vector] = []
        type_of = self.index.type_of
        for k in sorted(range(len(unit)), key=vecs.__getitem__, reverse=True):
            job, vec, types = unit[k], vecs[k], allowed[k]
            i = self._existing(job, vec, types)
            if i is not None:
                self._bind(i, job, vec)
            elif type_of[self.position] in types and all(a <= c for a, c in zip(vec, self.capacity)):
                new.append(vec)
            else:
                self._unbind(mark)
                return False
        if new:
            self.new.extend(new)
            self.jobs += len(unit)
            jobs, vectors = self.by_queue.get(unit[0].queue, (0, []))
            vectors.extend(new)
            self.by_queue[unit[0].queue] = (jobs + len(unit), vectors)
        return True

    def give_back(self) -> None:
        """Undo every placement of this pass: the index is as the probe opened it, for the next template."""
        self._unbind(0)

    def _existing(self, job: Job, vec: Vector, types: list[int]) -> int | None:
        """An existing node of the cluster with room for ``job`` left (the smallest that fits), or None."""
        session, index = self.session, self.index
        types = self._in_cluster(types)
        if not session.node_checked(job):
            key = (vec, id(types))
            if self._no_room.get(key) == self._returns:
                return None
            found = index.find(vec, EVICTED, types, "any", job.queue)
            if found is None:
                self._no_room[key] = self._returns
            return found
        for i in index.iter_fitting(vec, EVICTED, types):
            if session.node_allowed(job, i):
                return i
        return None

    def _bind(self, i: int, job: Job, vec: Vector) -> None:
        self.index.bind(i, job.id, job.queue, vec, self.session.job_level(job))
        if job.host_ports:
            self.session.state.ports.add(i, job.id, job.host_ports)
        self.session.state.pods.add(i, job)
        self.taken.append((i, job))

    def _unbind(self, mark: int) -> None:
        """Take off every job placed since ``taken[mark]``, last first."""
        if len(self.taken) > mark:
            self._returns += 1
        while len(self.taken) > mark:
            i, job = self.taken.pop()
            self.index.unbind(i, job.id)
            if job.host_ports:
                self.session.state.ports.remove(i, job.id, job.host_ports)
            self.session.state.pods.remove(job.id)

    def _in_cluster(self, types: list[int]) -> list[int]:
        found = self._cluster_types.get(id(types))   # allowed_types interns equal lists: one object each
        if found is None:
            found = self._cluster_types[id(types)] = [t for t in types if self.index.types[t].cluster == self.cluster]
        return found


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
        return nodes_available(0, refusals)
    return fits_no_node(session, vec, fitting)


def first_fit_decreasing(vectors: list[tuple[int, ...]], capacity: tuple[int, ...]) -> int:
    """How many nodes of ``capacity`` hold every vector: largest first (index order), each in the first that fits.

    Equal vectors come one after another, and the nodes before the one the
    previous of them took could not hold it then and hold less now: the
    search for the next starts there, so a few job shapes over thousands of
    nodes cost a pass per shape, not per job.
    """
    nodes: list[list[int]] = []
    previous: tuple[int, ...] | None = None
    start = 0
    for vec in sorted(vectors, reverse=True):
        if vec != previous:
            previous, start = vec, 0
        for n in range(start, len(nodes)):
            free = nodes[n]
            if all(a <= f for a, f in zip(vec, free)):
                break
        else:
            free = list(capacity)
            nodes.append(free)
            n = len(nodes) - 1
        start = n
        for r, amount in enumerate(vec):
            free[r] -= amount
    return len(nodes)
