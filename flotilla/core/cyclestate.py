"""What a scheduler keeps between cycles, brought up to date from each snapshot.

Rebuilding everything from each snapshot (the node index's sorted lists per
level, type and owner, every running job bound into it, every queue's order)
would be most of a long simulation's run. A
:class:`CycleState` keeps all of it and, at each :meth:`CycleState.sync`,
applies only what differs from the snapshot:

* running jobs started, finished, preempted, moved or changed (found by
  identity first, in C-level passes, then by id);
* queued jobs added or gone (each queue's :class:`JobQueue` takes them);
* foreign usage per node; queue weights and limits;
* nodes added, removed, relabelled, tainted, cordoned or resized (the
  index changes in place, see :meth:`CycleState._check_nodes`);
* label keys jobs select on (the index's types split or merge when the
  first job selecting on a key comes or the last one goes);
* anything structural (a new resource name, other priority classes or
  clusters, existing nodes in another order) rebuilds from scratch, which is
  also how the first cycle starts.

A session is an overlay on this state: its statements change the index
directly and are committed or discarded. When the cycle ends,
:meth:`CycleState.commit_cycle` records what it decided (placements become
running jobs, preemptions leave), so the state predicts the next snapshot and
the next sync has nothing to do when the clusters did what was decided.

Contract with snapshot producers: nodes and jobs are not changed in place; a
changed node or job is a new object (the backends and the store copies
already work that way). Ties in job order (same priority and submission
time) go to the job first seen, which is the snapshot order when the
producer appends new jobs at the end.

``tests/core/test_cycle_state.py`` runs cycles with random changes and compares,
after every one, this state and its decisions with a fresh rebuild.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field
from itertools import chain, compress, count, groupby, islice
from operator import attrgetter, is_, itemgetter, le, not_
from typing import Callable, Sequence

from flotilla.core.hostports import HostPorts
from flotilla.core.podplacements import PodPlacements
from flotilla.core.model import Job, PriorityClass, Snapshot
from flotilla.core.nodeindex import EVICTED, FOREIGN, FOREIGN_USER, NONPREEMPTIBLE, NodeIndex
from flotilla.core.jobqueue import JobQueue
from flotilla.core.queuetree import assign_fair_shares, charge, link
from flotilla.core.resources import ResourceSpace, Vector

_ID = attrgetter("id")
_NODE = attrgetter("node")
_REQUESTS = attrgetter("requests")
_SELECTOR = attrgetter("node_selector")
_AFFINITY = attrgetter("affinity")
_GANG = attrgetter("gang")
_CLAIMS = attrgetter("claims")
_PRIORITY = attrgetter("priority")
_QUEUE = attrgetter("queue")
_CLASS = attrgetter("priority_class")
_SUBMITTED = attrgetter("submitted")
_LAST = itemgetter(-1)


def volume_keys(snapshot: Snapshot) -> frozenset[str]:
    """The node label keys the clusters' volumes read (:mod:`flotilla.core.volumes`)."""
    keys: frozenset[str] = frozenset()
    for cluster in snapshot.clusters:
        if cluster.volumes is not None:
            keys |= cluster.volumes.label_keys
    return keys


@dataclass(slots=True, eq=False)
class QueueState:
    """A queue as the session sees it: weight, fair share, what it holds, its queued jobs in order.

    In a queue tree, an inner queue's ``allocated`` is the sum of its
    leaves'; ``chain`` is the queue itself, then its ancestors up to the top.
    """

    name: str
    weight: float
    limits: dict[str, float]
    allocated: list[int]
    limit_vector: Vector | None = None
    fair_share: float = 0.0
    queued: JobQueue = field(default_factory=JobQueue)
    running: int = 0
    parent: str | None = None
    children: list[QueueState] = field(default_factory=list)
    chain: tuple[QueueState, ...] = ()

    @property
    def active(self) -> bool:
        return bool(self.queued) or self.running > 0


@dataclass(slots=True, eq=False)
class RunningJob:
    job: Job
    node: int
    vec: Vector
    level: int


class Rebuild(Exception):
    """The snapshot differs in structure: the state is rebuilt from scratch."""


#: Stands for "no value yet" where ``None`` is a value (a job's priority class may be None).
_NOTHING = object()


