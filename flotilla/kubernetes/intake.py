"""In-cluster pods: pods made with kubectl (or by a Job controller) that name Flotilla as their scheduler.

A pod on a ``kind: kubernetes`` cluster whose ``spec.schedulerName`` is the
cluster's ``schedulerName`` setting, that has no node and that Flotilla did
not create (no ``flotilla.io/job-id`` label), is a job Flotilla schedules.
This module reads such pods (:func:`read_pod`: what the job needs of them,
and the placement fields Flotilla would not honour, with their paths) and
keeps, from the backend's watch events alone, the ones waiting
(:class:`IntakeTracker`): the scheduling loop takes what changed since its
last look each cycle, never a listing of every pod
(:mod:`flotilla.service.intake` decides queue, priority class and gangs).

Flotilla binds such a pod through ``pods/binding`` with the pod's uid in the
Binding's metadata (the API server refuses it for a pod deleted and made
again since) and the annotation ``flotilla.io/job-id``, which the API server
copies onto the pod: that is how a bound pod is told to be Flotilla's doing
from one bound by anyone else (which leaves the queue).
"""

from __future__ import annotations

import calendar
import time
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from flotilla.core.gangannotations import GANG_ANNOTATIONS
from flotilla.core.model import DEFAULT_GRACE_PERIOD
from flotilla.core.hostports import describe, host_port
from flotilla.core.nodeaffinity import AffinityError, parse_node_affinity
from flotilla.kubernetes.volumes import pod_claims
from flotilla.core.podrules import parse_pod_rules, with_default_spread
from flotilla.kubernetes.podgroupstatus import member_state
from flotilla.kubernetes.pods import JOB_ID, is_ours, pod_host_ports, pod_phase, pod_requests

QUEUE_LABEL = "flotilla.io/queue"
JOB_SET_LABEL = "flotilla.io/job-set"
#: Volcano's annotation naming the pod's PodGroup (in the pod's namespace).
GROUP_NAME_ANNOTATION = "scheduling.k8s.io/group-name"
#: The same, as Volcano's own job controller and Kubeflow Trainer's Volcano plugin write it.
VOLCANO_GROUP_NAME_ANNOTATION = "scheduling.volcano.sh/group-name"
#: Kueue's label naming the pod's (local) queue: read as a Flotilla queue's name.
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
JOBS_PATH = "/apis/batch/v1/jobs"
JOBSETS_PATH = "/apis/jobset.x-k8s.io/v1alpha2/jobsets"
PODGROUP_GROUP = "scheduling.volcano.sh"
PODGROUP_VERSION = "v1beta1"
PODGROUPS_PATH = f"/apis/{PODGROUP_GROUP}/{PODGROUP_VERSION}/podgroups"
#: Binds remembered between two looks of the service (a standby, which never looks, forgets them past this;
#: as a new leader it checks every pod Flotilla bound anyway).
BOUND_LIMIT = 100_000
#: What kube-scheduler's default spread selector reads (``helper.DefaultSelector``): the pod's services, and its
#: controller when it is one of these (kind -> its informer's kind and list path).
SELECTOR_OWNERS = {"ReplicaSet": ("replicasets", "/apis/apps/v1/replicasets"),
                   "StatefulSet": ("statefulsets", "/apis/apps/v1/statefulsets"),
                   "ReplicationController": ("replicationcontrollers", "/api/v1/replicationcontrollers")}
SERVICES_PATH = "/api/v1/services"
#: The informers the default spread selector needs: kind -> list path.
SELECTOR_INFORMERS = {"services": SERVICES_PATH, **{kind: path for kind, path in SELECTOR_OWNERS.values()}}
_OWNER_KIND = {informer: kind for kind, (informer, _) in SELECTOR_OWNERS.items()}

#: Annotations an in-cluster job carries in the store: the pod it stands for.
POD_UID = "flotilla.io/pod-uid"
POD_NAMESPACE = "flotilla.io/pod-namespace"
POD_NAME = "flotilla.io/pod-name"


