"""The scheduler's view of the store's jobs, kept between cycles: queued and running pods as core jobs.

The core keeps its own state between cycles (:mod:`flotilla.core.cyclestate`)
and finds what changed by identity first: a job that arrives as the very
object it had last cycle costs nothing. So the loop keeps its pods too, and
converts again only the jobs the store says changed (the copies' change
sets, see :class:`~flotilla.service.store.ActiveCopy` and
:class:`~flotilla.service.loop.QueuedJobs`). A cluster's running list is
rebuilt (at C speed) only in a cycle where one of its jobs changed; an idle
cycle hands over the same list objects as the last one.
"""

from __future__ import annotations

from dataclasses import replace
from itertools import chain

from flotilla.core.model import (GANG_NODE_UNIFORMITY_LABEL_ANNOTATION, NAMESPACE_ANNOTATION, Gang, Job, JobState,
                                 Toleration, min_available_of)
from flotilla.core.capabilities import Backends
from flotilla.core.hostports import host_port
from flotilla.core.nodeaffinity import AffinityError, NodeAffinity, parse_node_affinity
from flotilla.core.podrules import PodRules, SpreadConstraint, parse_pod_rules
from flotilla.core.topology import uniformity_label_problem
from flotilla.service.leases import pod_ids

# Read by the cluster backends (see flotilla.kubernetes.pods): grace period and active deadline, in seconds.
GRACE_ANNOTATION = "flotilla.io/grace-period"
DEADLINE_ANNOTATION = "flotilla.io/active-deadline"


#: The namespace of a job that names none, for pod rules (the Kubernetes clusters' ``namespace`` default).
DEFAULT_NAMESPACE = "default"
_NO_LABELS: dict = {}


def default_namespace(backends) -> str:
    """The namespace jobs that name none go to: the Kubernetes backends' ``namespace`` when they agree, else
    ``default``."""
    found = set(Backends.of(backends).having("namespace").values())
    return found.pop() if len(found) == 1 else DEFAULT_NAMESPACE


class Converter:
    """Store records to scheduler jobs, sharing identical mappings across jobs."""

    def __init__(self, namespace: str = DEFAULT_NAMESPACE):
        #: The namespace of a job that names none (its clusters' ``namespace``), for pod rules.
        self.namespace = namespace
        self._tolerations: dict[int, tuple] = {}
        self._ports: dict[tuple, tuple] = {}
        self._affinities: dict[int, tuple] = {}
        self._affinity_values: dict[NodeAffinity, NodeAffinity] = {}
        self._pod_rules: dict[int, tuple] = {}
        self._pod_rules_values: dict[PodRules, PodRules] = {}

    #: Cached toleration lists; the cache starts over past this many (it lives as long as the queued copy).
    LIMIT = 10000

    def tolerations(self, items: list) -> tuple:
        if not items:
            return ()
        if len(self._tolerations) > self.LIMIT:
            self._tolerations.clear()
        key = id(items)
        hit = self._tolerations.get(key)
        if hit is None:
            hit = tuple(Toleration(t.get("key", ""), t.get("operator", "Equal"), t.get("value", ""),
                                   t.get("effect", "")) for t in items)
            self._tolerations[key] = (items, hit)  # keep items alive so id() stays unique
            return hit
        return hit[1]

    def host_ports(self, items: list | None) -> tuple:
        """``[[protocol, port, host IP], ...]`` as the core's tuple of triples (shared by identical lists); an entry
        stored as ``[protocol, port]`` binds every host IP."""
        if not items:
            return ()
        key = tuple(host_port(*item) if len(item) == 3 else host_port(item[0], item[1], None) for item in items)
        if len(self._ports) > self.LIMIT:
            self._ports.clear()
        return self._ports.setdefault(key, key)

    def claims(self, items: list | None) -> tuple:
        """A pod's claim names as the core's tuple (shared by equal lists, in the host ports' table)."""
        if not items:
            return ()
        key = tuple(items)
        if len(self._ports) > self.LIMIT:
            self._ports.clear()
        return self._ports.setdefault(key, key)

    def affinity(self, spec: dict | None) -> NodeAffinity | None:
        """A stored ``nodeAffinity`` as the core's object; equal ones are one object."""
        if not spec:
            return None
        if len(self._affinities) > self.LIMIT:
            self._affinities.clear()
            self._affinity_values.clear()
        hit = self._affinities.get(id(spec))
        if hit is not None and hit[0] is spec:
            return hit[1]
        try:
            parsed = parse_node_affinity(spec)
        except AffinityError:
            # Checked at submission; a stored value that no longer parses matches no node rather than any.
            parsed = NodeAffinity(required=())
        parsed = self._affinity_values.setdefault(parsed, parsed)
        self._affinities[id(spec)] = (spec, parsed)  # keep spec alive so id() stays unique
        return parsed

    def pod_rules(self, spec: dict | None, namespace: str, labels: dict) -> PodRules | None:
        """A stored ``podRules`` as the core's object for a pod of ``namespace`` with ``labels``; equal ones are
        one object."""
        if not spec:
            return None
        if len(self._pod_rules) > self.LIMIT:
            self._pod_rules.clear()
            self._pod_rules_values.clear()
        key = (namespace, tuple(sorted(labels.items())))
        hit = self._pod_rules.get(id(spec))
        if hit is not None and hit[0] is spec and hit[1] == key:
            return hit[2]
        try:
            parsed = parse_pod_rules(spec.get("affinity"), spec.get("topologySpreadConstraints"), namespace, labels)
        except AffinityError:
            # Checked at submission; a stored value that no longer parses keeps the pod off every node.
            parsed = PodRules(spread=(SpreadConstraint(1, "\0never", True, None),))
        if parsed is not None:
            parsed = self._pod_rules_values.setdefault(parsed, parsed)
        self._pod_rules[id(spec)] = (spec, key, parsed)  # keep spec alive so id() stays unique
        return parsed

    def pods(self, record, state=JobState.QUEUED, cluster=None, nodes=None) -> list[Job]:
        if record.gang_id:
            gang = Gang(f"{record.queue}/{record.gang_id}", record.gang_pods or record.npods)
        elif record.npods > 1:
            gang = Gang(f"job:{record.id}", record.npods)
        else:
            gang = None
        if gang is not None and (minimum := min_available_of(record.annotations, gang.cardinality)):
            gang = Gang(gang.id, gang.cardinality, minimum)
        label = record.annotations.get(GANG_NODE_UNIFORMITY_LABEL_ANNOTATION) if gang is not None else None
        if label and uniformity_label_problem(label) is None:
            gang = replace(gang, uniformity_label=label)
        ids = pod_ids(record.id, record.npods)
        annotations = {**record.annotations, GRACE_ANNOTATION: f"{record.grace_period:g}",
                       DEADLINE_ANNOTATION: f"{record.deadline:g}"}
        out = []
        for k, pod in enumerate(record.pods):
            labels = pod.get("labels") or _NO_LABELS
            namespace = pod.get("namespace") or record.annotations.get(NAMESPACE_ANNOTATION) or self.namespace
            out.append(Job(ids[k], record.queue, record.job_set, record.priority, record.priority_class,
                           record.submitted, pod["requests"], pod.get("nodeSelector") or {},
                           self.tolerations(pod.get("tolerations")), gang, state, cluster,
                           nodes[k] if nodes else None, annotations,
                           self.host_ports(pod.get("hostPorts")), self.affinity(pod.get("nodeAffinity")),
                           labels, namespace, self.pod_rules(pod.get("podRules"), namespace, labels),
                           self.claims(pod.get("claims"))))
        return out


