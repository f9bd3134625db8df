"""The Kubernetes cluster backend: one real (or KWOK) cluster behind the ClusterBackend protocol.

Reading. Two informer threads per cluster keep an in-memory copy of the
cluster's nodes and pods current: list once, then watch from the list's
resource version, with bookmarks, re-watching from the last version seen
when a watch ends and relisting only when the server says the version is
gone (410) or the connection broke. ``snapshot()`` reads that copy and
sends no request at all; it raises ``ClusterUnavailable`` while either
informer is not in sync with a reachable API server, so the scheduler
leaves the cluster out of that cycle and goes on with the others.

A pod labelled ``flotilla.io/job-id`` is one of ours and becomes a running
job (rebuilt from its labels and annotations, see
:mod:`flotilla.kubernetes.pods`); any other pod bound to a node we see
consumes that node's resources and one of its pod slots
(``ClusterSnapshot.foreign``, whose ``pods`` counts them) and holds its host
ports there (``ClusterSnapshot.foreign_ports``). Finished pods
(Succeeded, Failed) hold nothing, as kube-scheduler (whose pod informer lists
none) and the kubelet's admission see them: ours are kept for
``finished_pod_retention`` (counted from the pod's own end, so a restarted
process keeps none longer) for their logs, then deleted. A pod being deleted by anyone else, an
earlier pod of a job that has a newer one, and a pod given up (reported
``lost``) still hold their resources until they are gone, as the kubelet
counts them: the scheduler sees that room as taken (foreign usage).

Stopped pods. A pod Flotilla itself is deleting because a decision preempted
or cancelled its job is left out of the snapshot while it terminates (that
pod, whatever its job does next): the cycle that stopped it already gave its
room away, and a start placed there is held until the kubelet really has the
room (below). Counted as well, it would show the node fuller than the
decision left it, and the next cycles, evicting the node's other preemptible
jobs and finding no room to return them to, would preempt them too, one
victim after another for as long as a grace period lasts. A stopped pod
still there ``stuck_pod_expiry`` after its delete counts again (foreign
usage) and the starts held for its node are given up at that moment
(``lost``, cause ``Stuck``: retried): its room is not coming, and from the
next snapshot on the scheduler sees the node as the kubelet does.

Writing. ``apply()`` returns at once: a small thread pool creates the
started jobs' pods already bound (``spec.nodeName``; or, with
``bind="binding"``, pending and then bound through the ``binding``
subresource) and deletes the preempted and cancelled jobs' pods with their
grace period. Until the watch shows a new pod, the job is counted on its
node anyway (so the next cycle cannot double-book it). A start whose claims
need binding first (flotilla.kubernetes.volumes) has its volume writes made by
a second, smaller pool and then waits, holding no thread, until the claims'
watch events show them bound; each claim's event looks only at the starts
waiting for that claim.

Held starts (a nominated node). A kubelet refuses a pod the node has no
room for yet (``OutOfcpu``), and room freed by preemption comes only when
the victims' pods are gone, after their grace period. The scheduler counts
every pod but the stopped ones (above), so a start on a node where nothing
is leaving is created at once. On a node
where some pod is leaving (deleted, or ours being stopped, those of the
same decisions included), a pod is created only when the node's live pods
(terminating ones included), the pods being created and the pod itself fit
its allocatable; until then the start is *held* for that node, first come
first served: the job is
reported running there (its lease renewed, the scheduler keeps its room
and gives it to no other job), and its pod is created as soon as a pod on
the node is gone. A held start whose room does not come although nothing
on its node is leaving any more goes to the bind's own check (below), which
returns it; one held for a stopped pod that has not gone within
``stuck_pod_expiry`` is given up (``lost``: the job is retried).

The bind's own check. Just before each bind, the node is checked against
the live view (every live pod, whoever bound it, and Flotilla's binds not
yet seen); a bind that no longer fits is held when a leaving pod frees the
room, else its job is *returned* to its queue (no retry used), and a
kubelet's admission refusal returns the job too
(:mod:`flotilla.kubernetes.admission`).

Events. Pod phases become job events: ``running``, ``succeeded``,
``failed`` (with the pod's reason, e.g. DeadlineExceeded, or the API
error that refused the pod), ``preempted`` and ``cancelled`` once the
delete is accepted, and ``lost`` when a pod could not be created because
the API server was unreachable (the job may go elsewhere).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from itertools import chain
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Callable, Iterable, Mapping, Sequence

import structlog

from flotilla.core.backend import NODE_RETURNED, ClusterDecisions, ClusterUnavailable, JobEvent, PodTemplate
from flotilla.core.model import ClusterSnapshot, ForeignPod, Job, JobState, Node
from flotilla.core.podrules import NAMESPACE_NAME_LABEL
from flotilla.core.quantities import QuantityError, parse_duration
from flotilla.core.resources import PODS, UNLIMITED_PODS
from flotilla.kubernetes.client import (ApiError, Gone, KubeClient, KubeError, Unreachable, WatchBroken,
                                        forbidden_message, pod_path)
from flotilla.kubernetes.services import OWNED, exposure_manifests, object_path, owner_reference
from flotilla.kubernetes.admission import (ARRIVALS_PERIOD, OTHER_SCHEDULER_PERIOD, UNDECIDED_WINDOW, admission_rejection,
                                           fresh_use, returned_label, shortfall, undecided_elsewhere, waits_for_node)
from flotilla.kubernetes.podgroupstatus import PodGroupReporter, podgroup_status
from flotilla.kubernetes.priorityclasses import PRIORITY_CLASSES_PATH, PriorityClassTracker, setup_priority_classes
from flotilla.kubernetes.intake import (JOBS_PATH, JOBSETS_PATH, PODGROUPS_PATH, POD_NAME, POD_NAMESPACE, POD_UID,
                                        SELECTOR_INFORMERS, IntakeTracker, bound_by_flotilla)
from flotilla.kubernetes.volumes import INFORMERS as VOLUME_INFORMERS
from flotilla.kubernetes.volumes import SELECTED_NODE, VolumeState
from flotilla.kubernetes.pods import (ATTEMPT, DURATION, JOB_ID, PodSettings, failure_details, failure_reason, foreign_pod,
                                     is_ours,
                                      job_deadline, job_from_pod, job_grace_period, job_namespace, named_grace_period,
                                      node_from_object, node_ready, pod_finished_at, pod_host_ports, pod_manifest,
                                      pod_name, pod_phase,
                                      pod_requests, disruption, permanent_pull_failure, waiting_container,
                                      waiting_reason)

log = structlog.get_logger("flotilla.kubernetes")


def annotation_duration(job: Job) -> float | None:
    """The job's run time from its ``flotilla.io/simulated-duration`` annotation (as ``serve`` uses it), else None."""
    value = job.annotations.get(DURATION)
    if value is None:
        return None
    try:
        return parse_duration(value)
    except QuantityError:
        return None


@dataclass(slots=True)
class _Pod:
    """What the informer keeps of one pod."""

    key: tuple[str, str]
    node: str | None
    phase: str
    deleting: bool
    job: Job | None = None            # ours
    requests: Mapping[str, int] | None = None  # someone else's
    ports: tuple = ()                 # someone else's host ports ((protocol, port, host IP))
    reason: str = ""                  # why it failed
    waiting: str = ""                 # why it has not started
    owned: tuple[str, ...] = ()       # its services and ingresses ("services/NAME")
    incluster: bool = False           # an in-cluster pod Flotilla bound (not one it created)
    uid: str = ""
    exit_code: int | None = None      # a failed pod's: its first failed container's, when it failed on its own
    cause: str = ""                   # a failed pod's, for retry policies (flotilla.core.backend.FAILURE_CAUSES)
    disrupted: str = ""               # its DisruptionTarget condition's reason and message (evicted, preempted)
    foreign: ForeignPod | None = None  # someone else's, as pod rules see it (labels, namespace, anti-affinity)
    finished_at: float | None = None  # an ended pod's end, as the pod says it (finishedPodRetention counts from it)
    containers: tuple[str, ...] = ()  # ours: its containers' names (a preempted pod's log tails are read by them)


#: A preempted job's pod: what is kept of each container's log, read just before the pod is deleted (its last
#: VICTIM_LOG_BYTES, from its last VICTIM_LOG_LINES lines; at most VICTIM_LOG_CONTAINERS containers, each read
#: within VICTIM_LOG_TIMEOUT seconds), and the most the cluster keeps of all of them (the oldest go first).
VICTIM_LOG_BYTES = 64 * 1024
VICTIM_LOG_LINES = 2000
VICTIM_LOG_CONTAINERS = 4
VICTIM_LOG_TIMEOUT = 2.0
VICTIM_LOGS_TOTAL = 32 * 1024 * 1024

#: The phases of a pod that has ended.
_ENDED = frozenset({"Succeeded", "Failed"})
#: What was reported of a pod that ends its story (nothing more is said about it).
_FINAL = ("succeeded", "failed", "preempted", "cancelled", "lost", "returned")
#: Pod failure reasons that are the platform's, not the job's: the job is retried, not failed.
PLATFORM_FAILURES = frozenset({"Evicted", "NodeLost", "Shutdown", "NodeShutdown", "Terminated"})


def _namespace_labels(namespace: Mapping) -> dict[str, str]:
    """A Namespace object's labels (the API server gives each ``kubernetes.io/metadata.name``)."""
    meta = namespace.get("metadata") or {}
    labels = meta.get("labels") or {}
    return {NAMESPACE_NAME_LABEL: meta.get("name"), **{k: v for k, v in labels.items() if isinstance(v, str)}}


def _terminating(namespace: Mapping) -> bool:
    """Whether a namespace object is being deleted."""
    return bool((namespace.get("metadata") or {}).get("deletionTimestamp")) \
        or (namespace.get("status") or {}).get("phase") == "Terminating"


#: A pod of ours whose image the kubelet has backed off pulling this many times fails its job (its message said).
IMAGE_PULL_BACKOFFS = 3


class NamespaceMissing(Exception):
    """The job's namespace does not exist in the cluster: the job fails (Flotilla creates no namespaces)."""


