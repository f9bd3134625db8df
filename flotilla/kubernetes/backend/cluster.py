"""The Kubernetes cluster backend's facade: :class:`KubernetesCluster`, composing the parts of
:mod:`flotilla.kubernetes.backend` (the package docstring lists them); the rules of the whole are here.

Reading. One informer thread per watched kind keeps an in-memory copy of
the cluster current: list once, then watch from the list's version
(:mod:`flotilla.kubernetes.backend.informers`); what each listing and event
changes, in which part, is :mod:`flotilla.kubernetes.backend.dispatch`'s.
``snapshot()`` reads that copy and sends no request: our pods' jobs are
running on their nodes, everyone else's live pods (and ours no longer their
jobs', until gone) are the nodes' foreign usage, ended pods hold nothing, and
while the nodes or the pods are not in sync there is no snapshot
(:mod:`flotilla.kubernetes.backend.snapshots`). Ended pods of ours are kept
for ``finished_pod_retention`` (counted from the pod's own end, so a
restarted process keeps none longer) for their logs, then deleted.

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
next snapshot on the scheduler sees the node as the kubelet does
(:mod:`flotilla.kubernetes.backend.stops`).

Writing. ``apply()`` returns at once: a small thread pool creates the
started jobs' pods already bound (``spec.nodeName``; or, with
``bind="binding"``, pending and then bound through the ``binding``
subresource) and deletes the preempted and cancelled jobs' pods with their
grace period. Until the watch shows a new pod, the job is counted on its
node anyway (so the next cycle cannot double-book it). A start whose claims
need binding first (flotilla.kubernetes.volumes) has its volume writes made by
a second, smaller pool and then waits, holding no thread, until the claims'
watch events show them bound; each claim's event looks only at the starts
waiting for that claim (:mod:`flotilla.kubernetes.backend.volumewaits`).

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
(:mod:`flotilla.kubernetes.backend.held`; the start path:
:mod:`flotilla.kubernetes.backend.starts`).

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
the API server was unreachable (the job may go elsewhere)
(:mod:`flotilla.kubernetes.backend.podevents`; pods stuck and nodes lost:
:mod:`flotilla.kubernetes.backend.lostpods`).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, Mapping, Sequence

import structlog

from flotilla.core.backend import ClusterDecisions, JobEvent
from flotilla.core.model import ClusterSnapshot, Job, Node
from flotilla.kubernetes.backend.bindguard import BindGuard
from flotilla.kubernetes.backend.dispatch import Dispatch, watched
from flotilla.kubernetes.backend.held import HeldStarts
from flotilla.kubernetes.backend.informers import InformerHealth, watch_kind
from flotilla.kubernetes.backend.ledger import Ledger
from flotilla.kubernetes.backend.lostpods import LostPods
from flotilla.kubernetes.backend.namespaces import NamespaceView
from flotilla.kubernetes.backend.podcache import PodCache
from flotilla.kubernetes.backend.podevents import PodEvents
from flotilla.kubernetes.backend.priorityclasses import PriorityClasses
from flotilla.kubernetes.backend.reporting import Reporting
from flotilla.kubernetes.backend.snapshots import Snapshots
from flotilla.kubernetes.backend.starts import Starts, annotation_duration
from flotilla.kubernetes.backend.stops import Stops
from flotilla.kubernetes.backend.victimlogs import VictimLogs, read_tails
from flotilla.kubernetes.backend.volumewaits import VolumeWaits, volume_writers
from flotilla.kubernetes.backend.writes import PodWrites
from flotilla.kubernetes.client import KubeClient
from flotilla.kubernetes.intake import IntakeTracker
from flotilla.kubernetes.pods import PodSettings
from flotilla.kubernetes.volumes import VolumeState

log = structlog.get_logger("flotilla.kubernetes")


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
        self.clock = clock
        #: Claims, volumes and storage classes (flotilla.kubernetes.volumes).
        self.volumes = VolumeState(self.settings.namespace)

        self._lock = threading.RLock()
        self._stop = threading.Event()
        #: The nodes as the node watch shows them, kept by the dispatch (changed in place, never replaced).
        self.nodes: dict[str, Node] = {}
        #: The pod informer's copy of the pods, indexed per node (flotilla.kubernetes.backend.podcache).
        self.cache = PodCache()
        #: The bookkeeping of our jobs and pods, and the events to say (flotilla.kubernetes.backend.ledger).
        self.book = Ledger(name, lambda: self.clock())
        #: The bind's own check: Flotilla's binds not seen yet, other schedulers' pods not placed yet
        #: (flotilla.kubernetes.backend.bindguard).
        self.guard = BindGuard(self.client, name, self.settings.scheduler_name, self.clock)
        #: Starts waiting for room on their node (flotilla.kubernetes.backend.held).
        self.held_starts = HeldStarts()
        #: Preempted pods' log tails (flotilla.kubernetes.backend.victimlogs), each for finished_pod_retention.
        self.victim_logs = VictimLogs()
        #: Whether the nodes' and pods' informers are in sync, and the other informers' last errors
        #: (flotilla.kubernetes.backend.informers).
        self.health = InformerHealth(name, self._lock)
        #: The namespaces' labels, and those being deleted (flotilla.kubernetes.backend.namespaces).
        self.namespaces = NamespaceView()
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
        self.counters = {"created": 0, "deleted": 0, "create_errors": 0, "relists": 0, "watch_events": 0,
                         "returned": 0}
        #: The start path: pods made now, held for their node, or checked just before their bind
        #: (flotilla.kubernetes.backend.starts).
        self.starts = Starts(name, self._lock, self._stop, self.book, self.cache, self.settings, self.book.clock,
                             self.counters, guard=self.guard, held=self.held_starts, writes=self.writes,
                             reporting=self.reporting, volumes=self.volumes, node_of=self.nodes.get,
                             pcs_known=self.priority_classes.known, duration_of=duration_of,
                             submit=lambda *task: self._pool.submit(*task),
                             claims_first=lambda *args: self.volume_waits.start(*args),
                             delete=lambda *args: self.stops.delete(*args))
        #: The stop path: stopped pods left out of the snapshots and deleted (flotilla.kubernetes.backend.stops).
        self.stops = Stops(name, self._lock, self.book, self.cache, self.settings, self.book.clock, self.counters,
                           client=self.client, held=self.held_starts, writes=self.writes, reporting=self.reporting,
                           victim_logs=self.victim_logs, read_tails=read_tails, drop_held=self.starts.drop_held,
                           finished_pod_retention=finished_pod_retention)
        #: The starts waiting for their claims to be bound (flotilla.kubernetes.backend.volumewaits).
        self.volume_waits = VolumeWaits(self._lock, self.book, self.volumes, self.client, self.book.clock,
                                        volume_bind_timeout,
                                        start_pod=lambda *args: self.starts.start_pod(*args),
                                        create_failed=lambda *args: self.starts.create_failed(*args),
                                        submit=lambda *task: self._pool.submit(*task))
        #: The platform's failures: stuck pods, lost nodes, held starts whose room never comes
        #: (flotilla.kubernetes.backend.lostpods).
        self.lost_pods = LostPods(name, self.book, self.cache, self.held_starts, self.settings, self.book.clock,
                                  stuck_pod_expiry, node_lost_timeout,
                                  lambda key, grace: self._pool.submit(self.writes.delete_quietly, key, grace),
                                  self.starts.release_held, self.starts.drop_held, self.starts.leaving)
        #: What a pod's change means for the cache and for its job (flotilla.kubernetes.backend.podevents).
        self.pod_events = PodEvents(name, self.book, self.cache, self.settings, self.book.clock, self.counters,
                                    intake=self.intake, guard=self.guard, held=self.held_starts,
                                    reporting=self.reporting, writes=self.writes, node_of=self.nodes.get,
                                    give_up=self.lost_pods.give_up, submit=lambda *task: self._pool.submit(*task),
                                    release_all_held=self.starts.release_all_held, delete_finished=delete_finished,
                                    finished_pod_retention=finished_pod_retention)
        #: What each watch event changes, in which part (flotilla.kubernetes.backend.dispatch).
        self.dispatch = Dispatch(name, self.nodes, self.cache, self.book, health=self.health, intake=self.intake,
                                 namespaces=self.namespaces, priority_classes=self.priority_classes,
                                 volumes=self.volumes, volume_waits=self.volume_waits, held=self.held_starts,
                                 pod_events=self.pod_events, node_changed=self.lost_pods.node_changed,
                                 release_held=self.starts.release_held)
        #: The cluster as a cycle sees it (flotilla.kubernetes.backend.snapshots).
        self.snapshots = Snapshots(name, self._lock, self.nodes, self.cache, self.book, health=self.health,
                                   volumes=self.volumes, namespaces=self.namespaces)
        self._threads: list[threading.Thread] = []
        if start:
            self.start()

    # -- lifecycle --------------------------------------------------------------------
    def start(self) -> None:
        """Start the informers, one thread per watched kind (flotilla.kubernetes.backend.dispatch.watched); once,
        and never after close()."""
        if self._threads or self._stop.is_set():
            return
        dispatch = self.dispatch
        for kind, path, params in watched(self.node_selector, bool(self.intake.default_spread)):
            thread = threading.Thread(target=watch_kind, args=(kind, path, params), kwargs=dict(
                cluster=self.name, client=self.client, stop=self._stop, watch_timeout=self.watch_timeout,
                lock=self._lock, counters=self.counters, before_list=dispatch.before_list, on_list=dispatch.replace,
                on_event=dispatch.on_event, absent=dispatch.absent, failed=dispatch.failed), daemon=True,
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
        self.starts.close(timeout)
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
                    self.book.kill_on_create or \
                    any(job_id not in self.volume_waits.waits for job_id in self.book.inflight)
            if not busy:
                return True
            time.sleep(0.02)
        return False

    @property
    def volume_bind_timeout(self) -> float:
        """How long a start waits for its claims to be bound before its job returns to its queue (kube-scheduler's
        bindTimeoutSeconds, 600 s by default)."""
        return self.volume_waits.timeout

    @volume_bind_timeout.setter
    def volume_bind_timeout(self, seconds: float) -> None:
        self.volume_waits.timeout = seconds

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
        return self.snapshots.take()

    def apply(self, decisions: ClusterDecisions) -> None:
        # The requests are handed to the workers once the bookkeeping is done and the lock is free: a worker
        # whose request returns takes the lock to record it, and so does the watch with every pod event, so
        # submitting thousands of starts under the lock would stall both until the last was submitted.
        work: list[tuple] = []
        with self._lock:
            self._apply(decisions, work)
        bind_volumes = self.volume_waits.bind
        for task in work:
            (self._volume_pool if task[0] == bind_volumes else self._pool).submit(*task)

    def _apply(self, decisions: ClusterDecisions, work: list[tuple]) -> None:
        """Record the stops and starts of ``decisions`` (under the lock); the requests to make go to ``work``."""
        if decisions.start:
            self.guard.presence.new_cycle()   # its first bind tells whether another scheduler is active (admission)
        self.stops.stop(decisions.preempt, decisions.cancel, work)
        self.starts.place(decisions.start, decisions.templates, work)

    def held(self) -> dict[str, list[str]]:
        """Job ids of the starts held per node, in order (tests, tools)."""
        with self._lock:
            return self.held_starts.job_ids()

    def poll_events(self) -> list[JobEvent]:
        with self._lock:
            now = self.clock()
            self.lost_pods.check(now)
            self.victim_logs.expire(now)
            self.pod_events.delete_expired(now)
            if self.volume_waits.waits:
                self.volume_waits.check(expired_only=True)
            return self.book.take_events()   # (but those about an earlier run: flotilla.kubernetes.backend.ledger)

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
            return self.cache.bound_in_cluster()

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

    def kept_log(self, pod_id: str) -> tuple[str, Mapping[str, bytes], bool] | None:
        """The log tails kept of pod ``pod_id`` (a job id, ``JOB#N`` for pod N) when it was preempted: its
        ``namespace/name``, container -> last output, and whether any was cut; None when none are kept."""
        with self._lock:
            return self.victim_logs.get(pod_id, self.clock())

    # -- priority classes ------------------------------------------------------------------
    def cluster_priority_classes(self) -> tuple[int, list]:
        """The cluster's PriorityClass objects as the watch shows them: (a version bumped at every change, the
        :class:`~flotilla.kubernetes.priorityclasses.ClusterPriorityClass` list)."""
        with self._lock:
            return self.priority_classes.view()

    # -- reading back (tests, tools) ---------------------------------------------------------
    def pods_by_node(self) -> dict[str, list[str]]:
        """Job ids of our live (not deleting, not finished) pods per node, from the informer's copy."""
        with self._lock:
            return self.cache.live_jobs_by_node()


__all__ = ["KubernetesCluster"]