def _less_placed(last: list[Job], queued: list[Job], placed: set[int]) -> bool:
    """Whether ``queued`` is ``last`` less the jobs whose ``id()`` is in ``placed``, object by object.

    Placed jobs are the heads of their queues, so they lie early in ``last``:
    a suffix of ``queued`` that matches ``last`` shifted by their number is
    found by probing at doubling lengths (a probe that starts too early fails
    at its first job) and checked in one identity pass; only the part before
    it is filtered by ``id()`` (which makes an int per job, the dearest step).
    """
    shift = len(last) - len(queued)
    if shift != len(placed):
        return False
    n = len(queued)
    start = 1
    while start < n and not all(map(is_, islice(last, start + shift, None), islice(queued, start, None))):
        start *= 2
    start = min(start, n)
    head = last[:start + shift]
    kept = list(compress(head, map(not_, map(placed.__contains__, map(id, head)))))
    return len(kept) == start and all(map(is_, kept, queued))


def job_level(classes: dict[str, PriorityClass], default: str, job: Job) -> int:
    pc = classes[job.priority_class or default]
    return pc.priority if pc.preemptible else NONPREEMPTIBLE


def _gangs_of(members) -> dict[str, list[Job]]:
    """Gang members (jobs with a gang, in order) grouped by gang id."""
    gangs: dict[str, list[Job]] = {}
    for job in members:
        gangs.setdefault(job.gang.id, []).append(job)
    return gangs


