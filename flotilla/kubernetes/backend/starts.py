"""The start path: a decision's starts made pods now, held for their node, or checked just before their bind (the
held start's parts under the cluster's lock; the creates and binds on pool threads, taking the lock themselves).

Written rules (the cluster's docstring states them for the whole):

* a start is counted on its node from the decision on (``inflight``) until
  the watch shows its pod, so the next cycle cannot double-book it;
* a start whose claims need binding first goes to ``claims_first``
  (:mod:`flotilla.kubernetes.volumes`); its pod comes once they are bound;
* a start on a node where nothing is leaving is created at once; on a node
  where some pod is leaving (deleted, or ours being stopped) it is held for
  the node, first come first served, until the node's live pods, the pods
  being created and its own fit (:mod:`flotilla.kubernetes.backend.held`);
  a held in-cluster pod is nominated there meanwhile, once;
* just before each create or bind the node is checked against the live
  view (:mod:`flotilla.kubernetes.backend.bindguard`): bound, held (room
  comes once leaving pods are gone; or another scheduler's burst settles
  first, retried by a timer since no pod event may come), or returned to
  its queue (no retry used);
* a refused write is said as what the job becomes
  (:mod:`flotilla.kubernetes.backend.writes`); a job stopped meanwhile says
  nothing more, and one stopped before its pod was made has the pod deleted
  as soon as it is made (``kill_on_create``).
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Callable, Mapping

import structlog

from flotilla.core.backend import PodTemplate
from flotilla.core.model import Job, JobState, Node
from flotilla.core.quantities import QuantityError, parse_duration
from flotilla.kubernetes.admission import returned_label
from flotilla.kubernetes.backend.ledger import Ledger
from flotilla.kubernetes.backend.podcache import ENDED, PodCache
from flotilla.kubernetes.intake import POD_NAME, POD_NAMESPACE, POD_UID
from flotilla.kubernetes.pods import DURATION, PodSettings, job_deadline, job_namespace

log = structlog.get_logger("flotilla.kubernetes")


def annotation_duration(job: Job) -> float | None:
    """The job's run time from its ``flotilla.io/simulated-duration`` annotation (as ``serve`` uses it), else None:
    the cluster's default ``duration_of``, written on the pod as kwok's completion delay."""
    value = job.annotations.get(DURATION)
    if value is None:
        return None
    try:
        return parse_duration(value)
    except QuantityError:
        return None


class Starts:
    """The start path of cluster ``cluster`` (module docstring).

    ``lock``: the cluster's lock (the pool threads take it); ``stop``: set once the cluster closes. Shared:
    ``book``, ``cache``, ``counters``. The parts it uses: ``guard`` (the bind's own check), ``held`` (the held
    starts), ``writes``, ``reporting``, ``volumes`` (the claims' state). Callables: ``node_of(name)`` the node as
    the watch shows it; ``pcs_known(name)`` whether a pod may name a priority class; ``duration_of(job)`` kwok's
    completion delay (None: none written); ``submit(fn, *args)`` a pod write for the pool;
    ``claims_first(job, node, attempt, template, choices, started, work)`` a start whose claims are bound first
    (:mod:`flotilla.kubernetes.backend.volumewaits`); ``delete(job, key, kind, started)`` a stopped job's pod
    deleted.
    """

    def __init__(self, cluster: str, lock, stop: threading.Event, book: Ledger, cache: PodCache,
                 settings: PodSettings, clock: Callable[[], float], counters: dict, *, guard, held, writes, reporting,
                 volumes, node_of: Callable[[str], Node | None], pcs_known: Callable[[str | None], bool],
                 duration_of: Callable[[Job], float | None] | None, submit: Callable, claims_first: Callable,
                 delete: Callable) -> None:
        self.cluster = cluster
        self._lock = lock
        self._stop = stop
        self.book = book
        self.cache = cache
        self.settings = settings
        self.clock = clock
        self.counters = counters
        self.guard = guard
        self.held = held
        self.writes = writes
        self.reporting = reporting
        self.volumes = volumes
        self.node_of = node_of
        self.pcs_known = pcs_known
        self.duration_of = duration_of
        self.submit = submit
        self.claims_first = claims_first
        self.delete = delete
        self._settle_timer: threading.Timer | None = None   # retries held starts once a burst is over

    def close(self, timeout: float) -> None:
        """Stop the settle timer (the cluster's stop is set already)."""
        with self._lock:
            timer = self._settle_timer
        if timer is not None:
            timer.cancel()
            timer.join(timeout)

    def place(self, placements, templates: Mapping[str, PodTemplate], work: list[tuple]) -> None:
        """Record the starts ``placements`` of a decision (under the lock); the requests to make go to ``work``
        (``(callable, *args)`` each; a start whose claims are bound first: ``claims_first``)."""
        for placement in placements:
            job = placement.job
            attempt = self.book.attempts.get(job.id, -1) + 1
            self.book.attempts[job.id] = attempt
            self.book.starts[job.id] = self.book.starts.get(job.id, 0) + 1
            self.book.stopping.pop(job.id, None)
            self.guard.unadmit(job.id)
            running = replace(job, state=JobState.RUNNING, cluster=self.cluster, node=placement.node)
            if job.id in self.held.ids:   # started again elsewhere: the old hold is void
                self.drop_held(job.id, None)
            self.book.inflight[job.id] = running
            template = templates.get(job.id)
            if job.claims and (placement.volumes or self.volumes.unbound(job.claims)):
                # Its claims are bound first (flotilla.kubernetes.volumes); the pod comes once they are.
                self.volumes.assume(placement.volumes, placement.node)
                self.claims_first(running, placement.node, attempt, template, placement.volumes,
                                  self.book.starts[job.id], work)
                continue
            self.start_pod(running, placement.node, attempt, template, work.append)

    def start_pod(self, running: Job, node: str, attempt: int, template, submit) -> None:
        """Create the pod of a start now, or hold it until its node has room (module docstring); ``submit``: where
        the create goes (a decision's work list, or the pool)."""
        if node not in self.held.by_node and not self.leaving(node):
            # Nothing on the node is on its way out: the scheduler counted every pod there.
            submit((self.create, running, node, attempt, template))
            return
        self.hold(node, running, attempt, template)
        self.release_held(node)

    def hold(self, node: str, job: Job, attempt: int, template: PodTemplate | None, nominate: bool = True) -> None:
        """Hold ``job``'s start for ``node`` until the room its leaving pods free is there; a waiting in-cluster
        pod is nominated to the node meanwhile (``status.nominatedNodeName``, as kube-scheduler does), once."""
        if self.held.hold(node, job, attempt, template, self.book.starts.get(job.id, 0), self.clock(), nominate):
            self.reporting.submit(self.reporting.reporter.nominated, job.annotations[POD_NAMESPACE],
                                  job.annotations[POD_NAME], job.annotations[POD_UID], node,
                                  f"waiting on node {node} for the pods leaving it (preempted) to be gone")

    def leaving(self, node: str) -> bool:
        """Whether a pod on ``node`` is on its way out (deleted, or ours being stopped) and still holds room."""
        return any(pod.phase not in ENDED
                   and (pod.deleting or (pod.job is not None and pod.job.id in self.book.stopping))
                   for pod in self.cache.of_node(node))

    def release_held(self, node: str) -> None:
        """Create the pods of the starts held for ``node`` that now fit, in order (flotilla.kubernetes.backend.held)."""
        if not self.held.by_node.get(node):
            return
        target = self.node_of(node)
        load = self.held.node_load(node, self.cache.of_node(node), self.book.inflight) \
            if target is not None else None
        for job, attempt, template in self.held.release(node, target, load, lambda: self.leaving(node),
                                                        self.book.starts):
            self.submit(self.create, job, node, attempt, template)

    def drop_held(self, job_id: str, kind: str | None) -> None:
        """Forget a held start; ``kind`` (preempted, cancelled, lost): report the job so, no pod was made."""
        self.held.ids.discard(job_id)
        self.guard.yielding.pop(job_id, None)
        self.guard.unadmit(job_id)
        job = self.book.inflight.pop(job_id, None)
        if job is not None and job_id in self.held.nominated:   # its nomination ends with the hold
            self.held.nominated.discard(job_id)
            self.reporting.submit(self.reporting.reporter.nominated, job.annotations[POD_NAMESPACE],
                                  job.annotations[POD_NAME], job.annotations[POD_UID], None)
        self.held.forget(job_id)
        if kind is not None:
            reason = {"preempted": "preempted by the scheduler", "cancelled": "cancelled"}.get(kind, kind)
            self.book.emit(job_id, kind, job.node if job is not None else None, reason,
                           run=self.book.starts.get(job_id, 0))

    def admit(self, job: Job, node: str, attempt: int, template: PodTemplate | None) -> bool:
        """Whether ``job``'s pod may be bound to ``node`` now, checked against the live view (module
        :mod:`flotilla.kubernetes.admission`), read afresh while another scheduler is active; if so, its room is
        reserved until the watch shows the pod. Otherwise the start is held for the node when the room comes once
        its leaving pods are gone, else the job is returned to its queue with the reason."""
        fresh = self.guard.read_afresh(node)   # outside the lock: a round trip to the API server
        with self._lock:
            target = self.node_of(node)
            if target is None:
                return True   # gone from the watch: the bind itself says what becomes of it
            load, pods, leaving, gone = self.guard.live_use(node, self.cache.of_node(node), self.book.stopping)
            unseen: dict = {}
            if fresh is not None:
                fresh_load, fresh_pods, unseen = self.guard.fresh_view(target, fresh, self.book.inflight)
                load = {r: max(load.get(r, 0), fresh_load.get(r, 0)) for r in set(load) | set(fresh_load)}
                pods = max(pods, fresh_pods)
            verdict, detail = self.guard.verdict(job, node, target, load, pods, leaving, gone, unseen,
                                                 self.clock)
            guard = self.guard
            if verdict == guard.BIND:
                self.held.nominated.discard(job.id)
                return True
            if verdict in (guard.YIELD_BURST, guard.YIELD):
                self.hold(node, job, attempt, template, nominate=False)
                if verdict == guard.YIELD_BURST:
                    self._settle_later(detail)
                return False
            if verdict == guard.HOLD:
                self.hold(node, job, attempt, template)
                return False
            short = detail
            self.counters["returned"] += 1
            self.book.inflight.pop(job.id, None)
            self.book.kill_on_create.pop(job.id, None)
            if self.book.stopping.pop(job.id, None) is None:
                self.book.emit(job.id, "returned", node, f"not bound to node {node}: {short} there now (pods bound "
                                                         f"there since the scheduling decision)",
                               cause=returned_label(short), run=self.book.starts.get(job.id, 0))
            log.info("kubernetes.bind_returned", cluster=self.cluster, job=job.id, node=node, reason=short)
            return False

    def release_all_held(self) -> None:
        """Try the starts held for every node (room may have come anywhere)."""
        for name in list(self.held.by_node):
            self.release_held(name)

    def _settle_later(self, now: float) -> None:
        """Try the held starts again once the other scheduler's burst is over: no pod event may come to do it."""
        if self._settle_timer is not None and self._settle_timer.is_alive():
            return
        timer = threading.Timer(self.guard.settle_delay(now), self._settle)
        timer.name, timer.daemon = f"kube-{self.cluster}-settle", True
        self._settle_timer = timer
        timer.start()

    def _settle(self) -> None:
        with self._lock:
            self._settle_timer = None
            if not self._stop.is_set():
                self.release_all_held()

    def create(self, job: Job, node: str, attempt: int, template: PodTemplate | None = None) -> None:
        """Make the pod of a start (a pool thread): checked just before (:meth:`admit`), then created bound, or
        an in-cluster pod bound; its services and ingresses made after it."""
        with self.guard.turn(node):   # beside another scheduler, a node's binds one at a time (bindguard)
            self._create_in_turn(job, node, attempt, template)

    def _create_in_turn(self, job: Job, node: str, attempt: int, template: PodTemplate | None) -> None:
        if not self.admit(job, node, attempt, template):
            return
        if POD_UID in job.annotations:
            self.bind(job, node)
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
                                               self.pcs_known(job.priority_class), exposed,
                                               self._name_taken(job.id))
        except self.writes.Refused as refused:
            self.create_failed(job, node, refused.kind, refused.reason)
            return
        if exposed and not self.expose(job, node, created, template):
            return
        with self._lock:
            self.counters["created"] += 1
            self.book.job_pod[job.id] = (namespace, name)
            kill = self.book.kill_on_create.pop(job.id, None)
        if kill is not None:
            self.delete(job, (namespace, name), kill, self.book.starts.get(job.id, 0))

    def _name_taken(self, job_id: str):
        """Note the attempts whose pod names were found taken (a pod of an earlier attempt still terminating)."""
        def taken(attempt: int) -> None:
            with self._lock:
                self.book.attempts[job_id] = max(self.book.attempts.get(job_id, 0), attempt)
        return taken

    def bind(self, job: Job, node: str) -> None:
        """Bind an in-cluster pod to ``node`` (``pods/binding``), only the very pod that was queued (its uid)."""
        try:
            namespace, name = self.writes.bind_pod(job, node)
        except self.writes.Refused as refused:
            self.create_failed(job, node, refused.kind, refused.reason)
            return
        with self._lock:
            self.counters["bound"] = self.counters.get("bound", 0) + 1
            self.book.job_pod[job.id] = (namespace, name)
            kill = self.book.kill_on_create.pop(job.id, None)
        if kill is not None:
            self.delete(job, (namespace, name), kill, self.book.starts.get(job.id, 0))

    def expose(self, job: Job, node: str, pod: dict, template: PodTemplate) -> bool:
        """Create the job's services and ingresses, owned by its first pod; on a refusal, remove the pod again."""
        done, refused = self.writes.expose(pod, template)
        if refused is None:
            return True
        namespace = pod["metadata"]["namespace"]
        key = (namespace, pod["metadata"]["name"])
        with self._lock:
            self.book.reported[key] = "failed"
            self.book.ignore_delete.add(key)
        self.writes.delete_quietly(key)
        for item in done:
            self.writes.delete_object(namespace, item)
        self.create_failed(job, node, refused.kind, refused.reason)
        return False

    def create_failed(self, job: Job, node: str, kind: str, reason: str) -> None:
        """A start whose pod was not made: report the job ``kind`` (unless it was stopped meanwhile)."""
        log.warning("kubernetes.create_failed", cluster=self.cluster, job=job.id, reason=reason)
        with self._lock:
            self.counters["create_errors"] += 1
            self.book.inflight.pop(job.id, None)
            self.guard.unadmit(job.id)
            self.book.kill_on_create.pop(job.id, None)
            if self.book.stopping.pop(job.id, None) is None:
                self.book.emit(job.id, kind, node, reason)



__all__ = ["Starts", "annotation_duration"]