def volume_writers(workers: int) -> int:
    """How many threads write the volume choices of starts, beside the ``workers`` that write pods."""
    return max(2, workers // 4)


class KubernetesCluster:
    """A Kubernetes cluster as a Flotilla cluster backend (see the module docstring).

    ``client``: a :class:`KubeClient` (or give ``kubeconfig`` and ``context``).
    ``duration_of``: the job's run time, written on its pod as kwok's
    completion delay (default: the ``flotilla.io/simulated-duration``
    annotation; ``None`` writes nothing, so a real cluster runs the pod as
    it would). ``priority_classes``: ``(name, priority, preemptible)``
    tuples created in the cluster if missing, so pods can name them.
    ``node_selector``: a label selector limiting the nodes Flotilla uses.
    """

    #: Starts come with the user's podSpecs (``ClusterDecisions.templates``): the pods run the user's work.
    needs_templates = True
    #: Pods carry the job's activeDeadlineSeconds: the kubelet (or KWOK's stage) fails them past it, with its reason.
    enforces_deadlines = True

    def __init__(self, name: str, client: KubeClient | None = None, *, kubeconfig: str | None = None,
                 context: str | None = None, settings: PodSettings | None = None,
                 duration_of: Callable[[Job], float | None] | None = annotation_duration,
                 priority_classes: Iterable[tuple[str, int, bool]] = (), bind: str = "node-name",
                 workers: int = 32, delete_finished: bool = True, node_selector: str | None = None,
                 watch_timeout: int = 60, stuck_pod_expiry: float | None = 300.0,
                 node_lost_timeout: float | None = 300.0, finished_pod_retention: float = 0.0,
                 volume_bind_timeout: float = 600.0, clock: Callable[[], float] = time.time,
                 start: bool = True, default_spread: Sequence[Mapping] = ()):
        if bind not in ("node-name", "binding"):
            raise ValueError(f"bind must be 'node-name' or 'binding', not {bind!r}")
        self.name = name
        self.client = client or KubeClient.from_kubeconfig(kubeconfig, context,
                                                           pool_size=max(8, workers + volume_writers(workers) + 6))
        self.settings = settings or PodSettings()
        self.duration_of = duration_of
        self.priority_classes = list(priority_classes)
        self.bind = bind
        self.delete_finished = delete_finished
        self.node_selector = node_selector
        self.watch_timeout = watch_timeout
        self.stuck_pod_expiry = stuck_pod_expiry
        self.node_lost_timeout = node_lost_timeout
        self.finished_pod_retention = finished_pod_retention
        #: How long a start waits for its claims to be bound before its job returns to its queue (kube-scheduler's
        #: bindTimeoutSeconds, 600 s by default).
        self.volume_bind_timeout = volume_bind_timeout
        self.clock = clock
        #: Claims, volumes and storage classes (flotilla.kubernetes.volumes), and the starts waiting for their
        #: claims to be bound: job id -> (job, node, attempt, template, choices, start count, deadline).
        self.volumes = VolumeState(self.settings.namespace)
        self._volume_waits: dict[str, tuple] = {}
        #: claim key -> the jobs of ``_volume_waits`` waiting for it: a claim's event looks at its own jobs only
        self._waits_on_claim: dict[str, set[str]] = {}

        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._nodes: dict[str, Node] = {}
        self._pods: dict[tuple[str, str], _Pod] = {}
        #: The keys of ``_pods`` bound to each node that have not ended: a node's questions (its load, a pod
        #: leaving it) read its own live pods, not every pod of the cluster nor those kept for their logs.
        self._pods_on: dict[str, set[tuple[str, str]]] = {}
        #: Our pods (made or bound by Flotilla) that have not ended, the ones a snapshot looks at one by one.
        self._own: dict[tuple[str, str], _Pod] = {}
        #: What everyone else's live pods use on each node, kept as their events arrive: a snapshot copies it
        #: instead of walking pods that are not Flotilla's.
        self._foreign_on: dict[str, dict[str, int]] = {}
        #: The host ports everyone else's live pods bind on each node (node -> pod key -> its ports), kept alike.
        self._foreign_ports_on: dict[str, dict[tuple[str, str], tuple]] = {}
        #: Everyone else's live pods per node, for pod affinity and spread, and each node's tuple of them as the
        #: last snapshot gave it (dropped when one of them changes, so an unchanged node's is the same object).
        self._foreign_pods_on: dict[str, dict[tuple[str, str], ForeignPod]] = {}
        self._foreign_pod_tuples: dict[str, tuple[ForeignPod, ...]] = {}
        self._job_pod: dict[str, tuple[str, str]] = {}   # job id -> its live pod
        self._attempts: dict[str, int] = {}
        self._inflight: dict[str, Job] = {}              # started, pod not seen yet
        #: Binds that passed the live check (flotilla.kubernetes.admission), pod not seen yet: node -> job id ->
        #: requests, and job id -> node. The next check on the node counts them.
        self._admitted_on: dict[str, dict[str, Mapping[str, int]]] = {}
        self._admitted: dict[str, str] = {}
        #: Other schedulers' pods not placed yet (no node, not found unschedulable): key -> (first seen, requests,
        #: nodeSelector). A bind leaves them the room they may take (flotilla.kubernetes.admission).
        self._undecided: dict[tuple[str, str], tuple[float, Mapping[str, int], Mapping[str, str]]] = {}
        self._nominated: set[str] = set()                # held in-cluster starts told their node
        self._arrivals: deque = deque()                  # (key, first seen, requests, nodeSelector) of those pods
        self._other_seen_at: float | None = None         # when the watch last showed such a pod arrive
        self._settle_timer: threading.Timer | None = None   # retries held starts once such a burst is over
        self._yielding: dict[str, float] = {}            # job id -> since when its bind gives way to them
        #: Node -> starts waiting for room on it, in order: (job, attempt, template, start count).
        self._held: dict[str, list[tuple]] = {}
        self._held_ids: set[str] = set()
        self._held_since: dict[str, float] = {}          # node -> since when nothing on it has been leaving
        self._stopping: dict[str, str] = {}              # job id -> preempted | cancelled
        #: Pods Flotilla is deleting by a decision -> when: not counted by a snapshot (module docstring, Stopped
        #: pods) until gone, or until ``stuck_pod_expiry`` has passed.
        self._stopped: dict[tuple[str, str], float] = {}
        self._kill_on_create: dict[str, str] = {}        # stopped before its pod was created
        self._ignore_delete: set[tuple[str, str]] = set()
        self._reported: dict[tuple[str, str], str] = {}
        self._starts: dict[str, int] = {}                # job id -> times started: tells a stale delete
        self._starting: dict[tuple[str, str], float] = {}  # our pods not started yet -> first seen
        self._pull_backoffs: dict[tuple[str, str], int] = {}  # our waiting pods -> times the kubelet backed off
        #: Our pods given up because their node was NotReady past nodeLostTimeout: a success they report when the
        #: node returns is their job's (NODE_RETURNED).
        self._lost_on_node: set[tuple[str, str]] = set()
        self._nodes_down: dict[str, list] = {}           # node -> [since, deleted, handled]
        self._finished: dict[tuple[str, str], float] = {}  # finished pods kept for their logs -> when to delete
        #: Preempted pods' log tails, oldest first: pod id -> (until, "namespace/name", container -> bytes, cut);
        #: at most VICTIM_LOGS_TOTAL bytes in all (``_victim_log_bytes``), each for finished_pod_retention.
        self._victim_logs: dict[str, tuple[float, str, dict[str, bytes], bool]] = {}
        self._victim_log_bytes = 0
        self._events: deque[tuple[JobEvent, int | None]] = deque()   # (event, the run it is about)
        self._synced = {"nodes": False, "pods": False}
        self._error: str = "not synced yet"
        self._known_pcs: set[str] = set()
        self._terminating_ns: set[str] = set()           # namespaces being deleted (no Events written there)
        self._namespace_labels: dict[str, dict] = {}      # namespace -> its labels (a new dict on every change)
        self._pcs_done = False
        self._namespaces: set[str] = set()
        self._requests_cache: dict = {}
        #: The waiting in-cluster pods (flotilla.kubernetes.intake), kept from the pod, namespace, PodGroup and Job
        #: watches.
        #: Cluster default spread constraints for in-cluster pods without their own (config podTopologySpread).
        self.intake = IntakeTracker(self.settings.scheduler_name, default_spread=tuple(default_spread))
        #: The cluster's PriorityClass objects (flotilla.kubernetes.priorityclasses), from their own watch.
        self.cluster_pcs = PriorityClassTracker()
        self._group_reporter = None                     # PodGroup statuses (flotilla.kubernetes.podgroupstatus)
        self._reporter = None
        self._report_pool: ThreadPoolExecutor | None = None
        self._reporting: list = []                       # the futures of the batch being written
        self._side_errors: dict[str, str] = {}          # namespaces/podgroups informer -> its last error
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"kube-{name}")
        #: The volume writes of starts (claimRefs, selected-node) have writers of their own: a burst of thousands
        #: does not queue the pods whose claims are bound already behind it (the PV controller binds claims far
        #: slower than these writers write).
        self._volume_pool = ThreadPoolExecutor(max_workers=volume_writers(workers),
                                               thread_name_prefix=f"kube-{name}-volumes")
        self._threads: list[threading.Thread] = []
        self.counters = {"created": 0, "deleted": 0, "create_errors": 0, "relists": 0, "watch_events": 0,
                         "returned": 0}
        if start:
            self.start()

    # -- lifecycle --------------------------------------------------------------------
    def start(self) -> None:
        """Start the informers (nodes, pods, namespaces, PodGroups, PriorityClasses, Jobs), one thread each; once,
        and never after close()."""
        if self._threads or self._stop.is_set():
            return
        node_params = {"labelSelector": self.node_selector} if self.node_selector else {}
        for kind, path, params in (("nodes", "/api/v1/nodes", node_params), ("pods", "/api/v1/pods", {}),
                                   ("namespaces", "/api/v1/namespaces", {}), ("podgroups", PODGROUPS_PATH, {}),
                                   ("priorityclasses", PRIORITY_CLASSES_PATH, {}), ("jobs", JOBS_PATH, {}),
                                   ("jobsets", JOBSETS_PATH, {}),
                                   *((kind, path, {}) for kind, path in VOLUME_INFORMERS.items()),
                                   # Services and controllers, for the default spread selector: only when configured.
                                   *((kind, path, {}) for kind, path in SELECTOR_INFORMERS.items()
                                     if self.intake.default_spread)):
            thread = threading.Thread(target=self._informer, args=(kind, path, params), daemon=True,
                                      name=f"kube-{self.name}-{kind}")
            thread.start()
            self._threads.append(thread)

    def set_unschedulable(self, node: str, flag: bool) -> None:
        """Drain (``True``) or uncordon a node: ``spec.unschedulable``, as ``kubectl cordon`` sets it.

        The node watch brings the change into the next snapshot.
        """
        self.client.patch(f"/api/v1/nodes/{node}", {"spec": {"unschedulable": flag}})

    def close(self, timeout: float = 10.0) -> None:
        """Stop the informers, finish the pod writes handed over, close the client; a second call does nothing.

        The informers' watches are shut at once; a thread still inside an
        ordinary request (a list) ends when it returns, bounded by its own
        timeout: all are joined within ``timeout`` seconds together, and a
        thread still running then is logged (``kubernetes.informer_not_stopped``).
        The informers stop before the pools shut, so none hands work to a shut pool.
        """
        with self._lock:
            if self._stop.is_set():
                return
            self._stop.set()
            timer = self._settle_timer
        if timer is not None:
            timer.cancel()
            timer.join(timeout)
        self.client.end_watches(self._stop)
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        left = [thread.name for thread in self._threads if thread.is_alive()]
        if left:
            log.warning("kubernetes.informer_not_stopped", cluster=self.name, threads=left, timeout=timeout)
        if self._report_pool is not None:
            self._report_pool.shutdown(wait=True, cancel_futures=True)
        self._volume_pool.shutdown(wait=True, cancel_futures=False)   # first: its binds hand pods to the pool
        self._pool.shutdown(wait=True, cancel_futures=False)
        self.client.close()

    def wait_synced(self, timeout: float = 30.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.available:
                return True
            time.sleep(0.05)
        return False

    def wait_idle(self, timeout: float = 30.0) -> bool:
        """Wait until every pod write handed over so far is done and seen by the watch (tests, benchmarks); a start
        waiting for its claims to be bound has nothing in hand."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                busy = self._pool._work_queue.qsize() or self._volume_pool._work_queue.qsize() or \
                    self._kill_on_create or \
                    any(job_id not in self._volume_waits for job_id in self._inflight)
            if not busy:
                return True
            time.sleep(0.02)
        return False

    @property
    def available(self) -> bool:
        return all(self._synced.values())

    @property
    def sync_error(self) -> str:
        """Why the cluster cannot be read (``not synced yet``, or an informer's last error)."""
        return self._error

    @property
    def namespace(self) -> str:
        """Where jobs that name no namespace go (the cluster's ``namespace`` setting)."""
        return self.settings.namespace

    # -- protocol ------------------------------------------------------------------------
    def snapshot(self) -> ClusterSnapshot:
        with self._lock:
            if not self.available:
                raise ClusterUnavailable(f"cluster {self.name}: {self._error}")
            nodes = list(self._nodes.values())
            running: list[Job] = []
            seen: set[str] = set()
            known = self._nodes
            # Everyone else's pods, as their events left them; then ours, one by one (names bound locally: this
            # loop is per pod and per cycle).
            foreign = {node: dict(used) for node, used in self._foreign_on.items() if node in known}
            foreign_ports = {node: tuple(chain.from_iterable(ports.values()))
                             for node, ports in self._foreign_ports_on.items() if node in known}
            stopping, job_pod_of, reported_of = self._stopping, self._job_pod.get, self._reported.get
            stopped = self._stopped
            append, see = running.append, seen.add
            for pod in self._own.values():
                node = pod.node
                if node is None or node not in known or pod.phase in _ENDED:
                    continue
                job = pod.job
                job_id = job.id
                if pod.deleting or job_id in stopping or job_pod_of(job_id) != pod.key \
                        or reported_of(pod.key) == "lost":
                    if pod.key in stopped:
                        continue   # stopped by a decision, which gave its room away (module docstring)
                    # No longer the job's, but on its node until gone: the kubelet still counts it.
                    requests = job.requests
                else:
                    append(job)
                    see(job_id)
                    continue
                used = foreign.setdefault(pod.node, {})
                for resource, amount in requests.items():
                    used[resource] = used.get(resource, 0) + amount
                used[PODS] = used.get(PODS, 0) + 1
                if job.host_ports:
                    foreign_ports[pod.node] = foreign_ports.get(pod.node, ()) + job.host_ports
            for job_id, job in self._inflight.items():
                if job_id not in seen and job_id not in self._stopping and job.node in self._nodes:
                    running.append(job)
            tuples = self._foreign_pod_tuples
            foreign_pods = {}
            for node, on in self._foreign_pods_on.items():
                if node in known:
                    pods = tuples.get(node)
                    if pods is None:
                        pods = tuples[node] = tuple(on.values())
                    foreign_pods[node] = pods
            volumes = self.volumes.view(self._side_errors)
        return ClusterSnapshot(self.name, nodes, running, foreign, foreign_pods, volumes=volumes,
                               foreign_ports=foreign_ports, namespace_labels=self._namespace_labels)

    def apply(self, decisions: ClusterDecisions) -> None:
        # The requests are handed to the workers once the bookkeeping is done and the lock is free: a worker
        # whose request returns takes the lock to record it, and so does the watch with every pod event, so
        # submitting thousands of starts under the lock would stall both until the last was submitted.
        work: list[tuple] = []
        with self._lock:
            self._apply(decisions, work)
        bind_volumes = self._bind_volumes
        for task in work:
            (self._volume_pool if task[0] == bind_volumes else self._pool).submit(*task)

    def _apply(self, decisions: ClusterDecisions, work: list[tuple]) -> None:
        """Record the stops and starts of ``decisions`` (under the lock); the requests to make go to ``work``."""
        for kind, jobs in (("preempted", decisions.preempt), ("cancelled", decisions.cancel)):
            for job in jobs:
                if job.id in self._held_ids:
                    self._drop_held(job.id, kind)
                    continue
                self._stopping[job.id] = kind
                key = self._job_pod.get(job.id)
                if key is None and job.id in self._inflight:
                    self._kill_on_create[job.id] = kind
                    continue
                self._mark_stopped(key)
                work.append((self._delete, job, key, kind, self._starts.get(job.id, 0)))
        for placement in decisions.start:
            job = placement.job
            attempt = self._attempts.get(job.id, -1) + 1
            self._attempts[job.id] = attempt
            self._starts[job.id] = self._starts.get(job.id, 0) + 1
            self._stopping.pop(job.id, None)
            self._unadmit(job.id)
            running = replace(job, state=JobState.RUNNING, cluster=self.name, node=placement.node)
            if job.id in self._held_ids:   # started again elsewhere: the old hold is void
                self._drop_held(job.id, None)
            self._inflight[job.id] = running
            template = decisions.templates.get(job.id)
            if job.claims and (placement.volumes or self.volumes.unbound(job.claims)):
                # Its claims are bound first (flotilla.kubernetes.volumes); the pod comes once they are.
                self.volumes.assume(placement.volumes, placement.node)
                work.append((self._bind_volumes, running, placement.node, attempt, template, placement.volumes,
                             self._starts[job.id]))
                continue
            self._start_pod(running, placement.node, attempt, template, work.append)

    def _start_pod(self, running: Job, node: str, attempt: int, template, submit) -> None:
        """Create the pod of a start now, or hold it until its node has room (module docstring, Held starts)."""
        if node not in self._held and not self._leaving(node):
            # Nothing on the node is on its way out: the scheduler counted every pod there.
            submit((self._create, running, node, attempt, template))
            return
        self._hold(node, running, attempt, template)
        self._release_held(node)

    # -- claims bound before the pod (flotilla.kubernetes.volumes) ------------------------------
    def _bind_volumes(self, job: Job, node: str, attempt: int, template, choices, started: int) -> None:
        """Write the placement's volume choices (pool thread), then wait for the job's claims to be bound."""
        try:
            with self._lock:
                writes = self.volumes.bind_requests(choices, node)
            for path, patch in writes:
                for tries in range(3):
                    try:
                        self.client.patch(path, patch)
                        break
                    except ApiError as exc:
                        # A PV changed since the informer saw it (its phase set, say): read it again and write with
                        # its version while it is still free for the claim; taken meanwhile, the choice is void.
                        if exc.status != 409 or "claimRef" not in patch.get("spec", {}) or tries == 2:
                            raise
                        ref = patch["spec"]["claimRef"]
                        version = self.volumes.still_free(self.client.get(path), f"{ref['namespace']}/{ref['name']}")
                        if version is None:
                            raise LookupError(f"{path.rsplit('/', 1)[-1]} was bound to another claim meanwhile") \
                                from None
                        patch["metadata"]["resourceVersion"] = version
        except (LookupError, ApiError, Unreachable) as exc:
            why = forbidden_message(exc) if isinstance(exc, ApiError) and exc.status == 403 else str(exc)
            with self._lock:
                self.volumes.forget(choices)
            self._create_failed(job, node, "lost", f"binding volumes: {why}")
            return
        with self._lock:
            if self._starts.get(job.id) != started or job.id not in self._inflight:
                self.volumes.forget(choices)
                return
            self._volume_waits[job.id] = (job, node, attempt, template, choices, started,
                                          self.clock() + self.volume_bind_timeout)
            for claim in job.claims:
                self._waits_on_claim.setdefault(self.volumes.qualified(claim), set()).add(job.id)
            self._check_volume_waits((job.id,))

    def _check_volume_waits(self, job_ids=None) -> None:
        """Start the waiting jobs whose claims are all bound; return to its queue one whose binding failed or timed
        out (under the lock). ``job_ids``: only these (the jobs waiting for a claim that changed); None: all."""
        now = self.clock()
        waits = self._volume_waits
        for job_id in list(waits if job_ids is None else job_ids):
            wait = waits.get(job_id)
            if wait is None:
                continue
            job, node, attempt, template, choices, started, deadline = wait
            if self._starts.get(job_id) != started or job_id not in self._inflight:
                self._end_volume_wait(job_id)   # stopped or started again since
                self.volumes.forget(choices)
                continue
            failed = [claim for claim, pv in choices if not pv and self.volumes.provisioning_failed(claim, node)]
            unbound = self.volumes.unbound(job.claims)
            if not unbound:
                self._end_volume_wait(job_id)
                self._start_pod(job, node, attempt, template, lambda task: self._pool.submit(*task))
                continue
            if failed:
                why = f"provisioning failed for PVC {', '.join(failed)} (its {SELECTED_NODE} was removed)"
            elif now >= deadline:
                why = (f"claims not bound within volumeBindTimeout {self.volume_bind_timeout:g}s: "
                       f"{', '.join(unbound)}")
            else:
                continue
            self._end_volume_wait(job_id)
            self.volumes.forget(choices)
            self._inflight.pop(job_id, None)
            self._kill_on_create.pop(job_id, None)
            if self._stopping.pop(job_id, None) is None:
                self._emit(job_id, "lost", node, f"binding volumes: {why}")

    def _end_volume_wait(self, job_id: str) -> None:
        job = self._volume_waits.pop(job_id)[0]
        for claim in job.claims:
            key = self.volumes.qualified(claim)
            jobs = self._waits_on_claim.get(key)
            if jobs is not None:
                jobs.discard(job_id)
                if not jobs:
                    del self._waits_on_claim[key]

    # -- held starts (see the module docstring) ------------------------------------------------
    def _hold(self, node: str, job: Job, attempt: int, template: PodTemplate | None, nominate: bool = True) -> None:
        """Hold ``job``'s start for ``node`` until the room its leaving pods free is there; a waiting in-cluster
        pod is nominated to the node meanwhile (``status.nominatedNodeName``, as kube-scheduler does), once."""
        self._held.setdefault(node, []).append((job, attempt, template, self._starts.get(job.id, 0)))
        self._held_ids.add(job.id)
        self._held_since.setdefault(node, self.clock())
        if nominate and POD_UID in job.annotations and job.id not in self._nominated:
            self._nominated.add(job.id)
            self._report(self.reporter.nominated, job.annotations[POD_NAMESPACE], job.annotations[POD_NAME],
                         job.annotations[POD_UID], node,
                         f"waiting on node {node} for the pods leaving it (preempted) to be gone")

    def _mark_stopped(self, key: tuple[str, str] | None) -> None:
        """Leave pod ``key`` out of the snapshots from now on: Flotilla deletes it by a decision (module docstring,
        Stopped pods). Not a pod already being deleted by someone else or given up: their room was never given."""
        pod = self._pods.get(key) if key is not None else None
        if key is None or key in self._stopped or self._reported.get(key) == "lost" \
                or (pod is not None and pod.deleting and key not in self._ignore_delete):
            return
        self._stopped[key] = self.clock()

    def _expire_stopped(self, now: float) -> None:
        """Count again the stopped pods still there ``stuck_pod_expiry`` after their delete, and give up the starts
        held for their nodes (module docstring, Stopped pods)."""
        horizon = now - self.stuck_pod_expiry
        for key in [key for key, since in self._stopped.items() if since <= horizon]:
            del self._stopped[key]
            pod = self._pods.get(key)
            if pod is None or pod.node is None or pod.phase in _ENDED:
                continue
            log.warning("kubernetes.stopped_pod_stuck", cluster=self.name, job=pod.job.id, node=pod.node,
                        pod=f"{key[0]}/{key[1]}")
            for job, _, _, started in list(self._held.get(pod.node, ())):
                if job.id not in self._held_ids or self._starts.get(job.id) != started:
                    continue   # stale: stopped or started again since
                log.warning("kubernetes.held_start_given_up", cluster=self.name, job=job.id, node=pod.node)
                self._drop_held(job.id, None)
                self._emit(job.id, "lost", pod.node,
                           f"node {pod.node} has no room for the pod: {pod.job.id}'s pod has been terminating "
                           f"for stuckPodExpiry {self.stuck_pod_expiry:g}s ({key[0]}/{key[1]})", cause="Stuck")

    def _put_pod(self, key: tuple[str, str], pod: _Pod) -> None:
        old = self._pods.get(key)
        if old is not None:
            self._unindex(key, old)
        self._pods[key] = pod
        if pod.node is not None and pod.phase not in _ENDED:   # (an ended pod, kept for its log, holds nothing)
            self._pods_on.setdefault(pod.node, set()).add(key)
        if pod.job is not None:
            if pod.phase in _ENDED:
                # Holds nothing (kept for its log, finishedPodRetention): no snapshot needs to walk it.
                self._own.pop(key, None)
            else:
                self._own[key] = pod   # (an update keeps its place: snapshots list our pods in a stable order)
        else:
            self._own.pop(key, None)
            if pod.node is not None and pod.phase not in _ENDED:
                self._charge_foreign(pod.node, pod.requests, 1)
                if pod.ports:
                    self._foreign_ports_on.setdefault(pod.node, {})[key] = pod.ports
                if pod.foreign is not None:
                    self._foreign_pods_on.setdefault(pod.node, {})[key] = pod.foreign
                    self._foreign_pod_tuples.pop(pod.node, None)

    def _pop_pod(self, key: tuple[str, str]) -> _Pod | None:
        old = self._pods.pop(key, None)
        self._stopped.pop(key, None)
        if old is not None:
            self._unindex(key, old)
            self._own.pop(key, None)
        return old

    def _unindex(self, key: tuple[str, str], old: _Pod) -> None:
        """Take ``old``'s part out of the per-node indexes (``_own`` is the caller's to change)."""
        on = self._pods_on.get(old.node) if old.node is not None else None
        if on is not None:
            on.discard(key)
            if not on:
                del self._pods_on[old.node]
        if old.job is None and old.node is not None and old.phase not in _ENDED:
            self._charge_foreign(old.node, old.requests, -1)
            if old.ports:
                ports = self._foreign_ports_on[old.node]
                del ports[key]
                if not ports:
                    del self._foreign_ports_on[old.node]
            on = self._foreign_pods_on.get(old.node)
            if on is not None and on.pop(key, None) is not None:
                self._foreign_pod_tuples.pop(old.node, None)
                if not on:
                    del self._foreign_pods_on[old.node]

    def _charge_foreign(self, node: str, requests: Mapping[str, int] | None, sign: int) -> None:
        """Count a foreign pod on ``node`` in (1) or out (-1): its requests, and one pod slot (``pods``)."""
        used = self._foreign_on.setdefault(node, {})
        for resource, amount in (*(requests or {}).items(), (PODS, 1)):
            left = used.get(resource, 0) + sign * amount
            if left:
                used[resource] = left
            else:
                used.pop(resource, None)
        if not used:
            del self._foreign_on[node]

    def _pods_of_node(self, node: str) -> list[_Pod]:
        pods = self._pods
        return [pods[key] for key in self._pods_on.get(node, ())]

    def _leaving(self, node: str) -> bool:
        """Whether a pod on ``node`` is on its way out (deleted, or ours being stopped) and still holds room."""
        return any(pod.phase not in _ENDED
                   and (pod.deleting or (pod.job is not None and pod.job.id in self._stopping))
                   for pod in self._pods_of_node(node))

    def _node_load(self, node: str) -> dict[str, int]:
        """What the kubelet counts on ``node``: its live pods (terminating ones too) and the pods being created."""
        load: dict[str, int] = {}
        created = set()
        for pod in self._pods_of_node(node):
            if pod.phase in _ENDED:
                continue
            if pod.job is not None:
                created.add(pod.job.id)
            for resource, amount in (pod.requests if pod.job is None else pod.job.requests).items():
                load[resource] = load.get(resource, 0) + amount
            load[PODS] = load.get(PODS, 0) + 1
        for job_id, job in self._inflight.items():
            if job.node == node and job_id not in created and job_id not in self._held_ids:
                for resource, amount in job.requests.items():
                    load[resource] = load.get(resource, 0) + amount
                load[PODS] = load.get(PODS, 0) + 1
        return load

    def _release_held(self, node: str) -> None:
        """Create the pods of the starts held for ``node`` that now fit, in order (the first that does not
        fit keeps those after it waiting: no start overtakes an earlier one on its node)."""
        waiting = self._held.get(node)
        if not waiting:
            return
        target = self._nodes.get(node)
        load = self._node_load(node) if target is not None else None
        while waiting:
            job, attempt, template, started = waiting[0]
            if self._starts.get(job.id) != started or job.id not in self._held_ids:
                waiting.pop(0)   # stale: stopped or started again since
                continue
            if load is None or any(load.get(resource, 0) + amount > target.resources.get(resource, 0)
                                   for resource, amount in job.requests.items()) \
                    or load.get(PODS, 0) + 1 > target.resources.get(PODS, UNLIMITED_PODS):
                if load is None or self._leaving(node):
                    return
                # Nothing on the node is leaving: the room will not come by waiting. The bind's own check
                # (_admit) returns the job to its queue.
            waiting.pop(0)
            self._held_ids.discard(job.id)
            for resource, amount in job.requests.items():
                load[resource] = load.get(resource, 0) + amount
            load[PODS] = load.get(PODS, 0) + 1
            self._pool.submit(self._create, job, node, attempt, template)
        del self._held[node]
        self._held_since.pop(node, None)

    def _drop_held(self, job_id: str, kind: str | None) -> None:
        """Forget a held start; ``kind`` (preempted, cancelled, lost): report the job so, no pod was made."""
        self._held_ids.discard(job_id)
        self._yielding.pop(job_id, None)
        self._unadmit(job_id)
        job = self._inflight.pop(job_id, None)
        if job is not None and job_id in self._nominated:   # its nomination ends with the hold
            self._nominated.discard(job_id)
            self._report(self.reporter.nominated, job.annotations[POD_NAMESPACE], job.annotations[POD_NAME],
                         job.annotations[POD_UID], None)
        for node, waiting in list(self._held.items()):
            waiting[:] = [entry for entry in waiting if entry[0].id != job_id]
            if not waiting:
                del self._held[node]
                self._held_since.pop(node, None)
        if kind is not None:
            reason = {"preempted": "preempted by the scheduler", "cancelled": "cancelled"}.get(kind, kind)
            self._emit(job_id, kind, job.node if job is not None else None, reason, run=self._starts.get(job_id, 0))

    def held(self) -> dict[str, list[str]]:
        """Job ids of the starts held per node, in order (tests, tools)."""
        with self._lock:
            return {node: [entry[0].id for entry in waiting] for node, waiting in self._held.items() if waiting}

    # -- the live check just before a bind (flotilla.kubernetes.admission) ---------------------------
    def _live_use(self, node: str) -> tuple[dict[str, int], int, dict[str, int], int]:
        """What the kubelet of ``node`` will count: the requests and number of its live pods, whoever bound them
        (terminating ones too), with Flotilla's binds not yet seen by the watch; then the part of both that is
        leaving (deleted, or ours being stopped)."""
        load: dict[str, int] = {}
        leaving: dict[str, int] = {}
        pods = gone = 0
        seen = set()
        stopping = self._stopping
        for pod in self._pods_of_node(node):
            if pod.phase in _ENDED:
                continue
            requests = pod.requests if pod.job is None else pod.job.requests
            pods += 1
            for resource, amount in (requests or {}).items():
                load[resource] = load.get(resource, 0) + amount
            if pod.job is not None:
                seen.add(pod.job.id)
            if pod.deleting or (pod.job is not None and pod.job.id in stopping):
                gone += 1
                for resource, amount in (requests or {}).items():
                    leaving[resource] = leaving.get(resource, 0) + amount
        for job_id, requests in self._admitted_on.get(node, {}).items():
            if job_id in seen:
                continue
            pods += 1
            for resource, amount in requests.items():
                load[resource] = load.get(resource, 0) + amount
        return load, pods, leaving, gone

    def _read_afresh(self, node: str) -> tuple[list[dict], list[dict]] | None:
        """While another scheduler is active: the pods on ``node`` and those waiting for other schedulers, read from
        the API server itself (consistent lists), not from the watch, which may lag (module
        :mod:`flotilla.kubernetes.admission`). None when no other scheduler is active or the read fails (the watch's
        view stands then)."""
        seen = self._other_seen_at
        if seen is None or self.clock() - seen > OTHER_SCHEDULER_PERIOD:
            return None
        try:
            on_node = self.client.get("/api/v1/pods", fieldSelector=f"spec.nodeName={node}").get("items") or []
            waiting = self.client.get("/api/v1/pods", fieldSelector="spec.nodeName=,spec.schedulerName!="
                                                                    + self.settings.scheduler_name).get("items") or []
        except KubeError as exc:
            log.info("kubernetes.fresh_read_failed", cluster=self.name, node=node, error=str(exc))
            return None
        return on_node, waiting

    def _fresh_view(self, node: Node, fresh: tuple[list[dict], list[dict]]) -> tuple[dict[str, int], int, dict]:
        """From a fresh read of ``node`` (:meth:`_read_afresh`): what its kubelet will count, and the requests of the
        other schedulers' waiting pods that may take room there and the watch does not show waiting (by key)."""
        on_node, waiting = fresh
        admitted = self._admitted_on.get(node.name, {})
        bound_here = {}   # in-cluster pods Flotilla is binding here, by pod: their job ids (their pods carry no label)
        for job_id in admitted:
            job = self._inflight.get(job_id)
            if job is not None and POD_UID in job.annotations:
                bound_here[(job.annotations[POD_NAMESPACE], job.annotations[POD_NAME])] = job_id
        live = []
        for obj in on_node:
            if (obj.get("status") or {}).get("phase") in _ENDED:
                continue
            try:
                requests = pod_requests(obj)
            except (ValueError, ArithmeticError):
                continue
            meta = obj["metadata"]
            job_id = (meta.get("labels") or {}).get(JOB_ID) or bound_here.get((meta.get("namespace", ""), meta["name"]))
            live.append((job_id, requests))
        load, pods = fresh_use(live, admitted)
        unseen = {}
        for obj in waiting:
            key = (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
            if key not in self._undecided and waits_for_node(obj, node.labels, self.settings.scheduler_name):
                try:
                    unseen[key] = pod_requests(obj)
                except (ValueError, ArithmeticError):
                    continue
        return load, pods, unseen

    def _admit(self, job: Job, node: str, attempt: int, template: PodTemplate | None) -> bool:
        """Whether ``job``'s pod may be bound to ``node`` now, checked against the live view (module
        :mod:`flotilla.kubernetes.admission`), read afresh while another scheduler is active; if so, its room is
        reserved until the watch shows the pod. Otherwise the start is held for the node when the room comes once
        its leaving pods are gone, else the job is returned to its queue with the reason."""
        fresh = self._read_afresh(node)   # outside the lock: a round trip to the API server
        with self._lock:
            target = self._nodes.get(node)
            if target is None:
                return True   # gone from the watch: the bind itself says what becomes of it
            load, pods, leaving, gone = self._live_use(node)
            unseen: dict = {}
            if fresh is not None:
                fresh_load, fresh_pods, unseen = self._fresh_view(target, fresh)
                load = {r: max(load.get(r, 0), fresh_load.get(r, 0)) for r in set(load) | set(fresh_load)}
                pods = max(pods, fresh_pods)
            slots = target.resources.get(PODS)   # its allocatable pods, None when it declares none
            short = shortfall(job.requests, load, target.resources, pods, slots)
            if short is None:
                now = self.clock()
                waited = now - self._yielding.setdefault(job.id, now)
                incoming = self._incoming(target, now) if (self._undecided or self._arrivals or unseen) \
                    and waited < UNDECIDED_WINDOW else None
                if incoming is not None:
                    for requests in unseen.values():
                        for resource, amount in requests.items():
                            incoming[resource] = incoming.get(resource, 0) + amount
                    if unseen or self._burst_on(target, now):
                        # Its pods are still arriving: more may come than any read shows, placed from a cache
                        # that may not show this bind. Its burst goes first (held, tried again as it settles).
                        self._hold(node, job, attempt, template, nominate=False)
                        self._settle_later(now)
                        return False
                if incoming and shortfall(job.requests, {r: load.get(r, 0) + incoming.get(r, 0)
                                                         for r in set(load) | set(incoming)},
                                          target.resources, pods, slots) is not None:
                    # Another scheduler is placing pods that may take this room: they go first (held, and tried
                    # again as soon as they are placed or found unschedulable, or its burst is over).
                    self._hold(node, job, attempt, template, nominate=False)
                    return False
                self._yielding.pop(job.id, None)
                self._nominated.discard(job.id)
                self._admitted[job.id] = node
                self._admitted_on.setdefault(node, {})[job.id] = job.requests
                return True
            if gone and shortfall(job.requests, {r: v - leaving.get(r, 0) for r, v in load.items()},
                                  target.resources, pods - gone, slots) is None:
                self._hold(node, job, attempt, template)
                return False
            self.counters["returned"] += 1
            self._inflight.pop(job.id, None)
            self._kill_on_create.pop(job.id, None)
            if self._stopping.pop(job.id, None) is None:
                self._emit(job.id, "returned", node, f"not bound to node {node}: {short} there now (pods bound "
                                                     f"there since the scheduling decision)",
                           cause=returned_label(short), run=self._starts.get(job.id, 0))
            log.info("kubernetes.bind_returned", cluster=self.name, job=job.id, node=node, reason=short)
            return False

    def _note_undecided(self, key, obj: dict, node: str | None, phase: str, deleting: bool, requests) -> None:
        """Keep ``_undecided`` (flotilla.kubernetes.admission): another scheduler's pods it has not placed yet."""
        if node is None and phase == "Pending" and not deleting and undecided_elsewhere(obj, self.settings.scheduler_name):
            if key not in self._undecided:
                entry = (self.clock(), requests or {}, (obj.get("spec") or {}).get("nodeSelector") or {})
                self._other_seen_at = entry[0]
                self._undecided[key] = entry
                self._arrivals.append((key, *entry))
        elif self._undecided.pop(key, None) is not None:
            self._release_all_held()   # decided (bound, or found unschedulable): room held for it may go now

    def _release_all_held(self) -> None:
        for name in list(self._held):
            self._release_held(name)

    def _incoming(self, node: Node, now: float) -> dict[str, int]:
        """The room another scheduler may take on ``node`` any moment (flotilla.kubernetes.admission): the requests
        of its pods not placed yet (seen within ``UNDECIDED_WINDOW`` seconds), and, while its pods keep arriving,
        of those that arrived within ``ARRIVALS_PERIOD`` seconds and were placed since (its view of the node may
        not show Flotilla's newest binds yet). A pod whose nodeSelector the node does not match takes nothing."""
        incoming: dict[str, int] = {}
        arrivals = self._arrivals
        while arrivals and arrivals[0][1] < now - ARRIVALS_PERIOD:
            arrivals.popleft()
        horizon = now - UNDECIDED_WINDOW
        recent = [entry[1:] for entry in arrivals if entry[0] not in self._undecided]
        for since, requests, selector in [*self._undecided.values(), *recent]:
            if since < horizon or any(node.labels.get(k) != v for k, v in selector.items()):
                continue
            for resource, amount in requests.items():
                incoming[resource] = incoming.get(resource, 0) + amount
        return incoming

    def _settle_later(self, now: float) -> None:
        """Try the held starts again once the other scheduler's burst is over: no pod event may come to do it."""
        if self._settle_timer is not None and self._settle_timer.is_alive():
            return
        last = max((since for _, since, _, _ in self._arrivals), default=now)
        delay = min(max(last + ARRIVALS_PERIOD - now, 0.0), ARRIVALS_PERIOD) + 0.05
        timer = threading.Timer(delay, self._settle)
        timer.name, timer.daemon = f"kube-{self.name}-settle", True
        self._settle_timer = timer
        timer.start()

    def _settle(self) -> None:
        with self._lock:
            self._settle_timer = None
            if not self._stop.is_set():
                self._release_all_held()

    def _burst_on(self, node: Node, now: float) -> bool:
        """Whether another scheduler's pods that may take room on ``node`` arrived within ``ARRIVALS_PERIOD``
        seconds (its burst is not over)."""
        return any(since >= now - ARRIVALS_PERIOD and not any(node.labels.get(k) != v for k, v in selector.items())
                   for _, since, _, selector in self._arrivals)

    def _unadmit(self, job_id: str) -> None:
        """Forget ``job_id``'s reserved room: its pod is seen by the watch, or its start is over."""
        node = self._admitted.pop(job_id, None)
        if node is not None:
            on = self._admitted_on[node]
            on.pop(job_id, None)
            if not on:
                del self._admitted_on[node]

    def poll_events(self) -> list[JobEvent]:
        with self._lock:
            now = self.clock()
            self._give_up_stuck_and_lost(now)
            self._delete_expired(now)
            if self._volume_waits:
                self._check_volume_waits()
            # An event about an earlier run of a job started again since (a delete that finished late) is
            # dropped: the service would take it for news about the new run.
            events = [ev for ev, run in self._events if run is None or run == self._starts.get(ev.job_id, 0)]
            self._events.clear()
        return events

    # -- writes (pool threads) ----------------------------------------------------------------
    def _emit(self, job_id: str, kind: str, node: str | None, reason: str = "", run: int | None = None,
              exit_code: int | None = None, cause: str = "") -> None:
        self._events.append((JobEvent(job_id, kind, self.name, node, self.clock(), reason, exit_code, cause), run))

    def _check_namespace(self, namespace: str) -> None:
        """Raise :class:`NamespaceMissing` unless ``namespace`` exists (remembered once seen)."""
        if namespace in self._namespaces:
            return
        try:
            self.client.get(f"/api/v1/namespaces/{namespace}")
        except ApiError as exc:
            if exc.status == 404:
                raise NamespaceMissing(f"namespace {namespace!r} does not exist on cluster {self.name}") from None
            raise
        self._namespaces.add(namespace)

    def _create(self, job: Job, node: str, attempt: int, template: PodTemplate | None = None) -> None:
        if not self._admit(job, node, attempt, template):
            return
        if POD_UID in job.annotations:
            self._bind(job, node)
            return
        duration = self.duration_of(job) if self.duration_of else None
        if duration is not None:
            deadline = job_deadline(job, self.settings)
            if deadline is not None and duration > deadline:
                duration = None  # let the deadline stage fail it, as the kubelet would
        namespace = job_namespace(job, self.settings, template)
        exposed = template is not None and bool(template.services or template.ingresses)
        for _ in range(3):
            body = pod_manifest(job, None if self.bind == "binding" else node, attempt, self.settings, duration,
                                priority_class_known=job.priority_class in self._known_pcs, template=template)
            name = body["metadata"]["name"]
            try:
                self._check_namespace(namespace)
                if exposed:   # its services and ingresses need its uid
                    created = self.client.post(pod_path(namespace), body)
                else:
                    self.client.create_pod(namespace, body)
                if self.bind == "binding":
                    self.client.post(pod_path(namespace, name) + "/binding", parse=False, body={
                        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": name, "namespace": namespace},
                        "target": {"apiVersion": "v1", "kind": "Node", "name": node}})
                break
            except ApiError as exc:
                if exc.status == 409 and exc.reason == "AlreadyExists":
                    # A pod of that name exists: ours from an earlier attempt still terminating -> next attempt.
                    attempt += 1
                    with self._lock:
                        self._attempts[job.id] = max(self._attempts.get(job.id, 0), attempt)
                    continue
                if exc.status == 403:   # the platform's doing: retried, and said once, naming verb and resource
                    self._create_failed(job, node, "lost", forbidden_message(exc))
                else:
                    self._create_failed(job, node, "failed", f"pod rejected: {exc}")
                return
            except NamespaceMissing as exc:
                self._create_failed(job, node, "failed", str(exc))
                return
            except Unreachable as exc:
                self._create_failed(job, node, "lost", f"API server unreachable: {exc}")
                return
        else:
            self._create_failed(job, node, "failed", "pod name taken by earlier attempts")
            return
        if exposed and not self._expose(job, node, created, template):
            return
        with self._lock:
            self.counters["created"] += 1
            self._job_pod[job.id] = (namespace, name)
            kill = self._kill_on_create.pop(job.id, None)
        if kill is not None:
            self._delete(job, (namespace, name), kill, self._starts.get(job.id, 0))

    def _bind(self, job: Job, node: str) -> None:
        """Bind an in-cluster pod to ``node`` (``pods/binding``), only the very pod that was queued (its uid)."""
        namespace, name, uid = job.annotations[POD_NAMESPACE], job.annotations[POD_NAME], job.annotations[POD_UID]
        body = {"apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": name, "namespace": namespace, "uid": uid, "annotations": {JOB_ID: job.id}},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
        try:
            self.client.post(pod_path(namespace, name) + "/binding", body, parse=False)
        except ApiError as exc:
            if exc.status == 403:
                self._create_failed(job, node, "lost", forbidden_message(exc))
            elif exc.status in (404, 409):
                # Gone, made again under its name (another uid), or bound meanwhile: never this pod's place.
                self._create_failed(job, node, "failed", f"pod {namespace}/{name} not bound: it was deleted, "
                                                         f"replaced or bound since it was queued ({exc})")
            else:
                self._create_failed(job, node, "failed", f"binding refused: {exc}")
            return
        except Unreachable as exc:
            self._create_failed(job, node, "lost", f"API server unreachable: {exc}")
            return
        with self._lock:
            self.counters["bound"] = self.counters.get("bound", 0) + 1
            self._job_pod[job.id] = (namespace, name)
            kill = self._kill_on_create.pop(job.id, None)
        if kill is not None:
            self._delete(job, (namespace, name), kill, self._starts.get(job.id, 0))

    # -- in-cluster pods: what the scheduling loop takes in, and what it tells them ---------------------
    @property
    def reporter(self):
        """The :class:`~flotilla.kubernetes.conditions.PodReporter` writing Flotilla's word onto in-cluster pods."""
        if self._reporter is None:
            from flotilla.kubernetes.conditions import PodReporter
            self._reporter = PodReporter(self.client, component=self.settings.scheduler_name,
                                         writable=self._namespace_writable)
        return self._reporter

    def _namespace_writable(self, namespace: str) -> bool:
        """False for a namespace being deleted (its watch says so): no Event is written there."""
        return namespace not in self._terminating_ns

    def _report(self, write: Callable, *args) -> None:
        """Hand a write of Flotilla's word on a pod (an Event, a nomination) to the reporting pool, never the binds'."""
        with self._lock:
            if self._stop.is_set():
                return
            if self._report_pool is None:
                self._report_pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix=f"kube-{self.name}-report")
            self._report_pool.submit(write, *args)

    def take_intake(self):
        """The waiting in-cluster pods new or changed since the last call, and those that left (job id -> why)."""
        with self._lock:
            return self.intake.take()

    def intake_resync(self) -> set[str]:
        """Offer every waiting in-cluster pod again at the next take; returns their job ids."""
        with self._lock:
            self.intake.resync()
            return {pod.job_id for pod in self.intake.waiting.values()}

    def take_bound(self) -> dict[str, tuple[str, bool]]:
        """The waiting in-cluster pods Flotilla bound since the last call: job id -> (node, running)."""
        with self._lock:
            return self.intake.take_bound()

    def bound_in_cluster(self) -> dict[str, tuple[str, bool]]:
        """Every live in-cluster pod Flotilla bound: job id -> (node, running) (a new leader checks them once)."""
        with self._lock:
            self.intake.take_bound()
            return {pod.job.id: (pod.node, pod.phase == "Running") for pod in self._own.values()
                    if pod.incluster and pod.job is not None and pod.node and not pod.deleting
                    and pod.phase not in _ENDED}

    def delete_cancelled(self, pods) -> int:
        """Delete the waiting in-cluster pods whose jobs were cancelled through Flotilla (``(namespace, name, uid,
        message)`` each), gracefully, each told why first by a ``Cancelled`` Event; pods no longer waiting are
        left alone. Returns how many deletions were started."""
        with self._lock:
            mine = [pod for pod in pods if pod[2] in self.intake.waiting]
        for namespace, name, uid, message in mine:
            self._pool.submit(self._delete_cancelled, namespace, name, uid, message)
        return len(mine)

    def _delete_cancelled(self, namespace: str, name: str, uid: str, message: str) -> None:
        self.reporter.cancelled(namespace, name, uid, message)
        try:   # the uid as precondition: a pod made again under the name since is not this job's
            self.client.delete(pod_path(namespace, name), {"apiVersion": "v1", "kind": "DeleteOptions",
                                                           "preconditions": {"uid": uid}})
        except ApiError as exc:
            if exc.status not in (404, 409):
                log.warning("kubernetes.delete_failed", cluster=self.name, pod=f"{namespace}/{name}", error=str(exc))
        except Unreachable as exc:
            log.warning("kubernetes.delete_unreachable", cluster=self.name, pod=f"{namespace}/{name}", error=str(exc))

    def waiting_pods(self) -> list:
        """The waiting in-cluster pods (:class:`~flotilla.kubernetes.intake.InClusterPod`), a copy."""
        with self._lock:
            return list(self.intake.waiting.values())

    def report_waiting(self, notes) -> bool:
        """Tell waiting in-cluster pods why they wait: ``(namespace, name, uid, reason)`` each.

        Written by a small pool of its own, so that bindings never queue behind these writes; the reporter
        writes a pod at most once per its interval and only when the reason changed. While the last batch
        is still being written, a new one is dropped (False): the loop hands over every reason again each
        cycle, so nothing is lost but a repeat.
        """
        if not notes:
            return True
        with self._lock:
            if any(not future.done() for future in self._reporting):
                return False
            if self._report_pool is None:
                self._report_pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix=f"kube-{self.name}-report")
            batch = list(notes)
            size = -(-len(batch) // 4)
            self._reporting = [self._report_pool.submit(self._report_waiting, batch[i:i + size])
                               for i in range(0, len(batch), size)]
        return True

    def report_podgroups(self, reasons: Mapping[tuple[str, str], tuple[str, bool]]) -> int:
        """Write the status of the PodGroups whose pods changed, or whose waiting pods' reason is in ``reasons``
        ((namespace, group) -> (reason, stored in its queue)), where it changed
        (:mod:`flotilla.kubernetes.podgroupstatus`); returns how many writes were started."""
        with self._lock:
            if self.intake.podgroups_problem is not None or self._stop.is_set():
                return 0
            if self._group_reporter is None:
                self._group_reporter = PodGroupReporter(self.client, PODGROUPS_PATH.rsplit("/", 1)[0])
            keys = self.intake.groups_changed | set(reasons)
            self.intake.groups_changed = set()
            writes = []
            for key in sorted(keys):
                group, members = self.intake.podgroups.get(key), self.intake.group_members.get(key)
                if group is None or not members:
                    continue
                reason, stored = reasons.get(key, (None, True))
                status = podgroup_status(group.min_member, members, reason, stored)
                if self._group_reporter.claim(key, status):
                    writes.append((key, status))
        for key, status in writes:   # the reporting pool's: never queued before a bind
            self._report(self._write_podgroup, key, status)
        return len(writes)

    def _write_podgroup(self, key, status) -> None:
        try:
            self._group_reporter.write(key, status)
        except KubeError as exc:
            if getattr(exc, "status", None) != 404:
                log.warning("kubernetes.podgroup_status_failed", cluster=self.name, podgroup="/".join(key),
                            error=str(exc))

    def _report_waiting(self, notes) -> None:
        reporter = self.reporter
        for namespace, name, uid, reason in notes:
            try:
                reporter.unschedulable(namespace, name, uid, reason)
            except Exception:  # the reporter logs its own failures; nothing here may stop the pool
                log.exception("kubernetes.report_failed", cluster=self.name, pod=f"{namespace}/{name}")

    def _expose(self, job: Job, node: str, pod: dict, template: PodTemplate) -> bool:
        """Create the job's services and ingresses, owned by its first pod; on a refusal, remove the pod again."""
        namespace = pod["metadata"]["namespace"]
        done = []
        for resource, obj in exposure_manifests(pod, template.services, template.ingresses,
                                                self.settings.ingress_domain):
            obj["metadata"]["ownerReferences"] = [owner_reference(pod)]
            try:
                self.client.post(object_path(namespace, resource), obj, parse=False)
                done.append(f"{resource}/{obj['metadata']['name']}")
            except (ApiError, Unreachable) as exc:
                if isinstance(exc, ApiError) and exc.status == 409:
                    continue   # left by an earlier attempt: owned by the old pod, replaced below by the GC
                key = (namespace, pod["metadata"]["name"])
                with self._lock:
                    self._reported[key] = "failed"
                    self._ignore_delete.add(key)
                self._delete_finished(key)
                for item in done:
                    self._delete_object(namespace, item)
                if isinstance(exc, Unreachable) or exc.status == 403:
                    why = forbidden_message(exc) if isinstance(exc, ApiError) else str(exc)
                    self._create_failed(job, node, "lost", f"{obj['kind']} {obj['metadata']['name']}: {why}")
                else:
                    self._create_failed(job, node, "failed", f"{obj['kind']} {obj['metadata']['name']} rejected: "
                                                             f"{exc}")
                return False
        return True

    def _delete_object(self, namespace: str, item: str) -> None:
        """Delete ``resource/name`` (a job's service or ingress); gone already is fine."""
        resource, name = item.split("/", 1)
        try:
            self.client.delete(object_path(namespace, resource, name))
        except ApiError as exc:
            if exc.status != 404:
                log.warning("kubernetes.delete_failed", cluster=self.name, object=item, error=str(exc))
        except KubeError as exc:
            log.warning("kubernetes.delete_failed", cluster=self.name, object=item, error=str(exc))

    def _create_failed(self, job: Job, node: str, kind: str, reason: str) -> None:
        log.warning("kubernetes.create_failed", cluster=self.name, job=job.id, reason=reason)
        with self._lock:
            self.counters["create_errors"] += 1
            self._inflight.pop(job.id, None)
            self._unadmit(job.id)
            self._kill_on_create.pop(job.id, None)
            if self._stopping.pop(job.id, None) is None:
                self._emit(job.id, kind, node, reason)

    def _delete(self, job: Job, key: tuple[str, str] | None, kind: str, started: int = 0) -> None:
        """Delete the job's pod ``key``; report ``kind`` unless the job has been started again since
        (``started``: its start count when the delete was asked for) or its pod was already given up."""
        if key is None:
            with self._lock:
                self._stopping.pop(job.id, None)
            return
        with self._lock:
            self._mark_stopped(key)   # (a pod made after its job was stopped is marked only now)
        namespace, name = key
        grace = self._grace_of(key, job)
        pod = self._pods.get(key)
        if kind == "preempted" and pod is not None and pod.incluster:
            # Said before the delete, so that the pod's Job (podFailurePolicy) can tell a preemption from a failure.
            self.reporter.disruption_target(namespace, name, pod.uid,
                                            f"flotilla: preempted by the scheduler to make room for other jobs "
                                            f"(job {job.id})")
        elif kind == "preempted" and pod is not None and pod.job is not None and self.finished_pod_retention > 0 \
                and pod.phase == "Running":
            self._keep_victim_log(pod)
        options = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if grace is not None:
            options["gracePeriodSeconds"] = grace
        try:
            self.client.delete(pod_path(namespace, name), options)
        except ApiError as exc:
            if exc.status != 404:
                log.warning("kubernetes.delete_failed", cluster=self.name, job=job.id, error=str(exc))
                with self._lock:
                    self._stopping.pop(job.id, None)
                    self._stopped.pop(key, None)
                return
        except Unreachable as exc:
            # Keep it counted out; the next snapshot after reconnecting shows the pod again if it survived.
            log.warning("kubernetes.delete_unreachable", cluster=self.name, job=job.id, error=str(exc))
            with self._lock:
                self._stopping.pop(job.id, None)
                self._stopped.pop(key, None)
            return
        with self._lock:
            self.counters["deleted"] += 1
            self._ignore_delete.add(key)
            if self._reported.get(key) == "lost" or self._starts.get(job.id, 0) != started:
                return  # already reported, or about an earlier run of a job that runs again
            self._reported[key] = kind
            pod = self._pods.get(key)
            node = pod.node if pod is not None else job.node
            self._emit(job.id, kind, node, "preempted by the scheduler" if kind == "preempted" else "cancelled",
                       run=started)

    def _grace_of(self, key: tuple[str, str], job: Job) -> int | None:
        """The grace period to delete ``job``'s pod with: the job's own when it names one; else None, the pod's
        ``terminationGracePeriodSeconds``, which it was made with (a job rebuilt from its pod names none)."""
        if named_grace_period(job) is None:
            return None
        return job_grace_period(job, self.settings)

    def _delete_finished(self, key: tuple[str, str], grace: int | None = 0) -> None:
        """Delete pod ``key`` with ``grace`` seconds (None: the pod's own ``terminationGracePeriodSeconds``)."""
        options = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if grace is not None:
            options["gracePeriodSeconds"] = grace
        try:
            self.client.delete(pod_path(*key), options)
        except KubeError:
            pass

    def _delete_expired(self, now: float) -> None:
        """Delete the finished pods whose ``finishedPodRetention`` is over, and forget such preempted pods' logs."""
        if self._victim_logs:
            for pod_id in [pod_id for pod_id, kept in self._victim_logs.items() if kept[0] <= now]:
                self._forget_victim_log(pod_id)
        if not self._finished:
            return
        for key in [key for key, due in self._finished.items() if due <= now]:
            del self._finished[key]
            self._pool.submit(self._delete_finished, key)

    def _keep_victim_log(self, pod: _Pod) -> None:
        """Read the end of each container's log of a preempted pod about to be deleted (Kubernetes keeps no log of
        a deleted pod) and keep it for ``finished_pod_retention``, within ``VICTIM_LOGS_TOTAL``. Each read waits
        ``VICTIM_LOG_TIMEOUT`` at most: the delete, and the room it frees, waits for it."""
        logs: dict[str, bytes] = {}
        cut = False
        for container in pod.containers[:VICTIM_LOG_CONTAINERS]:
            try:
                response = self.client.pod_log(pod.key[0], pod.key[1], container=container,
                                               tail_lines=VICTIM_LOG_LINES, limit_bytes=4 * VICTIM_LOG_BYTES,
                                               read_timeout=VICTIM_LOG_TIMEOUT)
                try:
                    text = response.read()
                finally:
                    response.release_conn()
            except Exception as exc:   # no log to keep (KWOK's fake kubelet has none; a node gone): delete anyway
                log.info("kubernetes.victim_log_unread", cluster=self.name, pod=f"{pod.key[0]}/{pod.key[1]}",
                         container=container, error=str(exc)[:200])
                continue
            cut = cut or len(text) > VICTIM_LOG_BYTES
            logs[container] = text[-VICTIM_LOG_BYTES:]
        cut = cut or len(pod.containers) > VICTIM_LOG_CONTAINERS
        if not logs:
            return
        with self._lock:
            self._forget_victim_log(pod.job.id)
            self._victim_logs[pod.job.id] = (self.clock() + self.finished_pod_retention, f"{pod.key[0]}/{pod.key[1]}",
                                             logs, cut)
            self._victim_log_bytes += sum(map(len, logs.values()))
            while self._victim_log_bytes > VICTIM_LOGS_TOTAL and self._victim_logs:
                self._forget_victim_log(next(iter(self._victim_logs)))

    def _forget_victim_log(self, pod_id: str) -> None:
        kept = self._victim_logs.pop(pod_id, None)
        if kept is not None:
            self._victim_log_bytes -= sum(map(len, kept[2].values()))

    def kept_log(self, pod_id: str) -> tuple[str, Mapping[str, bytes], bool] | None:
        """The log tails kept of pod ``pod_id`` (a job id, ``JOB#N`` for pod N) when it was preempted: its
        ``namespace/name``, container -> last output, and whether any was cut; None when none are kept."""
        with self._lock:
            kept = self._victim_logs.get(pod_id)
            if kept is None or kept[0] <= self.clock():
                return None
            return kept[1], dict(kept[2]), kept[3]

    # -- the platform's failures: stuck pods, lost nodes (checked at every poll) -------------------
    def _give_up(self, pod: _Pod, reason: str, cause: str, grace: int | None = 0, kind: str = "lost") -> None:
        """Report ``pod``'s job ``lost`` (the service retries it elsewhere; ``kind`` failed: the job's own
        failure) and remove the pod."""
        self._reported[pod.key] = "lost"
        self._stopped.pop(pod.key, None)   # its room counts again (module docstring)
        self._starting.pop(pod.key, None)
        self._ignore_delete.add(pod.key)
        self._emit(pod.job.id, "failed" if pod.incluster else kind, pod.node, reason, cause=cause)
        log.warning("kubernetes.pod_given_up", cluster=self.name, job=pod.job.id, reason=reason)
        self._pool.submit(self._delete_finished, pod.key, grace)

    def _give_up_held(self, now: float) -> None:
        """Release what fits now; give up starts held on a node where nothing has been leaving for
        ``stuck_pod_expiry`` (their room will not come: the job is retried elsewhere)."""
        for node in list(self._held):
            self._release_held(node)
            if node not in self._held:
                continue
            if self._leaving(node) or self.stuck_pod_expiry is None:
                self._held_since[node] = now
                continue
            if now - self._held_since.get(node, now) < self.stuck_pod_expiry:
                continue
            for job, _, _, _ in list(self._held[node]):
                log.warning("kubernetes.held_start_given_up", cluster=self.name, job=job.id, node=node)
                self._drop_held(job.id, None)
                self._emit(job.id, "lost", node, f"node {node} has no room for the pod and nothing on it is "
                                                  f"leaving (held for stuckPodExpiry {self.stuck_pod_expiry:g}s)",
                           cause="Stuck")

    def _give_up_stuck_and_lost(self, now: float) -> None:
        if self._stopped and self.stuck_pod_expiry is not None:
            self._expire_stopped(now)
        if self._held:
            self._give_up_held(now)
        if self.stuck_pod_expiry is not None:
            horizon = now - self.stuck_pod_expiry
            for key in [key for key, since in self._starting.items() if since <= horizon]:
                pod = self._pods.get(key)
                if pod is None or pod.job is None or self._reported.get(key) in _FINAL:
                    self._starting.pop(key, None)
                    continue
                why = f" ({pod.waiting})" if pod.waiting else ""
                self._give_up(pod, f"pod stuck: not started within stuckPodExpiry "
                                   f"{self.stuck_pod_expiry:g}s{why}", "Stuck")
        if self.node_lost_timeout is not None:
            for name, down in list(self._nodes_down.items()):
                since, deleted, handled = down
                if handled or now - since < self.node_lost_timeout:
                    continue
                down[2] = True
                if deleted:   # handled once; a node of that name that comes back starts afresh
                    del self._nodes_down[name]
                what = "deleted" if deleted else "NotReady"
                for pod in self._pods_of_node(name):
                    if pod.job is not None and not pod.deleting \
                            and pod.phase not in _ENDED and self._reported.get(pod.key) not in _FINAL:
                        # Force (no grace) when the node is gone: no kubelet is left to confirm.
                        grace = 0 if deleted else self._grace_of(pod.key, pod.job)
                        if not deleted:
                            self._lost_on_node.add(pod.key)
                        self._give_up(pod, f"node {name} lost: {what} for {now - since:.0f}s "
                                           f"(nodeLostTimeout {self.node_lost_timeout:g}s)", "NodeLost", grace)

    # -- priority classes ------------------------------------------------------------------
    def _setup_priority_classes(self) -> bool:
        """Create the config's priority classes that the cluster lacks (never touching one of the cluster's own,
        :mod:`flotilla.kubernetes.priorityclasses`); False if the cluster could not be read."""
        names = setup_priority_classes(self.client, self.priority_classes, self.name)
        if names is None:
            return False
        self._known_pcs = names
        return True

    def cluster_priority_classes(self) -> tuple[int, list]:
        """The cluster's PriorityClass objects as the watch shows them: (a version bumped at every change, the
        :class:`~flotilla.kubernetes.priorityclasses.ClusterPriorityClass` list)."""
        with self._lock:
            return self.cluster_pcs.version, list(self.cluster_pcs.classes.values())

    # -- informers (one thread each for nodes, pods, namespaces, PodGroups, PriorityClasses and Jobs) ----------
    def _informer(self, kind: str, path: str, params: dict) -> None:
        """List, then watch from the list's version, until close(): its watch is shut then, and a failure seen
        while stopping is no outage to report."""
        backoff = 0.1
        broken = 0
        resource_version = None
        while not self._stop.is_set():
            try:
                if resource_version is None:
                    if kind == "pods" and not self._pcs_done:
                        # Before the first sync (and again after an outage until it worked once), so that
                        # a cluster unreachable at start still gets its priority classes.
                        self._pcs_done = self._setup_priority_classes()
                    listing = self.client.request("GET", path, params=params or None, timeout=60)
                    resource_version = listing["metadata"]["resourceVersion"]
                    with self._lock:
                        self.counters["relists"] += 1
                        self._replace(kind, listing.get("items", []))
                    backoff = 0.1
                for event in self.client.watch(path, resource_version, self.watch_timeout, self._stop, **params):
                    broken = 0
                    obj = event.get("object") or {}
                    rv = (obj.get("metadata") or {}).get("resourceVersion")
                    if event["type"] != "BOOKMARK":
                        with self._lock:
                            self.counters["watch_events"] += 1
                            self._on_event(kind, event["type"], obj)
                    if rv:
                        resource_version = rv
            except Gone:
                resource_version = None
            except ApiError as exc:
                if self._stop.is_set():
                    return
                if kind in SELECTOR_INFORMERS and exc.status in (403, 404):
                    # Pods get default spread constraints without these objects' selectors; said once, looked for
                    # again each minute.
                    with self._lock:
                        self.intake.selectors_synced.add(kind)
                    if self._side_errors.get(kind) != str(exc):
                        self._side_errors[kind] = str(exc)
                        log.warning(f"kubernetes.{kind}_unreadable", cluster=self.name, error=forbidden_message(exc),
                                    reason=f"default spread constraints do not read the selectors of {kind}")
                    resource_version = None
                    self._stop.wait(60.0)
                    continue
                if kind in ("jobs", "jobsets") and exc.status in (403, 404):
                    # Pods are taken in without their Jobs' (JobSets') queue labels; said once (a cluster without
                    # JobSets, quietly), looked for again each minute.
                    with self._lock:
                        setattr(self.intake, f"{kind}_synced", True)
                    if self._side_errors.get(kind) != str(exc):
                        self._side_errors[kind] = str(exc)
                        if exc.status == 403 or kind == "jobs":
                            log.warning(f"kubernetes.{kind}_unreadable", cluster=self.name,
                                        error=forbidden_message(exc), reason=f"the queue labels of {kind} are not read")
                    resource_version = None
                    self._stop.wait(60.0)
                    continue
                if kind != "podgroups" or exc.status not in (403, 404):
                    self._informer_failed(kind, exc)
                    resource_version = None
                    self._stop.wait(backoff)
                    backoff = min(backoff * 2, 2.0)
                    continue
                # No PodGroup CRD (or no right to read it): pods naming a PodGroup are refused, saying so; looked
                # for again every minute, so installing the CRD later works without a restart.
                problem = (f"the PodGroup CRD ({PODGROUPS_PATH}) is not installed on cluster {self.name}"
                           if exc.status == 404 else f"cannot read PodGroups on cluster {self.name}: "
                                                     f"{forbidden_message(exc)}")
                with self._lock:
                    first = self.intake.podgroups_problem != problem
                    self.intake.set_podgroups_problem(problem)
                    self.intake.podgroups_synced = True
                if first:
                    log.warning("kubernetes.podgroups_unavailable", cluster=self.name, reason=problem)
                resource_version = None
                self._stop.wait(60.0)
            except WatchBroken as exc:
                if self._stop.is_set():
                    return
                # A stream that was flowing ended abruptly: watch again from the last version seen. If the
                # server is really gone, connecting fails next and the cluster is marked unavailable then.
                broken += 1
                if broken <= 3:
                    log.info("kubernetes.watch_broken", cluster=self.name, kind=kind, error=str(exc))
                    self._stop.wait(0.05)
                    continue
                self._informer_failed(kind, exc)
                resource_version = None
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 2.0)
            except (KubeError, ValueError, KeyError) as exc:
                if self._stop.is_set():
                    return
                self._informer_failed(kind, exc)
                resource_version = None
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 2.0)

    def _replace(self, kind: str, items: list[dict]) -> None:
        if kind == "priorityclasses":
            self._side_errors.pop(kind, None)
            self.cluster_pcs.replace(items)
            return
        if kind in ("jobs", "jobsets"):
            self._side_errors.pop(kind, None)
            self.intake.replace_jobs(items, jobsets=kind == "jobsets")
            return
        if kind == "nodes":
            self._replace_nodes(items)
        elif kind == "pods":
            self._replace_pods(items)
        elif kind in VOLUME_INFORMERS:
            self._side_errors.pop(kind, None)
            self.volumes.replace(kind, items)
            if self._volume_waits:
                self._check_volume_waits()
            return
        elif kind in SELECTOR_INFORMERS:
            self._side_errors.pop(kind, None)
            self.intake.replace_selector_objects(kind, items)
            return
        elif kind == "namespaces":
            self._side_errors.pop(kind, None)
            self._terminating_ns = {obj["metadata"]["name"] for obj in items if _terminating(obj)}
            labels = {(obj.get("metadata") or {}).get("name"): _namespace_labels(obj) for obj in items}
            if labels != self._namespace_labels:
                self._namespace_labels = labels
            live = {(obj.get("metadata") or {}).get("name") for obj in items}
            for name in [name for name in self.intake.namespaces if name not in live]:
                self.intake.on_namespace("DELETED", {"metadata": {"name": name}})
            for obj in items:
                self.intake.on_namespace("MODIFIED", obj)
            self.intake.namespaces_synced = True
            return
        else:
            live = {((obj.get("metadata") or {}).get("namespace"), (obj.get("metadata") or {}).get("name"))
                    for obj in items}
            for key in [key for key in self.intake.podgroups if key not in live]:
                self.intake.on_podgroup("DELETED", {"metadata": {"namespace": key[0], "name": key[1]}})
            self._side_errors.pop(kind, None)
            self.intake.set_podgroups_problem(None)
            for obj in items:
                self.intake.on_podgroup("MODIFIED", obj)
            self.intake.podgroups_synced = True
            return
        self._synced[kind] = True

    def _on_event(self, kind: str, event: str, obj: dict) -> None:
        if kind == "nodes":
            self._on_node(event, obj)
        elif kind == "pods":
            self._on_pod(event, obj)
        elif kind in VOLUME_INFORMERS:
            self.volumes.on_event(kind, event, obj)
            if self._volume_waits and kind == "pvcs":
                meta = obj.get("metadata") or {}
                waiting = self._waits_on_claim.get(f"{meta.get('namespace', '')}/{meta.get('name', '')}")
                if waiting:
                    self._check_volume_waits(waiting)
        elif kind == "namespaces":
            name = (obj.get("metadata") or {}).get("name")
            if event != "DELETED" and _terminating(obj):
                self._terminating_ns.add(name)
            else:
                self._terminating_ns.discard(name)
            known = self._namespace_labels
            if event == "DELETED":
                if name in known:
                    self._namespace_labels = {k: v for k, v in known.items() if k != name}
            elif known.get(name) != (labels := _namespace_labels(obj)):
                self._namespace_labels = {**known, name: labels}
            self.intake.on_namespace(event, obj)
        elif kind in SELECTOR_INFORMERS:
            self.intake.on_selector_object(kind, event, obj)
        elif kind == "priorityclasses":
            self.cluster_pcs.on_event(event, obj)
        elif kind == "jobs":
            self.intake.on_job(event, obj)
        elif kind == "jobsets":
            self.intake.on_jobset(event, obj)
        else:
            self.intake.on_podgroup(event, obj)

    def _informer_failed(self, kind: str, exc: Exception) -> None:
        text = forbidden_message(exc) if isinstance(exc, ApiError) and exc.status == 403 else str(exc)
        if kind in VOLUME_INFORMERS:
            self.volumes.changed()   # the claims' reason names the error
        if kind not in self._synced:   # namespaces, PodGroups, PriorityClasses, Jobs: scheduling goes on
            if self._side_errors.get(kind) != text:   # once per distinct error, not once per retry
                self._side_errors[kind] = text
                log.warning("kubernetes.watch_failed", cluster=self.name, kind=kind, error=text)
            return
        with self._lock:
            was = self.available
            changed = self._error != f"{kind}: {text}"
            self._synced[kind] = False
            self._error = f"{kind}: {text}"
        if was or changed:   # once per distinct error, not once per retry
            log.warning("kubernetes.unavailable", cluster=self.name, error=text)

    def _replace_nodes(self, items: list[dict]) -> None:
        before = set(self._nodes)
        self._nodes = {}
        for obj in items:
            self._on_node("ADDED", obj)
        for name in before - set(self._nodes):
            self._on_node("DELETED", {"metadata": {"name": name}})

    def _on_node(self, kind: str, obj: dict) -> None:
        name = obj["metadata"]["name"]
        self._on_node_change(kind, obj, name)
        if name in self._held:   # resized: a held start may fit now
            self._release_held(name)

    def _on_node_change(self, kind: str, obj: dict, name: str) -> None:
        if kind == "DELETED":
            self._nodes.pop(name, None)
            down = self._nodes_down.setdefault(name, [self.clock(), True, False])
            down[1] = True
        else:
            if node_ready(obj):
                self._nodes_down.pop(name, None)
            else:
                self._nodes_down.setdefault(name, [self.clock(), False, False])
            try:
                self._nodes[name] = node_from_object(obj, self.name)
            except (KeyError, ValueError) as exc:
                log.warning("kubernetes.bad_node", cluster=self.name, node=name, error=str(exc))

    def _replace_pods(self, items: list[dict]) -> None:
        live = set()
        for obj in items:   # every job's newest attempt first: an earlier attempt's kept pod listed before it is old news
            if is_ours(obj):
                annotations = obj["metadata"].get("annotations") or {}
                try:
                    attempt = int(annotations.get(ATTEMPT, "0"))
                except ValueError:
                    continue
                job_id = annotations.get(JOB_ID) or obj["metadata"]["labels"][JOB_ID]
                if attempt > self._attempts.get(job_id, -1):
                    self._attempts[job_id] = attempt
        for obj in items:
            meta = obj["metadata"]
            live.add((meta.get("namespace", ""), meta["name"]))
            self._on_pod("MODIFIED", obj)
        self.intake.replace_pods({obj["metadata"].get("uid") for obj in items})
        for key in [key for key in self._pods if key not in live]:
            old = self._pods[key]
            self._on_pod("DELETED", {"metadata": {"namespace": key[0], "name": key[1]}, "_cached": old})

    def _on_pod(self, kind: str, obj: dict) -> None:
        self._on_pod_change(kind, obj)
        meta = obj["metadata"]
        self.volumes.on_pod((meta.get("namespace", ""), meta["name"]), None if kind == "DELETED" else obj,
                            pod_phase(obj) not in _ENDED if kind != "DELETED" else False)
        if self._held:
            # A pod gone or finished frees room: the starts held for its node may go now, not a cycle later.
            old = obj.get("_cached")
            node = (obj.get("spec") or {}).get("nodeName") or (old.node if old is not None else None)
            for name in [node] if node is not None else list(self._held):
                if name in self._held:
                    self._release_held(name)

    def _on_pod_change(self, kind: str, obj: dict) -> None:
        meta = obj["metadata"]
        key = (meta.get("namespace", ""), meta["name"])
        self.intake.on_pod(kind, obj)
        if kind == "DELETED":
            old = self._pop_pod(key)
            if self._undecided.pop(key, None) is not None:
                self._release_all_held()
            if old is None or old.job is None:
                return
            for item in old.owned:   # its services and ingresses go with it (no garbage collector needed)
                self._pool.submit(self._delete_object, key[0], item)
            job_id = old.job.id
            if self._job_pod.get(job_id) == key:
                del self._job_pod[job_id]
            if old.incluster and self._reporter is not None:
                self._reporter.forget(old.uid)
            if key in self._ignore_delete:
                self._ignore_delete.discard(key)
                if self._stopping.get(job_id) and self._reported.get(key) == self._stopping[job_id]:
                    self._stopping.pop(job_id, None)
            elif self._reported.get(key) not in _FINAL and job_id not in self._held_ids:
                # (A held job's earlier pod going says nothing about the start waiting for its room.)
                self._inflight.pop(job_id, None)
                self._unadmit(job_id)
                if not old.incluster:
                    self._emit(job_id, "lost", old.node, "pod deleted outside Flotilla")
                elif old.disrupted:   # evicted, or preempted by another scheduler: not its owner's doing
                    self._emit(job_id, "failed", old.node, f"pod deleted outside Flotilla: {old.disrupted}")
                else:
                    # An in-cluster pod is the user's: deleted (kubectl delete job / pod), its job is cancelled
                    # (its controller, if any, makes a new pod: a new job).
                    self._emit(job_id, "cancelled", old.node, "pod deleted outside Flotilla", cause="Deleted")
            self._reported.pop(key, None)
            self._starting.pop(key, None)
            self._finished.pop(key, None)
            self._pull_backoffs.pop(key, None)
            self._lost_on_node.discard(key)
            return
        spec = obj.get("spec") or {}
        phase = pod_phase(obj)
        deleting = bool(meta.get("deletionTimestamp"))
        node = spec.get("nodeName")
        old = self._pods.get(key)
        incluster = not is_ours(obj) and node is not None and bound_by_flotilla(obj, self.settings.scheduler_name)
        if is_ours(obj) or incluster:
            job = old.job if old is not None and old.job is not None and old.node == node else None
            if job is None:
                job = job_from_pod(obj, self.name, self._requests_cache)
            owned = old.owned if old is not None else \
                tuple(item for item in (meta.get("annotations") or {}).get(OWNED, "").split(",") if item)
            exit_code, cause = failure_details(obj) if phase == "Failed" else (None, "")
            pod = _Pod(key, node, phase, deleting, job=job,
                       reason=failure_reason(obj) if phase == "Failed" else "",
                       waiting=waiting_reason(obj) if phase == "Pending" else "", owned=owned,
                       exit_code=exit_code, cause=cause, incluster=incluster, uid=meta.get("uid", ""),
                       disrupted=disruption(obj) if incluster else "",
                       finished_at=pod_finished_at(obj) if phase in _ENDED else None,
                       containers=old.containers if old is not None and old.containers else
                       tuple(c.get("name", "") for c in spec.get("containers") or ()))
            self._put_pod(key, pod)
            if phase == "Pending" and not deleting and key not in self._reported and not incluster:
                # (An in-cluster pod that does not start is its owner's to see to: Flotilla did not make it.)
                self._starting.setdefault(key, self.clock())
            else:
                self._starting.pop(key, None)
            job_id = job.id
            if phase == "Pending" and not incluster and node is not None and not deleting \
                    and self._reported.get(key) not in _FINAL and pod.waiting != (old.waiting if old else ""):
                self._waiting_news(pod, obj, old)
            try:
                attempt = int((meta.get("annotations") or {}).get(ATTEMPT, "0"))
            except ValueError:
                attempt = 0
            if attempt > self._attempts.get(job_id, -1):
                self._attempts[job_id] = attempt
            current = self._job_pod.get(job_id)
            if current is None or current == key or not deleting:
                self._job_pod[job_id] = key
            if node is not None and job_id not in self._held_ids and attempt == self._attempts[job_id]:
                # (An earlier attempt's pod, still changing, says nothing of the start in flight.)
                if self._inflight.pop(job_id, None) is not None and (old is None or old.node is None) \
                        and phase not in _ENDED:
                    # Bound by this process just now: said as kube-scheduler says it (conditions module).
                    self._report(self.reporter.scheduled, key[0], key[1], pod.uid, node)
                self._unadmit(job_id)
            self._pod_events(pod, job_id, superseded=attempt < self._attempts[job_id])
        else:
            if old is not None and old.requests is not None:
                requests, ports = old.requests, old.ports
            else:
                requests, ports = pod_requests(obj), pod_host_ports(spec)
            labels = meta.get("labels") or {}
            foreign = old.foreign if old is not None and old.foreign is not None and \
                old.foreign.labels == labels and old.foreign.terminating == deleting else \
                foreign_pod(key, labels, spec, deleting)
            self._put_pod(key, _Pod(key, node, phase, deleting, requests=requests, ports=ports,
                                    foreign=foreign))
            self._note_undecided(key, obj, node, phase, deleting, requests)

    def _waiting_news(self, pod: _Pod, obj: dict, old: _Pod | None) -> None:
        """A pod of ours waits on its node for a new reason: say it (the job's status shows it), or fail the job
        when its image will never come (a permanent pull failure, or ``IMAGE_PULL_BACKOFFS`` back-offs)."""
        found = waiting_container(obj)
        if found is not None:
            _, reason, message = found
            if reason == "ImagePullBackOff" and (old is None or ": ImagePullBackOff" not in old.waiting):
                self._pull_backoffs[pod.key] = self._pull_backoffs.get(pod.key, 0) + 1
            backoffs = self._pull_backoffs.get(pod.key, 0)
            if permanent_pull_failure(reason, message) or backoffs >= IMAGE_PULL_BACKOFFS:
                why = pod.waiting if backoffs < IMAGE_PULL_BACKOFFS else \
                    f"{pod.waiting} (the kubelet backed off pulling {backoffs} times)"
                self._give_up(pod, f"image not pulled: {why}", "", self._grace_of(pod.key, pod.job), kind="failed")
                return
        self._emit(pod.job.id, "waiting", pod.node, pod.waiting, run=self._starts.get(pod.job.id, 0) or None)

    def _pod_events(self, pod: _Pod, job_id: str, superseded: bool = False) -> None:
        """Report what ``pod`` shows of its job; ``superseded``: the job has a newer attempt's pod, so this one's
        end (a kept finished pod seen again after a restart) is old news, never said."""
        reported = self._reported.get(pod.key)
        if pod.phase == "Succeeded" and pod.key in self._lost_on_node:
            # Given up while its node was NotReady, it finished meanwhile: the run succeeded after all. Said
            # whatever the job does now (queued again, or rerun): the service keeps the success, stops a rerun.
            self._lost_on_node.discard(pod.key)
            self._reported[pod.key] = "succeeded"
            self._events.append((JobEvent(job_id, "succeeded", self.name, pod.node, self.clock(),
                                          f"succeeded on node {pod.node}, reported once the node returned",
                                          cause=NODE_RETURNED), None))
            return
        if reported in _FINAL:
            return
        if superseded and pod.phase in _ENDED:
            self._reported[pod.key] = "succeeded" if pod.phase == "Succeeded" else "failed"
            self._keep_or_delete_finished(pod)
            return
        if pod.phase == "Running" and reported is None and not pod.deleting:
            self._reported[pod.key] = "running"
            self._emit(job_id, "running", pod.node)
        elif pod.phase in _ENDED:
            kind = "succeeded" if pod.phase == "Succeeded" else "failed"
            refused = pod.reason.split(":", 1)[0]
            if kind == "failed" and refused in PLATFORM_FAILURES:
                kind = "lost"   # the platform's doing, not the job's: retried
            elif kind == "failed" and not pod.incluster and admission_rejection(refused):
                kind = "returned"   # refused by the kubelet: the node was the wrong place then (admission module)
            if reported is None and (pod.phase == "Succeeded" or (kind == "failed" and pod.exit_code is not None)):
                # Seen only once ended (a short container between two looks): its container did run.
                self._emit(job_id, "running", pod.node)
            self._reported[pod.key] = kind
            if kind == "succeeded":
                self._emit(job_id, kind, pod.node)
            elif kind == "returned":
                self.counters["returned"] += 1
                node = self._nodes.get(pod.node) if pod.node is not None else None
                self._emit(job_id, kind, pod.node, f"refused by the kubelet of node {pod.node}: {pod.reason}",
                           cause=returned_label(refused, node.resources if node is not None else None))
            else:
                self._emit(job_id, kind, pod.node, pod.reason, exit_code=pod.exit_code, cause=pod.cause)
            self._keep_or_delete_finished(pod)

    def _keep_or_delete_finished(self, pod: _Pod) -> None:
        """Keep an ended pod of ours (holding nothing) for ``finished_pod_retention`` so that its log can be read,
        counted from the pod's own end (a restarted process does not keep it another full term); delete it at once
        without a retention. An in-cluster pod is its owner's and stays."""
        if not self.delete_finished or pod.deleting or pod.incluster:
            return
        self._ignore_delete.add(pod.key)
        if self.finished_pod_retention > 0:
            now = self.clock()
            ended = now if pod.finished_at is None else min(now, pod.finished_at)
            self._finished[pod.key] = ended + self.finished_pod_retention
            for item in pod.owned:   # a kept pod is kept for its log: its services and ingresses go with the job
                self._pool.submit(self._delete_object, pod.key[0], item)
            pod.owned = ()   # deleted now: the pod's own delete, an hour on, has none left to delete again
        else:
            self._pool.submit(self._delete_finished, pod.key)

    # -- reading back (tests, tools) ---------------------------------------------------------
    def pods_by_node(self) -> dict[str, list[str]]:
        """Job ids of our live (not deleting, not finished) pods per node, from the informer's copy."""
        out: dict[str, list[str]] = {}
        with self._lock:
            for pod in self._pods.values():
                if pod.job is not None and not pod.deleting and pod.phase not in _ENDED:
                    out.setdefault(pod.node or "", []).append(pod.job.id)
        return out