class RunningPods:
    """The active jobs (an :class:`~flotilla.service.store.ActiveCopy`) as running pods, per cluster.

    Jobs of a priority class or queue the scheduler does not know are kept
    out of the clusters' lists (as the loop always did); a change of those
    sets, or a copy read afresh (a new generation), converts everything again.
    """

    def __init__(self, namespace: str = DEFAULT_NAMESPACE):
        self.converter = Converter(namespace)
        self.generation: int | None = None
        self.filters: tuple | None = None
        self.pods: dict[str, tuple[object, list[Job]]] = {}        # job id -> (ActiveJob, its pods), every job
        self.by_cluster: dict[str, dict[str, list[Job]]] = {}      # cluster -> job id -> pods, the jobs shown
        self.nodes_used: dict[str, dict[str, int]] = {}            # cluster -> node -> pods shown on it
        self.lists: dict[str, tuple[frozenset, list[Job]]] = {}    # cluster -> (node names, running list)

    def update(self, copy, known_classes: set[str], known_queues: set[str]) -> int:
        """Take the copy's changes; returns how many jobs were looked at (all of them after a full read)."""
        generation, changed = copy.take_changes()
        filters = (frozenset(known_classes), frozenset(known_queues))
        if generation != self.generation or filters != self.filters:
            self.generation, self.filters = generation, filters
            held = self.pods
            self.pods, self.by_cluster, self.nodes_used, self.lists = {}, {}, {}, {}
            for job_id, record in copy.jobs.items():
                old = held.get(job_id)
                self._add(job_id, record, old[1] if old is not None and old[0] is record else None)
            return len(copy.jobs)
        for job_id in changed:
            record = copy.jobs.get(job_id)
            held = self.pods.get(job_id)
            if held is not None:
                if held[0] is record:
                    continue          # changed in place only (state, lease): the same pods
                self._remove(job_id, held)
            if record is not None:
                self._add(job_id, record, None)
        return len(changed)

    def _add(self, job_id: str, record, pods: list[Job] | None) -> None:
        if pods is None:
            pods = self.converter.pods(record, JobState.RUNNING, record.cluster, record.nodes)
        self.pods[job_id] = (record, pods)
        classes, queues = self.filters
        if record.priority_class not in classes or record.queue not in queues:
            return
        cluster = record.cluster
        here = self.by_cluster.get(cluster)
        if here is None:
            here = self.by_cluster[cluster] = {}
            self.nodes_used[cluster] = {}
        here[job_id] = pods
        used = self.nodes_used[cluster]
        for pod in pods:
            used[pod.node] = used.get(pod.node, 0) + 1
        self.lists.pop(cluster, None)

    def _remove(self, job_id: str, held: tuple) -> None:
        del self.pods[job_id]
        cluster = held[0].cluster
        here = self.by_cluster.get(cluster)
        if here is not None and here.pop(job_id, None) is not None:
            used = self.nodes_used[cluster]
            for pod in held[1]:
                used[pod.node] -= 1
            self.lists.pop(cluster, None)

    def running(self, cluster: str, node_names: frozenset) -> list[Job]:
        """The cluster's running pods on ``node_names``: the same list object as last time if nothing changed."""
        cached = self.lists.get(cluster)
        if cached is not None and cached[0] == node_names:
            return cached[1]
        here = self.by_cluster.get(cluster, {})
        running = list(chain.from_iterable(here.values()))
        used = self.nodes_used.get(cluster)
        if used is not None and not all(node in node_names for node, n in used.items() if n > 0):
            running = [job for job in running if job.node in node_names]
        self.lists[cluster] = (node_names, running)
        return running

    def of(self, job_id: str) -> list[Job]:
        """The pods of a job shown to the scheduler (empty when it is not active)."""
        held = self.pods.get(job_id)
        return held[1] if held is not None else []