def job_id_of(uid: str) -> str:
    """The store's job id for the pod with ``uid``: the uid's 32 hex digits (one pod, one job, whoever looks)."""
    return uid.replace("-", "").lower()[:32]


@dataclass(frozen=True, slots=True)
class InClusterPod:
    """What a job needs of a waiting in-cluster pod (equal for two reads of an unchanged pod)."""

    uid: str
    namespace: str
    name: str
    labels: Mapping[str, str]
    owner: str                     # the controlling owner's name, "" without one
    owner_uid: str                 # the controlling owner's uid, "" without one
    priority_class: str            # spec.priorityClassName, "" without one
    priority: int                  # spec.priority (written by admission from the class), 0 without one
    submitted: float               # creationTimestamp
    requests: Mapping[str, int]
    node_selector: Mapping[str, str]
    tolerations: tuple
    host_ports: tuple
    node_affinity: Any
    grace_period: float
    deadline: float                # activeDeadlineSeconds, 0 without one
    annotations: Mapping[str, str]  # the gang annotations the pod carries
    group_name: str | None         # its Volcano PodGroup
    problems: tuple = ()           # (field path, why) of what Flotilla would not honour
    pod_rules: Any = None          # pod affinity, anti-affinity, spread (API field names), None without
    gated: bool = False            # schedulingGates still set: not ready to schedule
    claims: tuple = ()             # the PersistentVolumeClaims it mounts, namespace/name
    controller_kind: str = ""      # the controlling owner's kind (of apps/v1, v1 or batch/v1), "" without one
    spread_defaulted: bool = False  # pod_rules' topologySpreadConstraints are the cluster's defaults

    @property
    def job_id(self) -> str:
        return job_id_of(self.uid)

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.name