def backend_from_config(cluster_config, config=None, **kwargs) -> KubernetesCluster:
    """A :class:`KubernetesCluster` for a ``kind: kubernetes`` entry of the scheduler config."""
    settings = pod_settings(cluster_config, config)
    pcs = []
    if config is not None:
        pcs = [(pc.name, pc.priority, pc.preemptible) for pc in getattr(config, "priority_classes", []) or []]
    options = dict(
        kubeconfig=getattr(cluster_config, "kubeconfig", None) or "~/.kube/config",
        context=getattr(cluster_config, "context", None),
        settings=settings,
        priority_classes=pcs,
    )
    if getattr(cluster_config, "in_cluster", False):
        workers = getattr(cluster_config, "workers", None) or 32
        options["client"] = KubeClient.from_in_cluster(pool_size=max(8, workers + volume_writers(workers) + 6))
    for attr, key in (("bind", "bind"), ("workers", "workers"), ("node_selector", "node_selector"),
                      ("delete_finished", "delete_finished"), ("stuck_pod_expiry", "stuck_pod_expiry"),
                      ("node_lost_timeout", "node_lost_timeout"), ("volume_bind_timeout", "volume_bind_timeout"),
                      ("finished_pod_retention", "finished_pod_retention")):
        value = getattr(cluster_config, attr, None)
        if value is not None:
            options[key] = value
    spread = getattr(config, "pod_topology_spread", None)
    if spread is not None and spread.constraints():
        options["default_spread"] = spread.constraints()
    options.update(kwargs)
    return KubernetesCluster(cluster_config.name, **options)


