"""The scheduling model: plain, slotted objects the hot path can afford.

These are not pydantic models on purpose: a cycle touches up to a million
jobs, and validation has already happened at the edge (config and state
loading, the API). Quantities here are already integers (see
:mod:`flotilla.core.quantities`): millicores for cpu, base units otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Mapping

from flotilla.core.nodeaffinity import NodeAffinity
from flotilla.core.podrules import PodRules

GANG_ID_ANNOTATION = "armadaproject.io/gangId"
GANG_CARDINALITY_ANNOTATION = "armadaproject.io/gangCardinality"
#: An elastic gang's minimum (Volcano's minAvailable): it starts once this many fit on one cluster.
GANG_MIN_AVAILABLE_ANNOTATION = "flotilla.io/gang-min-available"
#: Armada's topology constraint: every member of the gang on nodes sharing one value of this node label.
GANG_NODE_UNIFORMITY_LABEL_ANNOTATION = "armadaproject.io/gangNodeUniformityLabel"
#: Who submitted the job (stamped by the service on every job it accepts).
OWNER_ANNOTATION = "flotilla.io/owner"
#: The Kubernetes namespace the job's pods go to.
NAMESPACE_ANNOTATION = "flotilla.io/namespace"
#: Seconds a pod is given to end after SIGTERM when neither it nor the config names a grace period: Kubernetes' default
#: (``terminationGracePeriodSeconds``), so code that checkpoints on SIGTERM has the time it has under any controller.
DEFAULT_GRACE_PERIOD = 30.0
#: The label every Kubernetes node carries with its own name (simulated nodes too).
HOSTNAME_LABEL = "kubernetes.io/hostname"


class JobState(str, Enum):
    QUEUED = "queued"
    RUNNING = "running"


@dataclass(frozen=True, slots=True)
class PriorityClass:
    """Armada's ``(name, priority, preemptible)`` tuple, and whether its jobs may displace others.

    ``preempts`` is false for a class whose jobs never displace anyone
    (Kubernetes' ``preemptionPolicy: Never``): they wait for room instead.
    ``fair_share`` false keeps a preemptible class's jobs out of preemption
    to fair share (the evict action): only a job of higher priority may
    displace them, as in Kubernetes.
    """

    name: str
    priority: int
    preemptible: bool
    preempts: bool = True
    fair_share: bool = True


@dataclass(frozen=True, slots=True)
class Queue:
    """A queue: its weight sets its fair share; limits are fractions of the pool.

    A queue with a ``parent`` shares out its parent's fair share with its
    siblings (:mod:`flotilla.core.queuetree`); only leaf queues hold jobs.
    """

    name: str
    weight: float = 1.0
    limits: Mapping[str, float] = field(default_factory=dict)
    parent: str | None = None
    #: A cordoned queue keeps its jobs (and accepts more) but schedules nothing new.
    cordoned: bool = False


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"  # NoSchedule | PreferNoSchedule | NoExecute


@dataclass(frozen=True, slots=True)
class Toleration:
    """A Kubernetes toleration; ``operator`` is ``Equal`` or ``Exists``."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        """Kubernetes semantics: empty key with Exists matches every taint; empty effect matches every effect."""
        if self.effect and self.effect != taint.effect:
            return False
        if not self.key:
            return self.operator == "Exists"
        if self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value


@dataclass(frozen=True, slots=True)
class Gang:
    """Jobs sharing ``id`` are placed all together on one cluster, or not at all.

    An *elastic* gang (``min_available`` set, below ``cardinality``) starts
    once its first ``min_available`` members fit together on one cluster; the
    others then run one by one as room appears, on that cluster.

    A *topology* gang (``uniformity_label`` set, a node label key) runs all
    its members on nodes sharing one value of that label (one rack, block
    or zone: a *domain*); see :mod:`flotilla.core.topology`.
    """

    id: str
    cardinality: int
    min_available: int = 0
    uniformity_label: str = ""


def parse_min_available(text: str, cardinality: int) -> int | str:
    """An elastic gang's minimum from its annotation, or the error message (0 when it equals the cardinality)."""
    try:
        minimum = int(str(text).strip())
    except ValueError:
        minimum = 0
    if not 1 <= minimum <= cardinality:
        return f"expected a whole number from 1 to the gang's cardinality {cardinality}, got {text!r}"
    return 0 if minimum == cardinality else minimum


def min_available_of(annotations: Mapping[str, str], cardinality: int) -> int:
    """A stored gang's minimum from its jobs' annotations: 0 when it runs all together (no minimum, one equal to
    its cardinality, or a bad value, which submission refuses and a stored job is not held to)."""
    text = annotations.get(GANG_MIN_AVAILABLE_ANNOTATION)
    if text is None:
        return 0
    parsed = parse_min_available(text, cardinality)
    return parsed if isinstance(parsed, int) else 0


@dataclass(slots=True, eq=False)
class Node:
    name: str
    cluster: str
    resources: Mapping[str, int]
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False


@dataclass(slots=True, eq=False)
class Job:
    """A job as the scheduler sees it.

    ``requests`` maps resource names to integer quantities; jobs loaded in
    bulk share identical request mappings so a million jobs stay small.
    ``cluster`` and ``node`` are set for running jobs only. ``host_ports``
    are the ``(protocol, port, host IP)`` its pod binds on its node (host
    IP ``0.0.0.0`` when it names none): no two jobs whose ports conflict as
    kube-scheduler's NodePorts has it share a node
    (:mod:`flotilla.core.hostports`; empty for almost every job, and then
    nothing is looked up for it).
    """

    id: str
    queue: str
    job_set: str = ""
    priority: int = 0
    priority_class: str = ""
    submitted: float = 0.0
    requests: Mapping[str, int] = field(default_factory=dict)
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    gang: Gang | None = None
    state: JobState = JobState.QUEUED
    cluster: str | None = None
    node: str | None = None
    annotations: Mapping[str, str] = field(default_factory=dict)
    host_ports: tuple[tuple[str, int, str], ...] = ()
    #: Required and preferred node affinity (:mod:`flotilla.core.nodeaffinity`), None for almost every job.
    affinity: NodeAffinity | None = None
    #: Its pod's labels and namespace, which other pods' affinity, anti-affinity and spread select by.
    labels: Mapping[str, str] = field(default_factory=dict)
    namespace: str = ""
    #: Inter-pod affinity, anti-affinity and topology spread (:mod:`flotilla.core.podrules`), None for almost
    #: every job.
    pod_rules: PodRules | None = None
    #: The PersistentVolumeClaims its pod mounts, ``namespace/name`` (``name`` alone: the cluster's default
    #: namespace); a cluster resolves them (:mod:`flotilla.core.volumes`). Empty for almost every job.
    claims: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ForeignPod:
    """A pod the scheduler does not own, as pod rules see it: its namespace, labels and own rules
    (its required anti-affinity keeps matching pods out of its domain), and whether it is terminating
    (topology spread does not count it then; affinity and anti-affinity do, as kube-scheduler's plugins)."""

    id: str
    namespace: str
    labels: Mapping[str, str] = field(default_factory=dict, hash=False)
    pod_rules: PodRules | None = None
    terminating: bool = False


@dataclass(slots=True)
class ClusterSnapshot:
    """One cluster at the start of a cycle: its nodes and the jobs running on them.

    ``foreign`` lists resources taken on a node by pods the scheduler does not
    own (someone else's pods on a shared Kubernetes cluster); its ``pods``
    entry is how many such pods there are (each takes one of the node's pod
    slots, :mod:`flotilla.core.resources`). ``foreign_pods`` lists those pods
    themselves, per node, for inter-pod affinity and spread (a node's tuple is
    the same object while its pods do not change), and ``foreign_ports`` the
    host ports they bind there. ``volumes`` resolves the claims jobs name
    (None on a cluster without volumes). ``namespace_labels`` holds the
    cluster's namespaces' labels, which pod affinity terms'
    ``namespaceSelector`` reads (the same object while they do not change).
    """

    name: str
    nodes: list[Node]
    running: list[Job] = field(default_factory=list)
    foreign: dict[str, Mapping[str, int]] = field(default_factory=dict)
    foreign_pods: dict[str, tuple[ForeignPod, ...]] = field(default_factory=dict)
    #: The cluster's claims and volumes (:class:`flotilla.core.volumes.ClusterVolumes`); None: it has none.
    volumes: object | None = None
    #: Per node, the host ports (``(protocol, port, host IP)``) those pods bind there.
    foreign_ports: dict[str, tuple[tuple[str, int, str], ...]] = field(default_factory=dict)
    #: Namespace name -> its labels; a namespace not listed has only ``kubernetes.io/metadata.name``.
    namespace_labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)


@dataclass(slots=True)
class Snapshot:
    """Everything one cycle looks at; the session never mutates it."""

    clusters: list[ClusterSnapshot]
    queued: list[Job]
    queues: list[Queue]
    priority_classes: list[PriorityClass]
    default_priority_class: str
    now: float = 0.0

    def running(self) -> list[Job]:
        return [job for cluster in self.clusters for job in cluster.running]

    def namespace_labels(self) -> Mapping[str, Mapping[str, str]]:
        """Every cluster's namespaces' labels in one mapping (a namespace several clusters describe: the first
        cluster's); the one cluster's own object when only one describes any."""
        found: Mapping[str, Mapping[str, str]] | None = None
        merged = False
        for cluster in self.clusters:
            labels = cluster.namespace_labels
            if not labels:
                continue
            if found is None:
                found = labels
                continue
            if not merged:
                found, merged = dict(found), True
            for name, these in labels.items():
                found.setdefault(name, these)
        return found if found is not None else {}