def _timestamp(text: str | None) -> float:
    if not text:
        return time.time()
    try:
        return float(calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ")))
    except ValueError:
        return time.time()


_NOT_HONOURED = (
    ("resourceClaims", lambda s: bool(s.get("resourceClaims")),
     "resource claims (dynamic resource allocation) are not honoured by Flotilla's placement"),
)


def spec_problems(spec: Mapping[str, Any], namespace: str = "default",
                  labels: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """``(field path, why)`` for every placement field of ``spec`` Flotilla would not honour (as the API
    refuses them for submitted jobs, :func:`flotilla.kubernetes.podspec.refused_placement_fields`)."""
    out = [(path, why) for path, given, why in _NOT_HONOURED if given(spec)]
    seen: dict[tuple[str, int, str], str] = {}
    for group in ("containers", "initContainers"):
        for c, container in enumerate(spec.get(group) or ()):
            if (container.get("resources") or {}).get("claims"):
                out.append((f"spec.{group}[{c}].resources.claims",
                            "resource claims (dynamic resource allocation) are not honoured by Flotilla's placement"))
            if group == "initContainers" and container.get("restartPolicy") != "Always":
                continue
            for p, port in enumerate(container.get("ports") or ()):
                number = port.get("hostPort") or (port.get("containerPort") if spec.get("hostNetwork") else None)
                if not number:
                    continue
                key = host_port(port.get("protocol"), number, port.get("hostIP"))
                path = f"spec.{group}[{c}].ports[{p}].hostPort"
                if key in seen:
                    out.append((path, f"hostPort {describe((key,))} is also used by {seen[key]}: a pod cannot "
                                      f"bind one host port twice"))
                else:
                    seen[key] = path
    out = [(path if path.startswith("spec.") else f"spec.{path}", why) for path, why in out]
    try:
        parse_node_affinity((spec.get("affinity") or {}).get("nodeAffinity"))
    except AffinityError as exc:
        out.append(("spec.affinity.nodeAffinity" + (f".{exc.path}" if exc.path else ""), exc.message))
    try:
        parse_pod_rules(spec.get("affinity"), spec.get("topologySpreadConstraints"), namespace, labels or {})
    except AffinityError as exc:
        out.append((f"spec.{exc.path}", exc.message))
    return out


def pod_rules_spec(spec: Mapping[str, Any]) -> dict | None:
    """The podSpec's pod affinity, anti-affinity and spread constraints, as stored with the job (None: none)."""
    affinity = {key: value for key, value in (spec.get("affinity") or {}).items()
                if key in ("podAffinity", "podAntiAffinity") and value}
    out: dict[str, Any] = {}
    if affinity:
        out["affinity"] = affinity
    if spec.get("topologySpreadConstraints"):
        out["topologySpreadConstraints"] = spec["topologySpreadConstraints"]
    return out or None


def read_pod(obj: Mapping[str, Any]) -> InClusterPod:
    """The :class:`InClusterPod` of a waiting pod object."""
    meta = obj["metadata"]
    spec = obj.get("spec") or {}
    annotations = meta.get("annotations") or {}
    controller = next((ref for ref in meta.get("ownerReferences") or () if ref.get("controller")), {})
    owner = controller.get("name", "")
    problems = spec_problems(spec, meta.get("namespace", "default"), meta.get("labels") or {})
    group_names = {annotations.get(key) for key in (GROUP_NAME_ANNOTATION, VOLCANO_GROUP_NAME_ANNOTATION)} - {None, ""}
    if len(group_names) > 1:
        problems.append((f"metadata.annotations.{VOLCANO_GROUP_NAME_ANNOTATION}",
                         f"names PodGroup {annotations[VOLCANO_GROUP_NAME_ANNOTATION]!r}, "
                         f"{GROUP_NAME_ANNOTATION} names {annotations[GROUP_NAME_ANNOTATION]!r}: one pod, one group"))
    try:
        affinity = parse_node_affinity((spec.get("affinity") or {}).get("nodeAffinity"))
        affinity_spec = (spec.get("affinity") or {}).get("nodeAffinity") if affinity is not None else None
    except AffinityError:
        affinity_spec = None
    selector = dict(spec.get("nodeSelector") or {})
    if (spec.get("os") or {}).get("name"):
        selector.setdefault("kubernetes.io/os", spec["os"]["name"])
    try:
        requests = {name: amount for name, amount in pod_requests(obj).items() if amount}
    except (ValueError, ArithmeticError) as exc:
        requests = {}
        problems.append(("spec.containers.resources", f"unreadable quantity: {exc}"))
    grace = spec.get("terminationGracePeriodSeconds")
    deadline = spec.get("activeDeadlineSeconds")
    return InClusterPod(
        uid=meta.get("uid", ""), namespace=meta.get("namespace", "default"), name=meta["name"],
        labels=dict(meta.get("labels") or {}), owner=owner,
        owner_uid=controller.get("uid", "") if controller.get("kind") == "Job" else "",
        controller_kind=controller.get("kind", "") if controller.get("apiVersion") in ("apps/v1", "v1", "batch/v1")
        else "",
        priority_class=spec.get("priorityClassName") or "",
        priority=spec["priority"] if type(spec.get("priority")) is int else 0,
        submitted=_timestamp(meta.get("creationTimestamp")), requests=requests, node_selector=selector,
        tolerations=tuple(tuple(sorted(t.items())) for t in spec.get("tolerations") or ()),
        host_ports=pod_host_ports(spec), node_affinity=affinity_spec,
        pod_rules=pod_rules_spec(spec),
        grace_period=float(max(1, grace)) if isinstance(grace, (int, float)) else DEFAULT_GRACE_PERIOD,
        deadline=float(deadline) if isinstance(deadline, (int, float)) and deadline > 0 else 0.0,
        annotations={k: str(annotations[k]) for k in GANG_ANNOTATIONS if k in annotations},
        group_name=annotations.get(GROUP_NAME_ANNOTATION) or annotations.get(VOLCANO_GROUP_NAME_ANNOTATION) or None,
        problems=tuple(problems), gated=bool(spec.get("schedulingGates")),
        claims=pod_claims(obj))


def queue_label(labels: Mapping[str, str]) -> str | None:
    """The queue a pod's or a Job's labels name: ``flotilla.io/queue``, else Kueue's ``queue-name``."""
    return labels.get(QUEUE_LABEL) or labels.get(KUEUE_QUEUE_LABEL) or None


def scheduler_of(obj: Mapping[str, Any]) -> str:
    return (obj.get("spec") or {}).get("schedulerName") or "default-scheduler"


def bound_by_flotilla(obj: Mapping[str, Any], scheduler_name: str) -> bool:
    """An in-cluster pod Flotilla bound (its Binding's ``flotilla.io/job-id`` annotation is on the pod)."""
    meta = obj.get("metadata") or {}
    return (not is_ours(obj) and scheduler_of(obj) == scheduler_name and bool((obj.get("spec") or {}).get("nodeName"))
            and (meta.get("annotations") or {}).get(JOB_ID) == job_id_of(meta.get("uid", "")))


#: The PodGroup spec fields Flotilla honours (see :func:`read_podgroup`).
PODGROUP_HONOURED = ("minMember", "queue", "priorityClassName", "preemptable")
#: Volcano's PodGroup spec fields Flotilla does not honour: a PodGroup giving one is refused (its pods never bound).
PODGROUP_REFUSED = ("minResources", "minTaskMember", "networkTopology")


@dataclass(frozen=True, slots=True)
class PodGroupSpec:
    """What Flotilla reads of a Volcano PodGroup's spec, and the fields it refuses (``problems``).

    ``minMember`` is the gang's minimum; ``queue`` and ``priorityClassName``
    stand for the pods' own when they give none; ``preemptable`` must agree
    with the gang's priority class (Flotilla's preemptibility is the class's).
    A field Flotilla would not honour (``minResources``, ``minTaskMember``,
    ``networkTopology``, any field it does not know) is a problem: the
    group's pods are refused, told the field's path, rather than placed as
    if it were not there.
    """

    namespace: str
    name: str
    min_member: int = 1
    queue: str | None = None
    priority_class: str | None = None
    preemptable: bool | None = None
    problems: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def _given(value: Any) -> bool:
    """Whether a PodGroup field asks for something: absent, null, empty and zero ask nothing."""
    return value not in (None, "", 0, False) and value != {} and value != []


def read_podgroup(obj: Mapping[str, Any]) -> PodGroupSpec:
    """The :class:`PodGroupSpec` of a PodGroup object (never raises: what cannot be read is a problem)."""
    meta = obj.get("metadata") or {}
    namespace, name = meta.get("namespace", ""), meta.get("name", "")
    spec = obj.get("spec") or {}
    where = f"PodGroup {namespace}/{name}"
    problems: list[str] = []
    if not isinstance(spec, Mapping):
        return PodGroupSpec(namespace, name, problems=(f"{where} spec: expected an object",))
    minimum = spec.get("minMember")
    if minimum is None:
        minimum = 1
    elif isinstance(minimum, bool) or not isinstance(minimum, int) or minimum < 0:
        problems.append(f"{where} spec.minMember: expected a whole number, at least 0; got {minimum!r}")
        minimum = 1
    texts = {}
    for field_name in ("queue", "priorityClassName"):
        value = spec.get(field_name)
        if value is not None and not isinstance(value, str):
            problems.append(f"{where} spec.{field_name}: expected a string; got {value!r}")
            value = None
        texts[field_name] = value or None
    preemptable = spec.get("preemptable")
    if preemptable is not None and not isinstance(preemptable, bool):
        problems.append(f"{where} spec.preemptable: expected true or false; got {preemptable!r}")
        preemptable = None
    for field_name in PODGROUP_REFUSED:
        if _given(spec.get(field_name)):
            problems.append(f"{where} spec.{field_name} is not supported")
    for field_name in sorted(set(spec) - set(PODGROUP_HONOURED) - set(PODGROUP_REFUSED)):
        problems.append(f"{where} spec.{field_name} is not a PodGroup field Flotilla knows")
    return PodGroupSpec(namespace, name, max(1, minimum), texts["queue"], texts["priorityClassName"], preemptable,
                        tuple(problems))


@dataclass
class Arrival:
    """A waiting pod, new or changed, with what the cluster says about it besides the pod."""

    pod: InClusterPod
    namespace_queue: str | None          # its namespace's flotilla.io/queue label
    group: PodGroupSpec | None = None    # its PodGroup (None: no such PodGroup seen)
    group_problem: str | None = None     # why its PodGroup cannot be read
    owner_queue: str | None = None       # the queue its controlling Job's (or its JobSet's) labels name

    @property
    def group_min(self) -> int | None:
        """Its PodGroup's minMember (None: no such PodGroup seen)."""
        return self.group.min_member if self.group is not None else None


@dataclass
class IntakeTracker:
    """The waiting in-cluster pods of one cluster, kept from watch events (the backend calls it under its lock).

    ``take`` hands over what changed since the last take: pods new or
    changed (``Arrival``) and pods that left (job id -> why: deleted, bound
    by someone else, finished); ``resync`` makes the next take offer every
    waiting pod again (a new leader, who must check them all against the
    store once).
    """

    scheduler_name: str = "flotilla"
    waiting: dict[str, InClusterPod] = field(default_factory=dict)       # uid -> pod
    changed: set[str] = field(default_factory=set)
    gone: dict[str, str] = field(default_factory=dict)
    namespaces: dict[str, str | None] = field(default_factory=dict)      # namespace -> its queue label
    podgroups: dict[tuple[str, str], PodGroupSpec] = field(default_factory=dict)  # (namespace, name) -> its spec
    podgroups_problem: str | None = None     # the CRD is missing (or unreadable): said on every such pod
    namespaces_synced: bool = False
    podgroups_synced: bool = False
    #: batch/v1 Jobs whose labels name a queue or that a JobSet controls: uid -> (that queue, the JobSet's uid)
    #: (other Jobs are not kept); JobSets whose labels name a queue: uid -> that queue.
    owner_jobs: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)
    jobset_queues: dict[str, str] = field(default_factory=dict)
    jobs_synced: bool = False
    jobsets_synced: bool = False
    bound: dict[str, tuple[str, bool]] = field(default_factory=dict)   # job id -> (node, running): bound by Flotilla
    #: The pods of each PodGroup that name this scheduler: (namespace, group) -> uid -> member state
    #: (flotilla.kubernetes.podgroupstatus); ``groups_changed``: the groups whose pods changed since the last look.
    group_members: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)
    groups_changed: set[tuple[str, str]] = field(default_factory=set)
    #: Cluster default spread constraints (config ``podTopologySpread``) for pods that carry none; empty: off, and
    #: the selector informers below are not run.
    default_spread: tuple = ()
    #: What the default constraints' selector is made of: namespace -> service name -> its selector; and
    #: (kind, namespace, name) -> a ReplicaSet's or StatefulSet's label selector, a ReplicationController's map.
    services: dict[str, dict[str, dict]] = field(default_factory=dict)
    controllers: dict[tuple[str, str, str], dict] = field(default_factory=dict)
    selectors_synced: set[str] = field(default_factory=set)

    def mine(self, obj: Mapping[str, Any]) -> bool:
        return scheduler_of(obj) == self.scheduler_name and not is_ours(obj)

    def on_pod(self, kind: str, obj: Mapping[str, Any]) -> None:
        """A pod event (any pod: the others are ignored here)."""
        meta = obj.get("metadata") or {}
        uid = meta.get("uid")
        if not uid:
            return
        annotations = meta.get("annotations")
        if annotations and (GROUP_NAME_ANNOTATION in annotations or VOLCANO_GROUP_NAME_ANNOTATION in annotations):
            self._group_member(kind, obj, meta, annotations)
        if kind == "DELETED":
            if self.waiting.pop(uid, None) is not None:
                self.changed.discard(uid)
                self.gone[job_id_of(uid)] = "pod deleted while queued"
            return
        if not self.mine(obj):
            return
        spec = obj.get("spec") or {}
        node = spec.get("nodeName")
        if node or meta.get("deletionTimestamp") or pod_phase(obj) in ("Succeeded", "Failed"):
            if self.waiting.pop(uid, None) is not None:
                self.changed.discard(uid)
                if node and bound_by_flotilla(obj, self.scheduler_name) and not meta.get("deletionTimestamp"):
                    if len(self.bound) >= BOUND_LIMIT:   # a standby's (a new leader looks at every bound pod)
                        self.bound.clear()
                    self.bound[job_id_of(uid)] = (node, pod_phase(obj) == "Running")
                if node and not bound_by_flotilla(obj, self.scheduler_name):
                    self.gone[job_id_of(uid)] = f"pod bound to node {node} by someone else"
                elif not node:
                    self.gone[job_id_of(uid)] = "pod deleted while queued" if meta.get("deletionTimestamp") \
                        else f"pod {pod_phase(obj)} before it was scheduled"
            return
        pod = read_pod(obj)
        if self.default_spread:
            pod = self._defaulted(pod)
        if self.waiting.get(uid) != pod:
            self.waiting[uid] = pod
            self.changed.add(uid)
            self.gone.pop(pod.job_id, None)

    def _group_member(self, kind: str, obj: Mapping[str, Any], meta: Mapping[str, Any], annotations) -> None:
        """Keep a PodGroup member's state (only pods that name a group pay for this)."""
        key = (meta.get("namespace", ""), annotations.get(GROUP_NAME_ANNOTATION)
               or annotations.get(VOLCANO_GROUP_NAME_ANNOTATION) or "")
        members = self.group_members.get(key)
        if kind == "DELETED" or not self.mine(obj):
            if members is not None and members.pop(meta["uid"], None) is not None:
                self.groups_changed.add(key)
                if not members:
                    del self.group_members[key]
            return
        state = member_state(obj)
        if members is None:
            members = self.group_members[key] = {}
        if members.get(meta["uid"]) != state:
            members[meta["uid"]] = state
            self.groups_changed.add(key)

    def replace_pods(self, live_uids: set[str]) -> None:
        """After a relist: waiting pods absent from it were deleted meanwhile."""
        for uid in [uid for uid in self.waiting if uid not in live_uids]:
            self.on_pod("DELETED", {"metadata": {"uid": uid}})
        for key, members in list(self.group_members.items()):
            for uid in [uid for uid in members if uid not in live_uids]:
                del members[uid]
                self.groups_changed.add(key)
            if not members:
                del self.group_members[key]

    def on_namespace(self, kind: str, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        name = meta.get("name", "")
        label = None if kind == "DELETED" else (meta.get("labels") or {}).get(QUEUE_LABEL)
        if kind == "DELETED":
            before = self.namespaces.pop(name, None)
        else:
            before = self.namespaces.get(name, "\0")
            self.namespaces[name] = label
        if before != label:
            self.changed.update(uid for uid, pod in self.waiting.items() if pod.namespace == name)

    def on_podgroup(self, kind: str, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        key = (meta.get("namespace", ""), meta.get("name", ""))
        if kind == "DELETED":
            before = self.podgroups.pop(key, None)
            now = None
        else:
            before = self.podgroups.get(key)
            now = read_podgroup(obj)
            self.podgroups[key] = now
        if before != now:
            self.changed.update(uid for uid, pod in self.waiting.items()
                                if pod.group_name == key[1] and pod.namespace == key[0])

    def on_job(self, kind: str, obj: Mapping[str, Any]) -> None:
        """A batch/v1 Job event: the queue its labels (or its JobSet's) name, for its pods that name none."""
        meta = obj.get("metadata") or {}
        uid = meta.get("uid")
        if not uid:
            return
        entry = None
        if kind != "DELETED":
            parent = next((ref.get("uid") for ref in meta.get("ownerReferences") or ()
                           if ref.get("controller") and ref.get("kind") == "JobSet"), None)
            entry = (queue_label(meta.get("labels") or {}), parent)
            if entry == (None, None):
                entry = None
        before = self.owner_jobs.pop(uid, None)
        if entry is not None:
            self.owner_jobs[uid] = entry
        if before != entry:
            self.changed.update(pid for pid, pod in self.waiting.items() if pod.owner_uid == uid)

    def on_jobset(self, kind: str, obj: Mapping[str, Any]) -> None:
        """A JobSet event: the queue its labels name, for the pods of its Jobs that name none."""
        meta = obj.get("metadata") or {}
        uid = meta.get("uid")
        if not uid:
            return
        queue = None if kind == "DELETED" else queue_label(meta.get("labels") or {})
        before = self.jobset_queues.pop(uid, None)
        if queue:
            self.jobset_queues[uid] = queue
        if before != queue:
            jobs = {job for job, (_, parent) in self.owner_jobs.items() if parent == uid}
            self.changed.update(pid for pid, pod in self.waiting.items() if pod.owner_uid in jobs)

    def replace_jobs(self, items, jobsets: bool = False) -> None:
        """After a list of Jobs (or of JobSets): the ones absent from it were deleted meanwhile."""
        kept, handle = (self.jobset_queues, self.on_jobset) if jobsets else (self.owner_jobs, self.on_job)
        live = {(obj.get("metadata") or {}).get("uid") for obj in items}
        for uid in [uid for uid in kept if uid not in live]:
            handle("DELETED", {"metadata": {"uid": uid}})
        for obj in items:
            handle("MODIFIED", obj)
        if jobsets:
            self.jobsets_synced = True
        else:
            self.jobs_synced = True

    # -- cluster default spread constraints --------------------------------------------------------
    def default_selector(self, pod: InClusterPod) -> dict | None:
        """kube-scheduler's default spread selector for ``pod`` (``helper.DefaultSelector``): the selectors of
        the services of its namespace that select it, merged, with its controller's (a ReplicaSet, StatefulSet
        or ReplicationController that exists); None when that is empty."""
        match_labels: dict[str, str] = {}
        labels = pod.labels
        for selector in self.services.get(pod.namespace, {}).values():
            if selector and all(labels.get(k) == v for k, v in selector.items()):
                match_labels.update(selector)
        expressions: list = []
        if pod.controller_kind in SELECTOR_OWNERS:
            owner = self.controllers.get((pod.controller_kind, pod.namespace, pod.owner))
            if owner is not None:
                match_labels.update(owner.get("matchLabels") or {})
                expressions.extend(owner.get("matchExpressions") or ())
        if not match_labels and not expressions:
            return None
        out: dict[str, Any] = {}
        if match_labels:
            out["matchLabels"] = match_labels
        if expressions:
            out["matchExpressions"] = expressions
        return out

    def _defaulted(self, pod: InClusterPod) -> InClusterPod:
        """``pod`` with the cluster default spread constraints if it carries none of its own (and a selector)."""
        rules = pod.pod_rules
        if pod.spread_defaulted:
            rules = {k: v for k, v in rules.items() if k != "topologySpreadConstraints"} or None
            pod = replace(pod, pod_rules=rules, spread_defaulted=False)
        elif rules and rules.get("topologySpreadConstraints"):
            return pod
        selector = self.default_selector(pod)
        if selector is None:
            return pod
        return replace(pod, pod_rules=with_default_spread(rules, self.default_spread, selector),
                       spread_defaulted=True)

    def on_selector_object(self, kind: str, event: str, obj: Mapping[str, Any]) -> None:
        """A Service, ReplicaSet, StatefulSet or ReplicationController event: the waiting pods of its namespace
        get their default spread selector made again."""
        meta = obj.get("metadata") or {}
        namespace, name = meta.get("namespace") or "default", meta.get("name") or ""
        spec = obj.get("spec") or {}
        if kind == "services":
            kept = self.services.setdefault(namespace, {})
            before = kept.pop(name, None)
            now = None if event == "DELETED" else dict(spec.get("selector") or {})
            if now is not None:
                kept[name] = now
        else:
            key = (_OWNER_KIND[kind], namespace, name)
            before = self.controllers.pop(key, None)
            now = None
            if event != "DELETED":
                selector = spec.get("selector") or {}
                now = {"matchLabels": dict(selector)} if kind == "replicationcontrollers" else dict(selector)
                self.controllers[key] = now
        if before != now:
            self._redefault(namespace)

    def replace_selector_objects(self, kind: str, items) -> None:
        """After a list of ``kind``: the ones absent from it were deleted meanwhile."""
        if kind == "services":
            held = [(namespace, name) for namespace, names in self.services.items() for name in names]
        else:
            held = [(namespace, name) for (owner, namespace, name) in self.controllers if owner == _OWNER_KIND[kind]]
        live = {((obj.get("metadata") or {}).get("namespace"), (obj.get("metadata") or {}).get("name"))
                for obj in items}
        for namespace, name in held:
            if (namespace, name) not in live:
                self.on_selector_object(kind, "DELETED", {"metadata": {"namespace": namespace, "name": name}})
        for obj in items:
            self.on_selector_object(kind, "MODIFIED", obj)
        self.selectors_synced.add(kind)

    def _redefault(self, namespace: str) -> None:
        for uid, pod in list(self.waiting.items()):
            if pod.namespace == namespace:
                again = self._defaulted(pod)
                if again != pod:
                    self.waiting[uid] = again
                    self.changed.add(uid)

    def owner_queue(self, pod: InClusterPod) -> str | None:
        """The queue the pod's controlling Job names, else that Job's JobSet."""
        entry = self.owner_jobs.get(pod.owner_uid) if pod.owner_uid else None
        if entry is None:
            return None
        return entry[0] or (self.jobset_queues.get(entry[1]) if entry[1] else None)

    def set_podgroups_problem(self, problem: str | None) -> None:
        if problem != self.podgroups_problem:
            self.podgroups_problem = problem
            self.changed.update(uid for uid, pod in self.waiting.items() if pod.group_name)

    @property
    def ready(self) -> bool:
        """Namespaces (queue labels) and PodGroups read once: before that a pod's queue is not known."""
        return self.namespaces_synced and self.podgroups_synced and self.jobs_synced and self.jobsets_synced \
            and (not self.default_spread or self.selectors_synced >= set(SELECTOR_INFORMERS))

    def arrival(self, pod: InClusterPod) -> Arrival:
        group = group_problem = None
        if pod.group_name:
            group_problem = self.podgroups_problem
            if group_problem is None:
                group = self.podgroups.get((pod.namespace, pod.group_name))
        return Arrival(pod, self.namespaces.get(pod.namespace), group, group_problem,
                       self.owner_queue(pod))

    def take(self) -> tuple[list[Arrival], dict[str, str]]:
        if not self.ready:
            return [], {}
        arrivals = [self.arrival(self.waiting[uid]) for uid in sorted(self.changed) if uid in self.waiting]
        gone, self.gone, self.changed = self.gone, {}, set()
        return arrivals, gone

    def take_bound(self) -> dict[str, tuple[str, bool]]:
        """The waiting pods Flotilla bound since the last call: job id -> (node, running). The service checks
        them against the store, so that a bind made by a leader that stopped before recording it is adopted."""
        bound, self.bound = self.bound, {}
        return bound

    def resync(self) -> None:
        self.changed.update(self.waiting)


__all__ = ["Arrival", "GROUP_NAME_ANNOTATION", "JOBS_PATH", "JOBSETS_PATH", "KUEUE_QUEUE_LABEL", "VOLCANO_GROUP_NAME_ANNOTATION",
           "queue_label", "InClusterPod", "IntakeTracker", "JOB_SET_LABEL", "PODGROUPS_PATH",
           "POD_NAME", "POD_NAMESPACE", "POD_UID", "PodGroupSpec", "QUEUE_LABEL", "bound_by_flotilla", "job_id_of",
           "read_pod", "read_podgroup"]