def _seconds(value, default: float | None) -> float | None:
    if value is None:
        return default
    if hasattr(value, "total_seconds"):
        return float(value.total_seconds())
    try:
        return parse_duration(value)
    except QuantityError:
        return default


def pod_settings(cluster_config=None, config=None) -> PodSettings:
    """Pod settings from the scheduler config: namespace, grace period default, cpu/gpu deadlines."""
    grace = getattr(config, "grace_period", None) if config is not None else None
    deadlines = getattr(config, "deadlines", None) if config is not None else None

    def pick(obj, *names):
        for n in names:
            if obj is None:
                return None
            if isinstance(obj, Mapping):
                if n in obj:
                    return obj[n]
            elif getattr(obj, n, None) is not None:
                return getattr(obj, n)
        return None

    defaults = PodSettings()
    return PodSettings(
        namespace=getattr(cluster_config, "namespace", None) or defaults.namespace,
        name_prefix=getattr(cluster_config, "pod_name_prefix", None) or defaults.name_prefix,
        scheduler_name=getattr(cluster_config, "scheduler_name", None) or defaults.scheduler_name,
        grace_default=_seconds(pick(grace, "default"), defaults.grace_default),
        deadline_cpu=_seconds(pick(deadlines, "cpu"), defaults.deadline_cpu),
        deadline_gpu=_seconds(pick(deadlines, "gpu"), defaults.deadline_gpu),
        ingress_domain=getattr(cluster_config, "ingress_domain", None),
    )


__all__ = ["KubernetesCluster", "annotation_duration", "backend_from_config", "pod_settings"]