class CycleState:
    """The node index, running jobs, queues and their orders, kept between cycles (see the module docstring)."""

    def __init__(self) -> None:
        self.index: NodeIndex | None = None
        self.rebuilds = 0
        self.syncs = 0
        self.stopped_running: list[str] = []
        self._before_change: list[Callable[[], None]] = []

    def before_next_change(self, fn: Callable[[], None]) -> None:
        """Call ``fn`` once, before the next sync changes anything (a closed session words what it explains)."""
        self._before_change.append(fn)

    # -- bringing up to date ----------------------------------------------------------
    def sync(self, snapshot: Snapshot, indexed_resources: Sequence[str]) -> None:
        """Make the state describe ``snapshot``: incrementally when only jobs and usage changed."""
        waiting, self._before_change = self._before_change, []
        for fn in waiting:
            fn()
        self.syncs += 1
        self.classes = {pc.name: pc for pc in snapshot.priority_classes}
        self.default_class = snapshot.default_priority_class
        #: Ids of the jobs held as running that the snapshot no longer shows running (finished, failed, or back
        #: in their queue), as this sync found them; empty after a rebuild, which keeps no history.
        self.stopped_running: list[str] = []
        if self.index is not None:
            self.pods.prune()
            try:
                self._update(snapshot, tuple(indexed_resources))
                labels = snapshot.namespace_labels()
                if labels or self.pods.namespace_labels:   # nothing to do while none are known
                    self.pods.set_namespace_labels(labels)
                return
            except Rebuild:
                pass
        self._rebuild(snapshot, tuple(indexed_resources))
        self.pods.set_namespace_labels(snapshot.namespace_labels())

    def _structure(self, snapshot: Snapshot, indexed_resources: tuple) -> tuple:
        return (indexed_resources, tuple(sorted((pc.name, pc.priority, pc.preemptible)
                                                for pc in snapshot.priority_classes)),
                snapshot.default_priority_class, tuple(cluster.name for cluster in snapshot.clusters))

    def _rebuild(self, snapshot: Snapshot, indexed_resources: tuple) -> None:
        self.rebuilds += 1
        self.index = None  # a failure below leaves no half-built state behind
        self.structure = self._structure(snapshot, indexed_resources)
        nodes = [node for cluster in snapshot.clusters for node in cluster.nodes]
        running_jobs = snapshot.running()
        resource_names: set[str] = set()
        for node in nodes:
            resource_names.update(node.resources)
        every_job = running_jobs + snapshot.queued
        # Distinct request and selector mappings, gathered by identity in C loops (a million jobs share a few).
        # Jobs loaded in bulk share one mapping in long runs: a run's first is enough, then distinct by identity.
        requests = [next(run) for _, run in groupby(map(_REQUESTS, every_job), id)]
        for mapping in dict(zip(map(id, requests), requests)).values():
            resource_names.update(mapping)
        selectors = list(filter(None, map(_SELECTOR, every_job)))
        #: Label key -> how many held jobs (running or queued) select on it: the index's indexed labels.
        self.label_uses: Counter[str] = Counter()
        distinct = dict(zip(map(id, selectors), selectors))
        for key, number in Counter(map(id, selectors)).items():
            for label in distinct[key]:
                self.label_uses[label] += number
        # Node affinities (rare): the label keys their terms read, and the node's name for matchFields.
        affinities = Counter(filter(None, map(_AFFINITY, every_job)))
        #: How many held jobs (running or queued) have a node affinity.
        self.affinity_jobs = sum(affinities.values())
        for affinity, number in affinities.items():
            for label in affinity.label_keys:
                self.label_uses[label] += number
        # Gang members, running first then queued (one pass serves the gangs below and their labels).
        gang_jobs = list(filter(_GANG, every_job))
        # Topology gangs' uniformity labels: each domain is then a set of node types.
        for job in gang_jobs:
            if job.gang.uniformity_label:
                self.label_uses[job.gang.uniformity_label] += 1
        #: How many held jobs (running or queued) name a claim; while some do, the label keys the clusters'
        #: volumes read are indexed too (flotilla.core.volumes).
        self.claim_jobs = sum(1 for _ in filter(None, map(_CLAIMS, every_job)))
        self.volume_keys = volume_keys(snapshot) if self.claim_jobs else frozenset()
        selector_keys = set(self.label_uses) | self.volume_keys
        self._labels_changed = False
        space = ResourceSpace(resource_names, indexed_resources)
        levels = [pc.priority for pc in snapshot.priority_classes]
        index = NodeIndex(space, nodes, levels, selector_keys)
        self.space = space
        self.selector_keys = selector_keys
        self.pool: Vector = tuple(sum(col) for col in zip(*index.allocatable)) if nodes else space.zero
        self.nodes = [list(cluster.nodes) for cluster in snapshot.clusters]
        self.foreign = [dict(cluster.foreign) for cluster in snapshot.clusters]
        self.foreign_ports = [dict(cluster.foreign_ports) for cluster in snapshot.clusters]

        self.queues: dict[str, QueueState] = {}
        for queue in sorted(snapshot.queues, key=lambda q: q.name):
            self.queues[queue.name] = QueueState(queue.name, queue.weight, dict(queue.limits), [0] * len(space),
                                                 parent=queue.parent)
        self.nested = link(self.queues)
        self._set_limits(snapshot)

        # Running jobs, bound in bulk before the index builds its sorted lists.
        #: Host ports held per node (only jobs that bind some are in it; see flotilla.core.hostports).
        self.ports = HostPorts()
        #: Every pod bound to a node, counted for pod rules (see flotilla.core.podplacements).
        self.pods = PodPlacements(index)
        self.foreign_pods = [dict(cluster.foreign_pods) for cluster in snapshot.clusters]
        self.running: dict[str, RunningJob] = {}
        self.running_jobs: dict[str, Job] = {}
        for cluster in snapshot.clusters:
            for node_name, requests in cluster.foreign.items():
                i = index.position[(cluster.name, node_name)]
                index.preload(i, f"{FOREIGN_USER}/{node_name}", FOREIGN_USER, space.usage(requests), FOREIGN)
            for node_name, pods in cluster.foreign_pods.items():
                i = index.position[(cluster.name, node_name)]
                for pod in pods:
                    self.pods.add(i, pod)
            for node_name, ports in cluster.foreign_ports.items():
                self.ports.add(index.position[(cluster.name, node_name)], f"{FOREIGN_USER}/{node_name}", ports)
            for job in cluster.running:
                i = index.position[(cluster.name, job.node)]
                vec = space.vector(job.requests)
                level = job_level(self.classes, self.default_class, job)
                index.preload(i, job.id, job.queue, vec, level)
                self._hold(job, i, vec, level)
        index.build()

        queued = snapshot.queued
        #: id(job) -> the job's live entry, or the job itself until its entry is made (the queues' orders
        #: share it). Keyed by the job object's identity (an int: no string hashing for a million ids), which
        #: is also what the next sync compares; the value keeps its job alive, so the key cannot be reused.
        #: Filled when a sync first needs it (:meth:`_fill_entries`): until jobs are added or gone, every
        #: job in the queues' orders is live, and cycles that only place jobs or change nothing never ask.
        self.entries: dict[int, object] = {}
        self.entries_filled = False
        self.seq = len(queued)
        per_queue: dict[str, list] = {name: [] for name in self.queues}
        queue_names = list(map(_QUEUE, queued))
        # Grouped by queue in C: list.append(per_queue[name], job) for every job, consumed by a zero-length deque.
        deque(map(list.append, map(per_queue.__getitem__, queue_names), queued), maxlen=0)
        # Jobs listed as submitted (the usual case): a queue's order is its jobs by priority, a stable sort that
        # keeps submission order within one priority (none at all when every job has the same priority). Such
        # a queue keeps its jobs as they are and makes an entry only for what a cycle reads (JobQueue.lazy).
        submitted = list(map(_SUBMITTED, queued))
        in_order = all(map(le, submitted, islice(submitted, 1, None)))
        del submitted
        priorities = set(map(_PRIORITY, queued)) if in_order else ()
        # Jobs per priority class and queue: when all jobs have one class (the usual case), each queue's count
        # is its length, found without a (queue, class) pair per job.
        class_names = set(map(_CLASS, queued))
        if len(class_names) == 1:
            only = class_names.pop()
            per_class = {name: Counter({only: len(jobs)} if jobs else {}) for name, jobs in per_queue.items()}
        else:
            per_class = {name: Counter() for name in per_queue}
            for (name, class_name), number in Counter(zip(queue_names, map(_CLASS, queued))).items():
                per_class[name][class_name] = number
        del queue_names
        for name, jobs in per_queue.items():
            if in_order:
                if len(priorities) > 1:
                    jobs.sort(key=_PRIORITY)
                order = JobQueue(self.entries, None, per_class[name], lazy=jobs)
            else:
                # Entries (priority, submitted, seq, job), seq the position in the queue: a heap, built in C.
                order = JobQueue(self.entries, list(zip(map(_PRIORITY, jobs), map(_SUBMITTED, jobs), count(),
                                                          jobs)), per_class[name])
            self.queues[name].queued = order
        del per_queue
        self._set_fair_shares()
        self.gangs = _gangs_of(gang_jobs)
        self._gangs_stale = False
        self.placed_entries: dict[str, tuple] = {}
        #: The queued jobs as of the last sync, while ``entries`` holds exactly them (a cycle that places
        #: jobs takes their entries out and clears this).
        self.queued_as_synced: list[Job] | None = list(queued)
        #: id() of the job objects the last cycle placed, taken out of the queues (None: none).
        self.queued_placed: set[int] | None = None
        self.index = index

    def _update(self, snapshot: Snapshot, indexed_resources: tuple) -> None:
        if self._structure(snapshot, indexed_resources) != self.structure:
            raise Rebuild
        self._check_nodes(snapshot)
        self._sync_queue_names(snapshot)
        index, space = self.index, self.space
        position = index.position

        # What changed, found before anything is touched (a new resource name or label key rebuilds).
        running_get = self.running_jobs.get
        changed_running: list[Job] = []
        changed_clusters: list[str] = []  # the cluster of each changed running job
        seen = 0
        for cluster in snapshot.clusters:
            jobs = cluster.running
            same = list(map(is_, map(running_get, map(_ID, jobs)), jobs))
            if all(same):
                seen += len(jobs)
                continue
            seen += sum(same)
            before = len(changed_running)
            changed_running.extend(compress(jobs, map(not_, same)))
            changed_clusters.extend([cluster.name] * (len(changed_running) - before))
        gone_running: list[str] = []
        # Jobs already held (typically the last cycle's placements, now running as new objects) are cheap.
        changed_ids = list(map(_ID, changed_running))
        held_before = sum(map(self.running.__contains__, changed_ids))
        if seen + held_before != len(self.running) or \
                len(set(changed_ids)) != len(changed_ids):
            present = {job.id for cluster in snapshot.clusters for job in cluster.running}
            gone_running = [job_id for job_id in self.running if job_id not in present]

        queued = snapshot.queued
        added: list[Job] = []
        gone_queued: list[int] = []
        last = self.queued_as_synced
        if last is not None and self.queued_placed:
            # The last cycle's placements left the queues: the snapshot should list the rest in the same order.
            last = list(queued) if _less_placed(last, queued, self.queued_placed) else None
        self.queued_placed = None
        # Nothing queued changed since the last sync (an idle cycle, or only the last placements gone): the same
        # objects in the same order, found in one C-level identity pass instead of a lookup per queued job.
        if last is not None and len(last) == len(queued) and all(map(is_, last, queued)):
            synced = last
        else:
            synced = list(queued)
            self._fill_entries()
            same = list(map(self.entries.__contains__, map(id, queued)))
            if not all(same):
                added = list(compress(queued, map(not_, same)))
            if sum(same) != len(self.entries):  # a job replaced by a new object is gone, its new object added
                present = set(map(id, queued))
                gone_queued = [key for key in self.entries if key not in present]
        del last
        # When most of it changed (another workload on the same nodes), building afresh is cheaper.
        slack = len(index.nodes) + 64
        if 2 * (len(gone_running) + len(changed_running) - held_before) > len(self.running) + slack or \
                2 * (len(gone_queued) + len(added)) > len(self.entries) + slack:
            raise Rebuild
        new_jobs = changed_running + added
        queues, known_names, last_requests = self.queues, space.position.keys(), None
        for job in new_jobs:
            if job.queue not in queues:
                raise Rebuild
            # Request mappings are shared by reference within a run of like jobs: each is checked once.
            if job.requests is not last_requests:
                last_requests = job.requests
                if not known_names >= last_requests.keys():
                    raise Rebuild
        # A job on a node the index does not know: let the rebuild say so. Only jobs not held as they are can
        # be there: a removed node's jobs left the state in _check_nodes, so they show up as changed here.
        nodes_of_changed = list(map(position.get, zip(changed_clusters, map(_NODE, changed_running))))
        if None in nodes_of_changed:
            raise Rebuild

        # Apply: running jobs first (their room), then foreign usage, then queues.
        gangs_changed = self._gangs_stale or any(job.gang is not None for job in new_jobs)
        self.stopped_running = gone_running
        for job_id in gone_running:
            gangs_changed |= self._unbind(job_id)
        held_get, classes, default_class = self.running.get, self.classes, self.default_class
        last_requests = last_class = _NOTHING
        for job, i in zip(changed_running, nodes_of_changed):
            # Like jobs come in runs: the vector and the level are worked out once per run.
            if job.requests is not last_requests:
                last_requests = job.requests
                vec = space.vector(last_requests)
            if job.priority_class is not last_class:
                last_class = job.priority_class
                level = job_level(classes, default_class, job)
            held = held_get(job.id)
            if held is not None:
                was = held.job
                # Ports are almost always the one empty tuple: identity answers before equality is asked.
                if held.node == i and held.vec == vec and held.level == level and was.queue == job.queue \
                        and (was.host_ports is job.host_ports or was.host_ports == job.host_ports):
                    if was.node_selector or job.node_selector or was.affinity is not job.affinity or \
                            was.gang is not job.gang or was.claims or job.claims:
                        self._count_labels(was, -1)
                        self._count_labels(job, 1)
                    if was.labels is job.labels and was.pod_rules is job.pod_rules and was.namespace == job.namespace:
                        self.pods.where[job.id] = (i, job)
                    else:
                        self.pods.remove(job.id)
                        self.pods.add(i, job)
                    held.job = job
                    self.running_jobs[job.id] = job
                    continue
                self._unbind(job.id)
            self._bind(job, i, vec, level)
        self._sync_foreign(snapshot)

        entries = self.entries
        for key in gone_queued:
            value = entries.pop(key)
            job = value[-1] if value.__class__ is tuple else value
            gangs_changed |= job.gang is not None
            if job.node_selector or job.affinity or job.gang or job.claims:
                self._count_labels(job, -1)
            self.queues[job.queue].queued.remove(job)
        placed_entries, self.placed_entries = self.placed_entries, {}
        for job in added:
            entry = placed_entries.get(job.id)
            if entry is None or entry[-1] is not job:
                entry = (job.priority, job.submitted, self.seq, job)
                self.seq += 1
            entries[id(job)] = entry
            self.queues[job.queue].queued.add(entry)
            if job.node_selector or job.affinity or job.gang or job.claims:
                self._count_labels(job, 1)
        keys = volume_keys(snapshot) if self.claim_jobs else frozenset()
        if keys != self.volume_keys:
            self.volume_keys = keys
            self._labels_changed = True
        if self._labels_changed:
            self._sync_indexed_labels()
        self._set_limits(snapshot)
        self._set_fair_shares()
        self.queued_as_synced = synced
        if gangs_changed or (changed_running and self.gangs):
            self.gangs = self._gangs(snapshot)
            self._gangs_stale = False

    def _fill_entries(self) -> None:
        """Fill ``entries`` from the queues' orders (each job as its own value: no entry tuple made)."""
        if self.entries_filled:
            return
        for queue in self.queues.values():
            jobs = queue.queued.live_jobs()
            self.entries.update(zip(map(id, jobs), jobs))
        self.entries_filled = True

    def _sync_queue_names(self, snapshot: Snapshot) -> None:
        """Queues added or removed.

        A removed queue must hold nothing, and the queues kept must keep
        their parents; otherwise the state is rebuilt (and the rebuild
        reports a job of an unknown queue).
        """
        parents = {queue.name: queue.parent for queue in snapshot.queues}
        if parents.keys() == self.queues.keys() and all(q.parent == parents[q.name] for q in self.queues.values()):
            return
        for name, queue in self.queues.items():
            if name in parents:
                if parents[name] != queue.parent:
                    raise Rebuild
            elif queue.running or queue.queued or queue.children:
                raise Rebuild
        queues = {name: queue for name, queue in self.queues.items() if name in parents}
        for name in parents.keys() - queues.keys():
            queues[name] = QueueState(name, 1.0, {}, [0] * len(self.space), queued=JobQueue(self.entries),
                                      parent=parents[name])
        self.queues = {name: queues[name] for name in sorted(queues)}
        for queue in self.queues.values():
            queue.children = []
        self.nested = link(self.queues)

    def _check_nodes(self, snapshot: Snapshot) -> None:
        """Nodes added, removed, relabelled, tainted, cordoned or resized, without a rebuild.

        The running jobs of a removed node and its foreign usage leave first
        (a job the snapshot still shows running there makes the job pass
        rebuild, which reports it). The index then applies the changes (see
        :meth:`NodeIndex.update_nodes`) and, when positions moved, running
        jobs' node handles follow. A node with a resource name not seen
        before, or existing nodes in another order, rebuild.
        """
        if all(len(old) == len(cluster.nodes) and all(map(is_, old, cluster.nodes))
               for old, cluster in zip(self.nodes, snapshot.clusters)):
            return
        index, space = self.index, self.space
        nodes = [node for cluster in snapshot.clusters for node in cluster.nodes]
        known = index.nodes
        for node in nodes:
            if not space.position.keys() >= node.resources.keys():
                raise Rebuild
        present = {(node.cluster, node.name) for node in nodes}
        if len(present) != len(nodes):
            raise Rebuild
        if len(present) != len(known) or any((node.cluster, node.name) not in present for node in known):
            cluster_of = {cluster.name: k for k, cluster in enumerate(snapshot.clusters)}
            for i, node in enumerate(known):
                if (node.cluster, node.name) in present:
                    continue
                for job_id in list(index.jobs[i]):
                    if job_id in self.running:
                        self._gangs_stale |= self._unbind(job_id)
                    else:  # foreign usage
                        index.unbind(i, job_id)
                self.foreign[cluster_of[node.cluster]].pop(node.name, None)
                ports = self.foreign_ports[cluster_of[node.cluster]].pop(node.name, None)
                if ports:
                    self.ports.remove(i, f"{FOREIGN_USER}/{node.name}", ports)
                for pod in self.foreign_pods[cluster_of[node.cluster]].pop(node.name, ()):
                    self.pods.remove(pod.id)
        try:
            moved = index.update_nodes(nodes)
        except ValueError:
            raise Rebuild from None
        if moved is not None:
            for held in self.running.values():
                held.node = moved[held.node]
            if self.ports:
                self.ports.remap(moved)
            self.pods.remap(moved)
        else:
            self.pods.relabelled()
        self.nodes = [list(cluster.nodes) for cluster in snapshot.clusters]
        self.pool = tuple(sum(col) for col in zip(*index.allocatable)) if index.nodes else space.zero

    def _sync_foreign(self, snapshot: Snapshot) -> None:
        index, space = self.index, self.space
        for k, cluster in enumerate(snapshot.clusters):
            old = self.foreign[k]
            if old == cluster.foreign:
                continue
            for node_name in set(old) | set(cluster.foreign):
                if old.get(node_name) == cluster.foreign.get(node_name):
                    continue
                i = index.position[(cluster.name, node_name)]
                key = f"{FOREIGN_USER}/{node_name}"
                if key in index.jobs[i]:
                    index.unbind(i, key)
                if node_name in cluster.foreign:
                    index.bind(i, key, FOREIGN_USER, space.usage(cluster.foreign[node_name]), FOREIGN)
            self.foreign[k] = dict(cluster.foreign)
        for k, cluster in enumerate(snapshot.clusters):
            old_ports = self.foreign_ports[k]
            if old_ports == cluster.foreign_ports:
                continue
            for node_name in set(old_ports) | set(cluster.foreign_ports):
                was, now = old_ports.get(node_name, ()), cluster.foreign_ports.get(node_name, ())
                if was == now:
                    continue
                i = index.position[(cluster.name, node_name)]
                key = f"{FOREIGN_USER}/{node_name}"
                self.ports.remove(i, key, was)
                self.ports.add(i, key, now)
            self.foreign_ports[k] = dict(cluster.foreign_ports)
        for k, cluster in enumerate(snapshot.clusters):
            old_pods = self.foreign_pods[k]
            new_pods = cluster.foreign_pods
            if old_pods == new_pods:
                continue
            for node_name in set(old_pods) | set(new_pods):
                was, now = old_pods.get(node_name, ()), new_pods.get(node_name, ())
                if was is now or was == now:
                    continue
                i = index.position[(cluster.name, node_name)]
                for pod in was:
                    self.pods.remove(pod.id)
                for pod in now:
                    self.pods.add(i, pod)
            self.foreign_pods[k] = dict(new_pods)

    def _bind(self, job: Job, i: int, vec: Vector, level: int) -> None:
        self.index.bind(i, job.id, job.queue, vec, level)
        self._hold(job, i, vec, level)
        if job.node_selector or job.affinity or job.gang or job.claims:
            self._count_labels(job, 1)

    def _count_labels(self, job: Job, sign: int) -> None:
        """Count the label keys ``job`` reads (selector, node affinity, its gang's uniformity label) in (1) or
        out (-1) of the held jobs'."""
        uses = self.label_uses
        labels = job.node_selector or ()
        if job.affinity is not None:
            labels = (*labels, *job.affinity.label_keys)
            self.affinity_jobs += sign
        if job.gang is not None and job.gang.uniformity_label:
            labels = (*labels, job.gang.uniformity_label)
        if job.claims:
            self.claim_jobs += sign
        for label in labels:
            uses[label] += sign
            if not uses[label]:
                del uses[label]
                self._labels_changed = True
            elif uses[label] == sign:
                self._labels_changed = True

    def _sync_indexed_labels(self) -> None:
        """A label key some job selects on came or went: node types split or merge, as a fresh build has them."""
        self._labels_changed = False
        wanted = set(self.label_uses) | self.volume_keys
        if self.selector_keys != wanted:
            self.selector_keys = wanted
            self.index.set_indexed_labels(self.selector_keys)

    def _hold(self, job: Job, i: int, vec: Vector, level: int) -> None:
        """Count a job bound on node ``i`` as running, for its queue too."""
        self.running[job.id] = RunningJob(job, i, vec, level)
        self.running_jobs[job.id] = job
        if job.host_ports:
            self.ports.add(i, job.id, job.host_ports)
        self.pods.add(i, job)
        queue = self.queues[job.queue]
        queue.running += 1
        charge(queue, vec, 1)

    def _unbind(self, job_id: str) -> bool:
        """Take a running job out; True if it was in a gang."""
        held = self.running.pop(job_id)
        del self.running_jobs[job_id]
        self.index.unbind(held.node, job_id)
        if held.job.host_ports:
            self.ports.remove(held.node, job_id, held.job.host_ports)
        self.pods.remove(job_id)
        queue = self.queues[held.job.queue]
        queue.running -= 1
        charge(queue, held.vec, -1)
        if held.job.node_selector or held.job.affinity or held.job.gang or held.job.claims:
            self._count_labels(held.job, -1)
        return held.job.gang is not None

    def _set_limits(self, snapshot: Snapshot) -> None:
        for queue in snapshot.queues:
            state = self.queues[queue.name]
            state.weight = queue.weight
            state.limits = dict(queue.limits)
            state.limit_vector = None
            if queue.limits:
                state.limit_vector = tuple(
                    int(self.pool[r] * queue.limits[name]) if name in queue.limits else 1 << 62
                    for r, name in enumerate(self.space.names))

    def _set_fair_shares(self) -> None:
        assign_fair_shares(self.queues)

    @staticmethod
    def _gangs(snapshot: Snapshot) -> dict[str, list[Job]]:
        """Gang members by gang id: running ones first, then queued, in snapshot order."""
        return _gangs_of(filter(_GANG, chain(snapshot.running(), snapshot.queued)))

    # -- after a cycle ---------------------------------------------------------------
    def commit_cycle(self, session) -> None:
        """Record what the cycle decided: the state now predicts the next snapshot."""
        # The placed job objects (the ones the queues hold: a sync keeps the snapshot's objects), by identity.
        placed = {id(placement.job) for placement in session.scheduled}
        for placement in session.scheduled:
            job = placement.job
            i = self.index.position[(placement.cluster, placement.node)]
            _, vec, level = self.index.jobs[i][job.id]
            self.running[job.id] = RunningJob(job, i, vec, level)
            self.running_jobs[job.id] = job
            self.queues[job.queue].running += 1
        for job_id, job in session.preempted.items():
            del self.running[job_id]
            del self.running_jobs[job_id]
            if job.node_selector or job.affinity or job.gang:
                self._count_labels(job, -1)
            self._gangs_stale |= job.gang is not None
        self._gangs_stale |= any(placement.job.gang is not None for placement in session.scheduled)
        # Placed jobs leave the queues; one that does not start after all gets its place back.
        self.placed_entries = {}
        per_queue = Counter(placement.job.queue for placement in session.scheduled)
        for queue in self.queues.values():
            queue.queued.settle(placed, self.placed_entries, per_queue[queue.name])
        if self.placed_entries:
            # Job objects placed: the next sync expects the queued list less these (see _update).
            self.queued_placed = set(map(id, map(_LAST, self.placed_entries.values())))

    # -- for the equality test -----------------------------------------------------------
    def fingerprint(self) -> dict:
        """Everything decisions depend on, as plain comparable values."""
        index = self.index
        return {
            "space": self.space.names,
            "levels": index.levels,
            "types": [(t.cluster, sorted(t.labels.items()), t.taints, t.unschedulable, t.nodes) for t in index.types],
            "free": index.free,
            "users": index.users,
            "jobs": [sorted(jobs.items()) for jobs in index.jobs],
            "buckets": [index.bucket(i) for i in range(len(index.nodes))],
            "lists": index.fingerprint(),
            "running": sorted((job_id, r.job.id, r.node, r.vec, r.level) for job_id, r in self.running.items()),
            "queues": {name: (q.weight, q.limits, q.parent, [c.name for c in q.children], [c.name for c in q.chain],
                              q.allocated, q.limit_vector, q.fair_share, q.running,
                              [entry[-1].id for entry in sorted(q.queued.live_entries(), key=lambda e: e[:-1])],
                              sorted(+q.queued.classes))
                       for name, q in self.queues.items()},
            "gangs": {gang: [job.id for job in members] for gang, members in self.gangs.items()},
            "nested": self.nested,
            "ports": {i: sorted(ports.items()) for i, ports in sorted(self.ports.held.items())},
            "pods": sorted((pod_id, node) for pod_id, (node, _) in self.pods.where.items()),
            "anti": sorted((repr(term), sorted(values.items())) for term, values in self.pods.anti.items()),
        }


__all__ = ["CycleState", "QueueState", "RunningJob", "EVICTED"]
