"""What a pod's change means: the pod informer's copy kept, and for a pod of ours, its job's events (called under
the cluster's lock).

A pod labelled ``flotilla.io/job-id`` is one of ours (or an in-cluster pod
Flotilla bound) and stands for a job; any other pod is kept as what it uses
on its node (:mod:`flotilla.kubernetes.backend.podcache`). Written rules:

* phases become job events, each said once per pod: ``running``;
  ``succeeded``; ``failed`` with the pod's reason, its exit code and cause;
  a failure that is the platform's (:data:`PLATFORM_FAILURES`: evicted, node
  lost or shut down) ``lost``, retried; a kubelet's admission refusal
  (``OutOfcpu``, ...) ``returned`` to its queue, no retry used
  (:mod:`flotilla.kubernetes.admission`); a pod seen only once ended whose
  container did run is said ``running`` first;
* an earlier attempt's pod (the job has a newer one) says nothing: its end,
  seen again after a restart, is old news;
* a pod of ours waiting on its node for a new reason says it (``waiting``);
  an image that will never come (a permanent pull failure, or
  :data:`IMAGE_PULL_BACKOFFS` back-offs) fails the job;
* a pod given up while its node was NotReady that succeeds once the node
  returns is its job's success after all (``NODE_RETURNED``);
* a pod of ours deleted by someone else: ``lost`` (retried); an in-cluster
  pod deleted by its owner: ``cancelled``, or ``failed`` when it was
  disrupted (evicted, preempted by another scheduler); its services and
  ingresses are deleted with it;
* an ended pod of ours is kept ``finished_pod_retention`` for its log,
  counted from the pod's own end (a restarted process keeps none longer),
  then deleted; its services and ingresses go at once. An in-cluster pod is
  its owner's and stays.
"""

from __future__ import annotations

from typing import Callable

from flotilla.core.backend import NODE_RETURNED
from flotilla.core.model import Node
from flotilla.kubernetes.admission import admission_rejection, returned_label
from flotilla.kubernetes.backend.ledger import Ledger
from flotilla.kubernetes.backend.podcache import ENDED, FINAL, CachedPod, PodCache
from flotilla.kubernetes.intake import bound_by_flotilla
from flotilla.kubernetes.pods import (ATTEMPT, PodSettings, delete_grace, disruption, failure_details, failure_reason,
                                      foreign_pod, is_ours, job_from_pod, permanent_pull_failure, pod_finished_at,
                                      pod_host_ports, pod_phase, pod_requests, waiting_container, waiting_reason)
from flotilla.kubernetes.services import OWNED

#: Pod failure reasons that are the platform's, not the job's: the job is retried, not failed.
PLATFORM_FAILURES = frozenset({"Evicted", "NodeLost", "Shutdown", "NodeShutdown", "Terminated"})

#: A pod of ours whose image the kubelet has backed off pulling this many times fails its job (its message said).
IMAGE_PULL_BACKOFFS = 3


