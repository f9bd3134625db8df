"""The Kubernetes cluster backend's facade: :class:`KubernetesCluster`, composing the parts of
:mod:`flotilla.kubernetes.backend` (the package docstring lists them); the rules of the whole are here.

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
``stuck_pod_expiry`` is given up (``lost``: the job is retried)
(:mod:`flotilla.kubernetes.backend.held`).

The bind's own check. Just before each bind, the node is checked against
the live view (every live pod, whoever bound it, and Flotilla's binds not
yet seen); a bind that no longer fits is held when a leaving pod frees the
room, else its job is *returned* to its queue (no retry used), and a
kubelet's admission refusal returns the job too
(:mod:`flotilla.kubernetes.admission`; the check's state and verdict:
:mod:`flotilla.kubernetes.backend.bindguard`).

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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Callable, Iterable, Mapping, Sequence

import structlog

from flotilla.core.backend import NODE_RETURNED, ClusterDecisions, ClusterUnavailable, JobEvent, PodTemplate
from flotilla.core.model import ClusterSnapshot, Job, JobState, Node
from flotilla.core.quantities import QuantityError, parse_duration
from flotilla.core.resources import PODS
from flotilla.kubernetes.admission import admission_rejection, returned_label
from flotilla.kubernetes.backend.bindguard import BIND, HOLD, YIELD, YIELD_BURST, BindGuard
from flotilla.kubernetes.backend.held import HeldStarts
from flotilla.kubernetes.backend.informers import InformerHealth, watch_kind
from flotilla.kubernetes.backend.namespaces import NamespaceView
from flotilla.kubernetes.backend.podcache import ENDED, FINAL, CachedPod, PodCache
from flotilla.kubernetes.backend.priorityclasses import PriorityClasses
from flotilla.kubernetes.backend.reporting import Reporting
from flotilla.kubernetes.backend.victimlogs import VictimLogs, read_tails
from flotilla.kubernetes.backend.writes import PodWrites, WriteRefused
from flotilla.kubernetes.client import ApiError, KubeClient, Unreachable, forbidden_message
from flotilla.kubernetes.intake import (JOBS_PATH, JOBSETS_PATH, PODGROUPS_PATH, POD_NAME, POD_NAMESPACE, POD_UID,
                                        SELECTOR_INFORMERS, IntakeTracker, bound_by_flotilla)
from flotilla.kubernetes.pods import (ATTEMPT, DURATION, JOB_ID, PodSettings, disruption, failure_details, failure_reason,
                                      foreign_pod, is_ours, job_deadline, job_from_pod, job_grace_period, job_namespace,
                                      named_grace_period, node_from_object, node_ready, permanent_pull_failure,
                                      pod_finished_at, pod_host_ports, pod_phase, pod_requests, waiting_container,
                                      waiting_reason)
from flotilla.kubernetes.priorityclasses import PRIORITY_CLASSES_PATH
from flotilla.kubernetes.services import OWNED
from flotilla.kubernetes.volumes import INFORMERS as VOLUME_INFORMERS
from flotilla.kubernetes.volumes import SELECTED_NODE, VolumeState

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


#: Pod failure reasons that are the platform's, not the job's: the job is retried, not failed.
PLATFORM_FAILURES = frozenset({"Evicted", "NodeLost", "Shutdown", "NodeShutdown", "Terminated"})


#: A pod of ours whose image the kubelet has backed off pulling this many times fails its job (its message said).
IMAGE_PULL_BACKOFFS = 3


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
        #: The pod informer's copy of the pods, indexed per node (flotilla.kubernetes.backend.podcache).
        self.cache = PodCache()
        self._job_pod: dict[str, tuple[str, str]] = {}   # job id -> its live pod
        self._attempts: dict[str, int] = {}
        self._inflight: dict[str, Job] = {}              # started, pod not seen yet
        #: The bind's own check: Flotilla's binds not seen yet, other schedulers' pods not placed yet
        #: (flotilla.kubernetes.backend.bindguard).
        self.guard = BindGuard(self.client, name, self.settings.scheduler_name, self.clock)
        self._settle_timer: threading.Timer | None = None   # retries held starts once such a burst is over
        #: Starts waiting for room on their node (flotilla.kubernetes.backend.held).
        self.held_starts = HeldStarts()
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
        #: Preempted pods' log tails (flotilla.kubernetes.backend.victimlogs), each for finished_pod_retention.
        self.victim_logs = VictimLogs()
        self._events: deque[tuple[JobEvent, int | None]] = deque()   # (event, the run it is about)
        #: Whether the nodes' and pods' informers are in sync, and the other informers' last errors
        #: (flotilla.kubernetes.backend.informers).
        self.health = InformerHealth(name, self._lock)
        #: The namespaces' labels, and those being deleted (flotilla.kubernetes.backend.namespaces).
        self.namespaces = NamespaceView()
        self._requests_cache: dict = {}
        #: The waiting in-cluster pods (flotilla.kubernetes.intake), kept from the pod, namespace, PodGroup and Job
        #: watches.
        #: Cluster default spread constraints for in-cluster pods without their own (config podTopologySpread).
        self.intake = IntakeTracker(self.settings.scheduler_name, default_spread=tuple(default_spread))
        #: The config's priority classes made sure of, and the cluster's own from their watch
        #: (flotilla.kubernetes.backend.priorityclasses).
        self.priority_classes = PriorityClasses(self.client, name, priority_classes)
        #: Flotilla's word on in-cluster pods and PodGroups, written by a pool of its own
        #: (flotilla.kubernetes.backend.reporting).
        self.reporting = Reporting(self.client, name, self.settings.scheduler_name, self._lock, self._stop,
                                   self.namespaces.writable)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"kube-{name}")
        #: The requests that create, bind and delete pods and their services (flotilla.kubernetes.backend.writes).
        self.writes = PodWrites(self.client, name, self.settings, bind)
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
            thread = threading.Thread(target=watch_kind, args=(kind, path, params), kwargs=dict(
                cluster=self.name, client=self.client, stop=self._stop, watch_timeout=self.watch_timeout,
                lock=self._lock, counters=self.counters, before_list=self._before_list, on_list=self._replace,
                on_event=self._on_event, absent=self._absent, failed=self._informer_failed), daemon=True,
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
        self.reporting.close()
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
        return self.health.available

    @property
    def sync_error(self) -> str:
        """Why the cluster cannot be read (``not synced yet``, or an informer's last error)."""
        return self.health.error

    @property
    def namespace(self) -> str:
        """Where jobs that name no namespace go (the cluster's ``namespace`` setting)."""
        return self.settings.namespace

    # -- protocol ------------------------------------------------------------------------
    def snapshot(self) -> ClusterSnapshot:
        with self._lock:
            if not self.available:
                raise ClusterUnavailable(f"cluster {self.name}: {self.health.error}")
            nodes = list(self._nodes.values())
            running: list[Job] = []
            seen: set[str] = set()
            known = self._nodes
            # Everyone else's pods, as their events left them; then ours, one by one (names bound locally: this
            # loop is per pod and per cycle).
            foreign, foreign_ports = self.cache.foreign_use(known)
            stopping, job_pod_of, reported_of = self._stopping, self._job_pod.get, self._reported.get
            stopped = self._stopped
            append, see = running.append, seen.add
            for pod in self.cache.own.values():
                node = pod.node
                if node is None or node not in known or pod.phase in ENDED:
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
            foreign_pods = self.cache.foreign_pods(known)
            volumes = self.volumes.view(self.health.side_errors)
        return ClusterSnapshot(self.name, nodes, running, foreign, foreign_pods, volumes=volumes,
                               foreign_ports=foreign_ports, namespace_labels=self.namespaces.labels)

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
        if decisions.start:
            self.guard.presence.new_cycle()   # its first bind tells whether another scheduler is active (admission)
        for kind, jobs in (("preempted", decisions.preempt), ("cancelled", decisions.cancel)):
            for job in jobs:
                if job.id in self.held_starts.ids:
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
            if job.id in self.held_starts.ids:   # started again elsewhere: the old hold is void
                self._drop_held(job.id, None)
            self._inflight[job.id] = running
            template = decisions.templates.get(job.id)
            if job.claims and (placement.volumes or self.volumes.unbound(job.claims)):
                # Its claims are bound first (flotilla.kubernetes.volumes); the pod comes once they are.
                self.volumes.assume(placement.volumes, placement.node)
                if self._nothing_to_write(placement.volumes, placement.node):
                    # Written already (a start given back and placed again while the PV controller binds): it
                    # waits for its claims at once, not behind other starts' writes.
                    self._await_claims(running, placement.node, attempt, template, placement.volumes,
                                       self._starts[job.id])
                    continue
                work.append((self._bind_volumes, running, placement.node, attempt, template, placement.volumes,
                             self._starts[job.id]))
                continue
            self._start_pod(running, placement.node, attempt, template, work.append)

    def _start_pod(self, running: Job, node: str, attempt: int, template, submit) -> None:
        """Create the pod of a start now, or hold it until its node has room (module docstring, Held starts)."""
        if node not in self.held_starts.by_node and not self._leaving(node):
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
                ref = patch.get("spec", {}).get("claimRef")
                for tries in range(3):
                    try:
                        self.client.patch(path, patch)
                        break
                    except ApiError as exc:
                        # A PV changed since the informer saw it (its phase set, say): read it again and write with
                        # its version while it is still free for the claim; taken meanwhile, the choice is void.
                        if exc.status != 409 or ref is None or tries == 2:
                            raise
                        version = self.volumes.still_free(self.client.get(path), f"{ref['namespace']}/{ref['name']}")
                        if version is None:
                            raise LookupError(f"{path.rsplit('/', 1)[-1]} was bound to another claim meanwhile") \
                                from None
                        patch["metadata"]["resourceVersion"] = version
                if ref is not None:   # taken until the PV informer shows it (VolumeState.written)
                    with self._lock:
                        self.volumes.wrote(path.rsplit("/", 1)[-1], f"{ref['namespace']}/{ref['name']}")
        except (LookupError, ApiError, Unreachable) as exc:
            why = forbidden_message(exc) if isinstance(exc, ApiError) and exc.status == 403 else str(exc)
            with self._lock:
                self.volumes.forget(choices)
            self._create_failed(job, node, "lost", f"binding volumes: {why}")
            return
        with self._lock:
            self._await_claims(job, node, attempt, template, choices, started)

    def _nothing_to_write(self, choices, node: str) -> bool:
        """Whether binding ``choices`` on ``node`` needs no API write (under the lock)."""
        try:
            return not self.volumes.bind_requests(choices, node)
        except LookupError:
            return False   # the writer says why

    def _await_claims(self, job: Job, node: str, attempt: int, template, choices, started: int) -> None:
        """Wait for the job's claims to be bound, then start its pod (under the lock; the writes are done)."""
        if self._starts.get(job.id) != started or job.id not in self._inflight:
            self.volumes.forget(choices)
            return
        self._volume_waits[job.id] = (job, node, attempt, template, choices, started,
                                      self.clock() + self.volume_bind_timeout)
        for claim in job.claims:
            self._waits_on_claim.setdefault(self.volumes.qualified(claim), set()).add(job.id)
        self._check_volume_waits((job.id,))

    def _check_volume_waits(self, job_ids=None, expired_only: bool = False) -> None:
        """Start the waiting jobs whose claims are all bound; return to its queue one whose binding failed or timed
        out (under the lock). ``job_ids``: only these (the jobs waiting for a claim that changed); None: all.
        ``expired_only``: the claims of a job are looked at only once its time is up (the periodic pass: a claim's
        binding is seen through its own event)."""
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
            if expired_only and now < deadline:
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
        if self.held_starts.hold(node, job, attempt, template, self._starts.get(job.id, 0), self.clock(), nominate):
            self.reporting.submit(self.reporter.nominated, job.annotations[POD_NAMESPACE], job.annotations[POD_NAME],
                                  job.annotations[POD_UID], node,
                                  f"waiting on node {node} for the pods leaving it (preempted) to be gone")

    def _mark_stopped(self, key: tuple[str, str] | None) -> None:
        """Leave pod ``key`` out of the snapshots from now on: Flotilla deletes it by a decision (module docstring,
        Stopped pods). Not a pod already being deleted by someone else or given up: their room was never given."""
        pod = self.cache.get(key) if key is not None else None
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
            pod = self.cache.get(key)
            if pod is None or pod.node is None or pod.phase in ENDED:
                continue
            log.warning("kubernetes.stopped_pod_stuck", cluster=self.name, job=pod.job.id, node=pod.node,
                        pod=f"{key[0]}/{key[1]}")
            for job, _, _, started in list(self.held_starts.by_node.get(pod.node, ())):
                if job.id not in self.held_starts.ids or self._starts.get(job.id) != started:
                    continue   # stale: stopped or started again since
                log.warning("kubernetes.held_start_given_up", cluster=self.name, job=job.id, node=pod.node)
                self._drop_held(job.id, None)
                self._emit(job.id, "lost", pod.node,
                           f"node {pod.node} has no room for the pod: {pod.job.id}'s pod has been terminating "
                           f"for stuckPodExpiry {self.stuck_pod_expiry:g}s ({key[0]}/{key[1]})", cause="Stuck")

    def _leaving(self, node: str) -> bool:
        """Whether a pod on ``node`` is on its way out (deleted, or ours being stopped) and still holds room."""
        return any(pod.phase not in ENDED
                   and (pod.deleting or (pod.job is not None and pod.job.id in self._stopping))
                   for pod in self.cache.of_node(node))

    def _release_held(self, node: str) -> None:
        """Create the pods of the starts held for ``node`` that now fit, in order (flotilla.kubernetes.backend.held)."""
        if not self.held_starts.by_node.get(node):
            return
        target = self._nodes.get(node)
        load = self.held_starts.node_load(node, self.cache.of_node(node), self._inflight) \
            if target is not None else None
        for job, attempt, template in self.held_starts.release(node, target, load, lambda: self._leaving(node),
                                                               self._starts):
            self._pool.submit(self._create, job, node, attempt, template)

    def _drop_held(self, job_id: str, kind: str | None) -> None:
        """Forget a held start; ``kind`` (preempted, cancelled, lost): report the job so, no pod was made."""
        self.held_starts.ids.discard(job_id)
        self.guard.yielding.pop(job_id, None)
        self._unadmit(job_id)
        job = self._inflight.pop(job_id, None)
        if job is not None and job_id in self.held_starts.nominated:   # its nomination ends with the hold
            self.held_starts.nominated.discard(job_id)
            self.reporting.submit(self.reporter.nominated, job.annotations[POD_NAMESPACE], job.annotations[POD_NAME],
                                  job.annotations[POD_UID], None)
        self.held_starts.forget(job_id)
        if kind is not None:
            reason = {"preempted": "preempted by the scheduler", "cancelled": "cancelled"}.get(kind, kind)
            self._emit(job_id, kind, job.node if job is not None else None, reason, run=self._starts.get(job_id, 0))

    def held(self) -> dict[str, list[str]]:
        """Job ids of the starts held per node, in order (tests, tools)."""
        with self._lock:
            return self.held_starts.job_ids()

    # -- the live check just before a bind (flotilla.kubernetes.admission) ---------------------------
    def _admit(self, job: Job, node: str, attempt: int, template: PodTemplate | None) -> bool:
        """Whether ``job``'s pod may be bound to ``node`` now, checked against the live view (module
        :mod:`flotilla.kubernetes.admission`), read afresh while another scheduler is active; if so, its room is
        reserved until the watch shows the pod. Otherwise the start is held for the node when the room comes once
        its leaving pods are gone, else the job is returned to its queue with the reason."""
        fresh = self.guard.read_afresh(node)   # outside the lock: a round trip to the API server
        with self._lock:
            target = self._nodes.get(node)
            if target is None:
                return True   # gone from the watch: the bind itself says what becomes of it
            load, pods, leaving, gone = self.guard.live_use(node, self.cache.of_node(node), self._stopping)
            unseen: dict = {}
            if fresh is not None:
                fresh_load, fresh_pods, unseen = self.guard.fresh_view(target, fresh, self._inflight)
                load = {r: max(load.get(r, 0), fresh_load.get(r, 0)) for r in set(load) | set(fresh_load)}
                pods = max(pods, fresh_pods)
            verdict, detail = self.guard.verdict(job, node, target, load, pods, leaving, gone, unseen,
                                                 self.clock)
            if verdict == BIND:
                self.held_starts.nominated.discard(job.id)
                return True
            if verdict in (YIELD_BURST, YIELD):
                self._hold(node, job, attempt, template, nominate=False)
                if verdict == YIELD_BURST:
                    self._settle_later(detail)
                return False
            if verdict == HOLD:
                self._hold(node, job, attempt, template)
                return False
            short = detail
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
        """Keep the other schedulers' pods not placed yet (flotilla.kubernetes.backend.bindguard)."""
        if self.guard.note_pod(key, obj, node, phase, deleting, requests, self.clock):
            self._release_all_held()   # decided (bound, or found unschedulable): room held for it may go now

    def _release_all_held(self) -> None:
        for name in list(self.held_starts.by_node):
            self._release_held(name)

    def _settle_later(self, now: float) -> None:
        """Try the held starts again once the other scheduler's burst is over: no pod event may come to do it."""
        if self._settle_timer is not None and self._settle_timer.is_alive():
            return
        timer = threading.Timer(self.guard.settle_delay(now), self._settle)
        timer.name, timer.daemon = f"kube-{self.name}-settle", True
        self._settle_timer = timer
        timer.start()

    def _settle(self) -> None:
        with self._lock:
            self._settle_timer = None
            if not self._stop.is_set():
                self._release_all_held()

    def _unadmit(self, job_id: str) -> None:
        """Forget ``job_id``'s reserved room: its pod is seen by the watch, or its start is over."""
        self.guard.unadmit(job_id)

    def poll_events(self) -> list[JobEvent]:
        with self._lock:
            now = self.clock()
            self._give_up_stuck_and_lost(now)
            self._delete_expired(now)
            if self._volume_waits:
                self._check_volume_waits(expired_only=True)
            # An event about an earlier run of a job started again since (a delete that finished late) is
            # dropped: the service would take it for news about the new run.
            events = [ev for ev, run in self._events if run is None or run == self._starts.get(ev.job_id, 0)]
            self._events.clear()
        return events

    # -- writes (pool threads) ----------------------------------------------------------------
    def _emit(self, job_id: str, kind: str, node: str | None, reason: str = "", run: int | None = None,
              exit_code: int | None = None, cause: str = "") -> None:
        self._events.append((JobEvent(job_id, kind, self.name, node, self.clock(), reason, exit_code, cause), run))

    def _create(self, job: Job, node: str, attempt: int, template: PodTemplate | None = None) -> None:
        with self.guard.turn(node):   # beside another scheduler, a node's binds one at a time (bindguard)
            self._create_in_turn(job, node, attempt, template)

    def _create_in_turn(self, job: Job, node: str, attempt: int, template: PodTemplate | None) -> None:
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
        try:
            name, created = self.writes.create(job, node, attempt, namespace, template, duration,
                                               self.priority_classes.known(job.priority_class), exposed,
                                               self._name_taken(job.id))
        except WriteRefused as refused:
            self._create_failed(job, node, refused.kind, refused.reason)
            return
        if exposed and not self._expose(job, node, created, template):
            return
        with self._lock:
            self.counters["created"] += 1
            self._job_pod[job.id] = (namespace, name)
            kill = self._kill_on_create.pop(job.id, None)
        if kill is not None:
            self._delete(job, (namespace, name), kill, self._starts.get(job.id, 0))

    def _name_taken(self, job_id: str):
        """Note the attempts whose pod names were found taken (a pod of an earlier attempt still terminating)."""
        def taken(attempt: int) -> None:
            with self._lock:
                self._attempts[job_id] = max(self._attempts.get(job_id, 0), attempt)
        return taken

    def _bind(self, job: Job, node: str) -> None:
        """Bind an in-cluster pod to ``node`` (``pods/binding``), only the very pod that was queued (its uid)."""
        try:
            namespace, name = self.writes.bind_pod(job, node)
        except WriteRefused as refused:
            self._create_failed(job, node, refused.kind, refused.reason)
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
        return self.reporting.reporter

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
            return {pod.job.id: (pod.node, pod.phase == "Running") for pod in self.cache.own.values()
                    if pod.incluster and pod.job is not None and pod.node and not pod.deleting
                    and pod.phase not in ENDED}

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
        self.writes.delete_same(namespace, name, uid)

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
        return self.reporting.waiting(notes)

    def report_podgroups(self, reasons: Mapping[tuple[str, str], tuple[str, bool]]) -> int:
        """Write the status of the PodGroups whose pods changed, or whose waiting pods' reason is in ``reasons``
        ((namespace, group) -> (reason, stored in its queue)), where it changed
        (:mod:`flotilla.kubernetes.podgroupstatus`); returns how many writes were started."""
        return self.reporting.podgroups(self.intake, reasons)

    def _expose(self, job: Job, node: str, pod: dict, template: PodTemplate) -> bool:
        """Create the job's services and ingresses, owned by its first pod; on a refusal, remove the pod again."""
        done, refused = self.writes.expose(pod, template)
        if refused is None:
            return True
        namespace = pod["metadata"]["namespace"]
        key = (namespace, pod["metadata"]["name"])
        with self._lock:
            self._reported[key] = "failed"
            self._ignore_delete.add(key)
        self.writes.delete_quietly(key)
        for item in done:
            self.writes.delete_object(namespace, item)
        self._create_failed(job, node, refused.kind, refused.reason)
        return False

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
        pod = self.cache.get(key)
        if kind == "preempted" and pod is not None and pod.incluster:
            # Said before the delete, so that the pod's Job (podFailurePolicy) can tell a preemption from a failure.
            self.reporter.disruption_target(namespace, name, pod.uid,
                                            f"flotilla: preempted by the scheduler to make room for other jobs "
                                            f"(job {job.id})")
        elif kind == "preempted" and pod is not None and pod.job is not None and self.finished_pod_retention > 0 \
                and pod.phase == "Running":
            self._keep_victim_log(pod)
        try:
            self.writes.delete_pod(key, grace)
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
            pod = self.cache.get(key)
            node = pod.node if pod is not None else job.node
            self._emit(job.id, kind, node, "preempted by the scheduler" if kind == "preempted" else "cancelled",
                       run=started)

    def _grace_of(self, key: tuple[str, str], job: Job) -> int | None:
        """The grace period to delete ``job``'s pod with: the job's own when it names one; else None, the pod's
        ``terminationGracePeriodSeconds``, which it was made with (a job rebuilt from its pod names none)."""
        if named_grace_period(job) is None:
            return None
        return job_grace_period(job, self.settings)

    def _delete_expired(self, now: float) -> None:
        """Delete the finished pods whose ``finishedPodRetention`` is over, and forget such preempted pods' logs."""
        self.victim_logs.expire(now)
        if not self._finished:
            return
        for key in [key for key, due in self._finished.items() if due <= now]:
            del self._finished[key]
            self._pool.submit(self.writes.delete_quietly, key)

    def _keep_victim_log(self, pod: CachedPod) -> None:
        """Read the end of each container's log of a preempted pod about to be deleted (Kubernetes keeps no log of
        a deleted pod) and keep it for ``finished_pod_retention`` (flotilla.kubernetes.backend.victimlogs)."""
        logs, cut = read_tails(self.client, self.name, pod.key, pod.containers)
        if not logs:
            return
        with self._lock:
            self.victim_logs.keep(pod.job.id, self.clock() + self.finished_pod_retention,
                                  f"{pod.key[0]}/{pod.key[1]}", logs, cut)

    def kept_log(self, pod_id: str) -> tuple[str, Mapping[str, bytes], bool] | None:
        """The log tails kept of pod ``pod_id`` (a job id, ``JOB#N`` for pod N) when it was preempted: its
        ``namespace/name``, container -> last output, and whether any was cut; None when none are kept."""
        with self._lock:
            return self.victim_logs.get(pod_id, self.clock())

    # -- the platform's failures: stuck pods, lost nodes (checked at every poll) -------------------
    def _give_up(self, pod: CachedPod, reason: str, cause: str, grace: int | None = 0, kind: str = "lost") -> None:
        """Report ``pod``'s job ``lost`` (the service retries it elsewhere; ``kind`` failed: the job's own
        failure) and remove the pod."""
        self._reported[pod.key] = "lost"
        self._stopped.pop(pod.key, None)   # its room counts again (module docstring)
        self._starting.pop(pod.key, None)
        self._ignore_delete.add(pod.key)
        self._emit(pod.job.id, "failed" if pod.incluster else kind, pod.node, reason, cause=cause)
        log.warning("kubernetes.pod_given_up", cluster=self.name, job=pod.job.id, reason=reason)
        self._pool.submit(self.writes.delete_quietly, pod.key, grace)

    def _give_up_held(self, now: float) -> None:
        """Release what fits now; give up starts held on a node where nothing has been leaving for
        ``stuck_pod_expiry`` (their room will not come: the job is retried elsewhere)."""
        for node in list(self.held_starts.by_node):
            self._release_held(node)
            if node not in self.held_starts.by_node:
                continue
            if self._leaving(node) or self.stuck_pod_expiry is None:
                self.held_starts.since[node] = now
                continue
            if now - self.held_starts.since.get(node, now) < self.stuck_pod_expiry:
                continue
            for job, _, _, _ in list(self.held_starts.by_node[node]):
                log.warning("kubernetes.held_start_given_up", cluster=self.name, job=job.id, node=node)
                self._drop_held(job.id, None)
                self._emit(job.id, "lost", node, f"node {node} has no room for the pod and nothing on it is "
                                                  f"leaving (held for stuckPodExpiry {self.stuck_pod_expiry:g}s)",
                           cause="Stuck")

    def _give_up_stuck_and_lost(self, now: float) -> None:
        if self._stopped and self.stuck_pod_expiry is not None:
            self._expire_stopped(now)
        if self.held_starts.by_node:
            self._give_up_held(now)
        if self.stuck_pod_expiry is not None:
            horizon = now - self.stuck_pod_expiry
            for key in [key for key, since in self._starting.items() if since <= horizon]:
                pod = self.cache.get(key)
                if pod is None or pod.job is None or self._reported.get(key) in FINAL:
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
                for pod in self.cache.of_node(name):
                    if pod.job is not None and not pod.deleting \
                            and pod.phase not in ENDED and self._reported.get(pod.key) not in FINAL:
                        # Force (no grace) when the node is gone: no kubelet is left to confirm.
                        grace = 0 if deleted else self._grace_of(pod.key, pod.job)
                        if not deleted:
                            self._lost_on_node.add(pod.key)
                        self._give_up(pod, f"node {name} lost: {what} for {now - since:.0f}s "
                                           f"(nodeLostTimeout {self.node_lost_timeout:g}s)", "NodeLost", grace)

    # -- priority classes ------------------------------------------------------------------
    def cluster_priority_classes(self) -> tuple[int, list]:
        """The cluster's PriorityClass objects as the watch shows them: (a version bumped at every change, the
        :class:`~flotilla.kubernetes.priorityclasses.ClusterPriorityClass` list)."""
        with self._lock:
            return self.priority_classes.view()

    # -- informers (one thread each for nodes, pods, namespaces, PodGroups, PriorityClasses and Jobs) ----------
    def _before_list(self, kind: str) -> None:
        if kind == "pods":
            self.priority_classes.before_pods_list()

    def _absent(self, kind: str, exc: ApiError) -> bool:
        return self.health.absent(kind, exc, self.intake)

    def _replace(self, kind: str, items: list[dict]) -> None:
        if kind == "priorityclasses":
            self.health.side_errors.pop(kind, None)
            self.priority_classes.replace(items)
            return
        if kind in ("jobs", "jobsets"):
            self.health.side_errors.pop(kind, None)
            self.intake.replace_jobs(items, jobsets=kind == "jobsets")
            return
        if kind == "nodes":
            self._replace_nodes(items)
        elif kind == "pods":
            self._replace_pods(items)
        elif kind in VOLUME_INFORMERS:
            self.health.side_errors.pop(kind, None)
            self.volumes.replace(kind, items)
            if self._volume_waits:
                self._check_volume_waits()
            return
        elif kind in SELECTOR_INFORMERS:
            self.health.side_errors.pop(kind, None)
            self.intake.replace_selector_objects(kind, items)
            return
        elif kind == "namespaces":
            self.health.side_errors.pop(kind, None)
            self.namespaces.replace(items)
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
            self.health.side_errors.pop(kind, None)
            self.intake.set_podgroups_problem(None)
            for obj in items:
                self.intake.on_podgroup("MODIFIED", obj)
            self.intake.podgroups_synced = True
            return
        self.health.synced[kind] = True

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
            self.namespaces.on_event(event, obj)
            self.intake.on_namespace(event, obj)
        elif kind in SELECTOR_INFORMERS:
            self.intake.on_selector_object(kind, event, obj)
        elif kind == "priorityclasses":
            self.priority_classes.on_event(event, obj)
        elif kind == "jobs":
            self.intake.on_job(event, obj)
        elif kind == "jobsets":
            self.intake.on_jobset(event, obj)
        else:
            self.intake.on_podgroup(event, obj)

    def _informer_failed(self, kind: str, exc: Exception) -> None:
        if kind in VOLUME_INFORMERS:
            self.volumes.changed()   # the claims' reason names the error
        self.health.failed(kind, exc)

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
        if name in self.held_starts.by_node:   # resized: a held start may fit now
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
        for key in [key for key in self.cache.pods if key not in live]:
            old = self.cache.pods[key]
            self._on_pod("DELETED", {"metadata": {"namespace": key[0], "name": key[1]}, "_cached": old})

    def _on_pod(self, kind: str, obj: dict) -> None:
        self._on_pod_change(kind, obj)
        meta = obj["metadata"]
        self.volumes.on_pod((meta.get("namespace", ""), meta["name"]), None if kind == "DELETED" else obj,
                            pod_phase(obj) not in ENDED if kind != "DELETED" else False)
        if self.held_starts.by_node:
            # A pod gone or finished frees room: the starts held for its node may go now, not a cycle later.
            old = obj.get("_cached")
            node = (obj.get("spec") or {}).get("nodeName") or (old.node if old is not None else None)
            for name in [node] if node is not None else list(self.held_starts.by_node):
                if name in self.held_starts.by_node:
                    self._release_held(name)

    def _on_pod_change(self, kind: str, obj: dict) -> None:
        meta = obj["metadata"]
        key = (meta.get("namespace", ""), meta["name"])
        self.intake.on_pod(kind, obj)
        if kind == "DELETED":
            old = self.cache.pop(key)
            self._stopped.pop(key, None)
            if self.guard.forget_pod(key):
                self._release_all_held()
            if old is None or old.job is None:
                return
            for item in old.owned:   # its services and ingresses go with it (no garbage collector needed)
                self._pool.submit(self.writes.delete_object, key[0], item)
            job_id = old.job.id
            if self._job_pod.get(job_id) == key:
                del self._job_pod[job_id]
            if old.incluster:
                self.reporting.forget(old.uid)
            if key in self._ignore_delete:
                self._ignore_delete.discard(key)
                if self._stopping.get(job_id) and self._reported.get(key) == self._stopping[job_id]:
                    self._stopping.pop(job_id, None)
            elif self._reported.get(key) not in FINAL and job_id not in self.held_starts.ids:
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
        old = self.cache.get(key)
        incluster = not is_ours(obj) and node is not None and bound_by_flotilla(obj, self.settings.scheduler_name)
        if is_ours(obj) or incluster:
            job = old.job if old is not None and old.job is not None and old.node == node else None
            if job is None:
                job = job_from_pod(obj, self.name, self._requests_cache)
            owned = old.owned if old is not None else \
                tuple(item for item in (meta.get("annotations") or {}).get(OWNED, "").split(",") if item)
            exit_code, cause = failure_details(obj) if phase == "Failed" else (None, "")
            pod = CachedPod(key, node, phase, deleting, job=job,
                       reason=failure_reason(obj) if phase == "Failed" else "",
                       waiting=waiting_reason(obj) if phase == "Pending" else "", owned=owned,
                       exit_code=exit_code, cause=cause, incluster=incluster, uid=meta.get("uid", ""),
                       disrupted=disruption(obj) if incluster else "",
                       finished_at=pod_finished_at(obj) if phase in ENDED else None,
                       containers=old.containers if old is not None and old.containers else
                       tuple(c.get("name", "") for c in spec.get("containers") or ()))
            self.cache.put(key, pod)
            if phase == "Pending" and not deleting and key not in self._reported and not incluster:
                # (An in-cluster pod that does not start is its owner's to see to: Flotilla did not make it.)
                self._starting.setdefault(key, self.clock())
            else:
                self._starting.pop(key, None)
            job_id = job.id
            if phase == "Pending" and not incluster and node is not None and not deleting \
                    and self._reported.get(key) not in FINAL and pod.waiting != (old.waiting if old else ""):
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
            if node is not None and job_id not in self.held_starts.ids and attempt == self._attempts[job_id]:
                # (An earlier attempt's pod, still changing, says nothing of the start in flight.)
                if self._inflight.pop(job_id, None) is not None and (old is None or old.node is None) \
                        and phase not in ENDED:
                    # Bound by this process just now: said as kube-scheduler says it (conditions module).
                    self.reporting.submit(self.reporter.scheduled, key[0], key[1], pod.uid, node)
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
            self.cache.put(key, CachedPod(key, node, phase, deleting, requests=requests, ports=ports,
                                    foreign=foreign))
            self._note_undecided(key, obj, node, phase, deleting, requests)

    def _waiting_news(self, pod: CachedPod, obj: dict, old: CachedPod | None) -> None:
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

    def _pod_events(self, pod: CachedPod, job_id: str, superseded: bool = False) -> None:
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
        if reported in FINAL:
            return
        if superseded and pod.phase in ENDED:
            self._reported[pod.key] = "succeeded" if pod.phase == "Succeeded" else "failed"
            self._keep_or_delete_finished(pod)
            return
        if pod.phase == "Running" and reported is None and not pod.deleting:
            self._reported[pod.key] = "running"
            self._emit(job_id, "running", pod.node)
        elif pod.phase in ENDED:
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

    def _keep_or_delete_finished(self, pod: CachedPod) -> None:
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
                self._pool.submit(self.writes.delete_object, pod.key[0], item)
            pod.owned = ()   # deleted now: the pod's own delete, an hour on, has none left to delete again
        else:
            self._pool.submit(self.writes.delete_quietly, pod.key)

    # -- reading back (tests, tools) ---------------------------------------------------------
    def pods_by_node(self) -> dict[str, list[str]]:
        """Job ids of our live (not deleting, not finished) pods per node, from the informer's copy."""
        out: dict[str, list[str]] = {}
        with self._lock:
            for pod in self.cache.pods.values():
                if pod.job is not None and not pod.deleting and pod.phase not in ENDED:
                    out.setdefault(pod.node or "", []).append(pod.job.id)
        return out


__all__ = ["KubernetesCluster", "annotation_duration", "volume_writers"]