class PodEvents:
    """The rules of the module docstring for cluster ``cluster``.

    Shared: ``book`` (the :class:`~flotilla.kubernetes.backend.ledger.Ledger`), ``cache``, ``counters``. The
    parts it tells: ``intake`` (the waiting in-cluster pods), ``guard`` (the bind's own check: its pods not placed
    yet, its reserved room), ``held`` (the held starts, whose jobs a pod event leaves alone), ``reporting``
    (Flotilla's word on pods), ``writes`` (deletes). Callables: ``node_of(name)`` the node as the watch shows it;
    ``give_up(pod, reason, cause, grace, kind)`` (:mod:`flotilla.kubernetes.backend.lostpods`); ``submit(fn,
    *args)`` a write for a pool thread; ``release_all_held()`` when room may have come.
    """

    def __init__(self, cluster: str, book: Ledger, cache: PodCache, settings: PodSettings,
                 clock: Callable[[], float], counters: dict, *, intake, guard, held, reporting, writes,
                 node_of: Callable[[str], Node | None], give_up: Callable, submit: Callable,
                 release_all_held: Callable[[], None], delete_finished: bool, finished_pod_retention: float) -> None:
        self.cluster = cluster
        self.book = book
        self.cache = cache
        self.settings = settings
        self.clock = clock
        self.counters = counters
        self.intake = intake
        self.guard = guard
        self.held = held
        self.reporting = reporting
        self.writes = writes
        self.node_of = node_of
        self.give_up = give_up
        self.submit = submit
        self.release_all_held = release_all_held
        self.delete_finished = delete_finished
        self.finished_pod_retention = finished_pod_retention
        self._requests: dict = {}   # shared by the jobs rebuilt from pods (flotilla.kubernetes.pods.job_from_pod)

    def on_pod_change(self, kind: str, obj: dict) -> None:
        """Take in a pod's watch event (``ADDED``, ``MODIFIED``, ``DELETED``; a relist's pods as ``MODIFIED``)."""
        meta = obj["metadata"]
        key = (meta.get("namespace", ""), meta["name"])
        self.intake.on_pod(kind, obj)
        if kind == "DELETED":
            old = self.cache.pop(key)
            self.book.stopped.pop(key, None)
            if self.guard.forget_pod(key):
                self.release_all_held()
            if old is None or old.job is None:
                return
            for item in old.owned:   # its services and ingresses go with it (no garbage collector needed)
                self.submit(self.writes.delete_object, key[0], item)
            job_id = old.job.id
            if self.book.job_pod.get(job_id) == key:
                del self.book.job_pod[job_id]
            if old.incluster:
                self.reporting.forget(old.uid)
            if key in self.book.ignore_delete:
                self.book.ignore_delete.discard(key)
                if self.book.stopping.get(job_id) and self.book.reported.get(key) == self.book.stopping[job_id]:
                    self.book.stopping.pop(job_id, None)
            elif self.book.reported.get(key) not in FINAL and job_id not in self.held.ids:
                # (A held job's earlier pod going says nothing about the start waiting for its room.)
                self.book.inflight.pop(job_id, None)
                self.guard.unadmit(job_id)
                if not old.incluster:
                    self.book.emit(job_id, "lost", old.node, "pod deleted outside Flotilla")
                elif old.disrupted:   # evicted, or preempted by another scheduler: not its owner's doing
                    self.book.emit(job_id, "failed", old.node, f"pod deleted outside Flotilla: {old.disrupted}")
                else:
                    # An in-cluster pod is the user's: deleted (kubectl delete job / pod), its job is cancelled
                    # (its controller, if any, makes a new pod: a new job).
                    self.book.emit(job_id, "cancelled", old.node, "pod deleted outside Flotilla", cause="Deleted")
            self.book.reported.pop(key, None)
            self.book.starting.pop(key, None)
            self.book.finished.pop(key, None)
            self.book.pull_backoffs.pop(key, None)
            self.book.lost_on_node.discard(key)
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
                job = job_from_pod(obj, self.cluster, self._requests)
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
            if phase == "Pending" and not deleting and key not in self.book.reported and not incluster:
                # (An in-cluster pod that does not start is its owner's to see to: Flotilla did not make it.)
                self.book.starting.setdefault(key, self.clock())
            else:
                self.book.starting.pop(key, None)
            job_id = job.id
            if phase == "Pending" and not incluster and node is not None and not deleting \
                    and self.book.reported.get(key) not in FINAL and pod.waiting != (old.waiting if old else ""):
                self._waiting_news(pod, obj, old)
            try:
                attempt = int((meta.get("annotations") or {}).get(ATTEMPT, "0"))
            except ValueError:
                attempt = 0
            if attempt > self.book.attempts.get(job_id, -1):
                self.book.attempts[job_id] = attempt
            current = self.book.job_pod.get(job_id)
            if current is None or current == key or not deleting:
                self.book.job_pod[job_id] = key
            if node is not None and job_id not in self.held.ids and attempt == self.book.attempts[job_id]:
                # (An earlier attempt's pod, still changing, says nothing of the start in flight.)
                if self.book.inflight.pop(job_id, None) is not None and (old is None or old.node is None) \
                        and phase not in ENDED:
                    # Bound by this process just now: said as kube-scheduler says it (conditions module).
                    self.reporting.submit(self.reporting.reporter.scheduled, key[0], key[1], pod.uid, node)
                self.guard.unadmit(job_id)
            self._pod_events(pod, job_id, superseded=attempt < self.book.attempts[job_id])
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
            if self.guard.note_pod(key, obj, node, phase, deleting, requests, self.clock):
                self.release_all_held()   # decided (bound, or found unschedulable): room held for it may go now

    def _waiting_news(self, pod: CachedPod, obj: dict, old: CachedPod | None) -> None:
        """A pod of ours waits on its node for a new reason: say it (the job's status shows it), or fail the job
        when its image will never come (a permanent pull failure, or ``IMAGE_PULL_BACKOFFS`` back-offs)."""
        found = waiting_container(obj)
        if found is not None:
            _, reason, message = found
            if reason == "ImagePullBackOff" and (old is None or ": ImagePullBackOff" not in old.waiting):
                self.book.pull_backoffs[pod.key] = self.book.pull_backoffs.get(pod.key, 0) + 1
            backoffs = self.book.pull_backoffs.get(pod.key, 0)
            if permanent_pull_failure(reason, message) or backoffs >= IMAGE_PULL_BACKOFFS:
                why = pod.waiting if backoffs < IMAGE_PULL_BACKOFFS else \
                    f"{pod.waiting} (the kubelet backed off pulling {backoffs} times)"
                self.give_up(pod, f"image not pulled: {why}", "", delete_grace(pod.job, self.settings), kind="failed")
                return
        self.book.emit(pod.job.id, "waiting", pod.node, pod.waiting, run=self.book.starts.get(pod.job.id, 0) or None)

    def _pod_events(self, pod: CachedPod, job_id: str, superseded: bool = False) -> None:
        """Report what ``pod`` shows of its job; ``superseded``: the job has a newer attempt's pod, so this one's
        end (a kept finished pod seen again after a restart) is old news, never said."""
        reported = self.book.reported.get(pod.key)
        if pod.phase == "Succeeded" and pod.key in self.book.lost_on_node:
            # Given up while its node was NotReady, it finished meanwhile: the run succeeded after all. Said
            # whatever the job does now (queued again, or rerun): the service keeps the success, stops a rerun.
            self.book.lost_on_node.discard(pod.key)
            self.book.reported[pod.key] = "succeeded"
            self.book.emit(job_id, "succeeded", pod.node,
                           f"succeeded on node {pod.node}, reported once the node returned", cause=NODE_RETURNED)
            return
        if reported in FINAL:
            return
        if superseded and pod.phase in ENDED:
            self.book.reported[pod.key] = "succeeded" if pod.phase == "Succeeded" else "failed"
            self._keep_or_delete_finished(pod)
            return
        if pod.phase == "Running" and reported is None and not pod.deleting:
            self.book.reported[pod.key] = "running"
            self.book.emit(job_id, "running", pod.node)
        elif pod.phase in ENDED:
            kind = "succeeded" if pod.phase == "Succeeded" else "failed"
            refused = pod.reason.split(":", 1)[0]
            if kind == "failed" and refused in PLATFORM_FAILURES:
                kind = "lost"   # the platform's doing, not the job's: retried
            elif kind == "failed" and not pod.incluster and admission_rejection(refused):
                kind = "returned"   # refused by the kubelet: the node was the wrong place then (admission module)
            if reported is None and (pod.phase == "Succeeded" or (kind == "failed" and pod.exit_code is not None)):
                # Seen only once ended (a short container between two looks): its container did run.
                self.book.emit(job_id, "running", pod.node)
            self.book.reported[pod.key] = kind
            if kind == "succeeded":
                self.book.emit(job_id, kind, pod.node)
            elif kind == "returned":
                self.counters["returned"] += 1
                node = self.node_of(pod.node) if pod.node is not None else None
                self.book.emit(job_id, kind, pod.node, f"refused by the kubelet of node {pod.node}: {pod.reason}",
                           cause=returned_label(refused, node.resources if node is not None else None))
            else:
                self.book.emit(job_id, kind, pod.node, pod.reason, exit_code=pod.exit_code, cause=pod.cause)
            self._keep_or_delete_finished(pod)

    def _keep_or_delete_finished(self, pod: CachedPod) -> None:
        """Keep an ended pod of ours (holding nothing) for ``finished_pod_retention`` so that its log can be read,
        counted from the pod's own end (a restarted process does not keep it another full term); delete it at once
        without a retention. An in-cluster pod is its owner's and stays."""
        if not self.delete_finished or pod.deleting or pod.incluster:
            return
        self.book.ignore_delete.add(pod.key)
        if self.finished_pod_retention > 0:
            now = self.clock()
            ended = now if pod.finished_at is None else min(now, pod.finished_at)
            self.book.finished[pod.key] = ended + self.finished_pod_retention
            for item in pod.owned:   # a kept pod is kept for its log: its services and ingresses go with the job
                self.submit(self.writes.delete_object, pod.key[0], item)
            pod.owned = ()   # deleted now: the pod's own delete, an hour on, has none left to delete again
        else:
            self.submit(self.writes.delete_quietly, pod.key)

    def delete_expired(self, now: float) -> None:
        """Delete the finished pods of ours whose ``finishedPodRetention`` is over."""
        if not self.book.finished:
            return
        for key in [key for key, due in self.book.finished.items() if due <= now]:
            del self.book.finished[key]
            self.submit(self.writes.delete_quietly, key)



__all__ = ["IMAGE_PULL_BACKOFFS", "PLATFORM_FAILURES", "PodEvents"]
