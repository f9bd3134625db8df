"""The platform's failures: pods stuck, nodes lost, starts whose room never comes (checked at every poll, under the
cluster's lock).

A pod that does not start is not the job's fault, nor is a node that stops
answering: the job is reported ``lost`` (the service retries it
elsewhere) and its pod is removed. Written rules:

* a pod of ours not started within ``stuck_pod_expiry`` of being seen
  pending is given up (cause ``Stuck``), its waiting reason said;
* a node NotReady (or deleted) for ``node_lost_timeout`` has its live pods
  of ours given up (cause ``NodeLost``), once per outage: with the node
  deleted, at once (no grace: no kubelet is left to confirm); NotReady, with
  the pod's grace, and a success the pod reports when the node returns is
  its job's after all (the ledger's ``lost_on_node``);
* a stopped pod still there ``stuck_pod_expiry`` after its delete counts
  again, and the starts held for its node are given up (``Stuck``): its
  room is not coming;
* a held start on a node where nothing has been leaving for
  ``stuck_pod_expiry`` is given up (``Stuck``) once what fits is released;
* an in-cluster pod given up is its job's failure, not retried: Flotilla
  did not make it.

``None`` for either timeout turns its rule off.
"""

from __future__ import annotations

from typing import Callable

import structlog

from flotilla.kubernetes.backend.ledger import Ledger
from flotilla.kubernetes.backend.podcache import ENDED, FINAL, CachedPod, PodCache
from flotilla.kubernetes.pods import PodSettings, delete_grace

log = structlog.get_logger("flotilla.kubernetes")


class LostPods:
    """The rules of the module docstring for cluster ``cluster``.

    ``book``: the cluster's :class:`~flotilla.kubernetes.backend.ledger.Ledger`; ``cache``: its pods; ``held``: its
    :class:`~flotilla.kubernetes.backend.held.HeldStarts`; ``delete(key, grace)``: remove a pod (a pool thread);
    ``release_held(node)``, ``drop_held(job_id, kind)`` and ``leaving(node)``: the cluster's held starts released,
    forgotten, and whether a pod on a node is on its way out.
    """

    def __init__(self, cluster: str, book: Ledger, cache: PodCache, held, settings: PodSettings,
                 clock: Callable[[], float], stuck_pod_expiry: float | None, node_lost_timeout: float | None,
                 delete: Callable[[tuple[str, str], int | None], object], release_held: Callable[[str], None],
                 drop_held: Callable[[str, str | None], None], leaving: Callable[[str], bool]) -> None:
        self.cluster = cluster
        self.book = book
        self.cache = cache
        self.held = held
        self.settings = settings
        self.clock = clock
        self.stuck_pod_expiry = stuck_pod_expiry
        self.node_lost_timeout = node_lost_timeout
        self.delete = delete
        self.release_held = release_held
        self.drop_held = drop_held
        self.leaving = leaving
        self.nodes_down: dict[str, list] = {}   # node -> [since, deleted, handled]

    def node_changed(self, name: str, deleted: bool, ready: bool) -> None:
        """Note node ``name`` deleted, or seen ready or not (its outage counted from when it was first seen down)."""
        if deleted:
            down = self.nodes_down.setdefault(name, [self.clock(), True, False])
            down[1] = True
        elif ready:
            self.nodes_down.pop(name, None)
        else:
            self.nodes_down.setdefault(name, [self.clock(), False, False])

    def give_up(self, pod: CachedPod, reason: str, cause: str, grace: int | None = 0, kind: str = "lost") -> None:
        """Report ``pod``'s job ``lost`` (the service retries it elsewhere; ``kind`` failed: the job's own
        failure) and remove the pod."""
        book = self.book
        book.reported[pod.key] = "lost"
        book.stopped.pop(pod.key, None)   # its room counts again (the cluster's docstring, Stopped pods)
        book.starting.pop(pod.key, None)
        book.ignore_delete.add(pod.key)
        book.emit(pod.job.id, "failed" if pod.incluster else kind, pod.node, reason, cause=cause)
        log.warning("kubernetes.pod_given_up", cluster=self.cluster, job=pod.job.id, reason=reason)
        self.delete(pod.key, grace)

    def check(self, now: float) -> None:
        """Apply every rule of the module docstring at ``now``."""
        if self.book.stopped and self.stuck_pod_expiry is not None:
            self._expire_stopped(now)
        if self.held.by_node:
            self._give_up_held(now)
        if self.stuck_pod_expiry is not None:
            self._give_up_stuck(now)
        if self.node_lost_timeout is not None:
            self._give_up_lost_nodes(now)

    def _expire_stopped(self, now: float) -> None:
        """Count again the stopped pods still there ``stuck_pod_expiry`` after their delete, and give up the starts
        held for their nodes."""
        book, held = self.book, self.held
        horizon = now - self.stuck_pod_expiry
        for key in [key for key, since in book.stopped.items() if since <= horizon]:
            del book.stopped[key]
            pod = self.cache.get(key)
            if pod is None or pod.node is None or pod.phase in ENDED:
                continue
            log.warning("kubernetes.stopped_pod_stuck", cluster=self.cluster, job=pod.job.id, node=pod.node,
                        pod=f"{key[0]}/{key[1]}")
            for job, _, _, started in list(held.by_node.get(pod.node, ())):
                if job.id not in held.ids or book.starts.get(job.id) != started:
                    continue   # stale: stopped or started again since
                log.warning("kubernetes.held_start_given_up", cluster=self.cluster, job=job.id, node=pod.node)
                self.drop_held(job.id, None)
                book.emit(job.id, "lost", pod.node,
                          f"node {pod.node} has no room for the pod: {pod.job.id}'s pod has been terminating "
                          f"for stuckPodExpiry {self.stuck_pod_expiry:g}s ({key[0]}/{key[1]})", cause="Stuck")

    def _give_up_held(self, now: float) -> None:
        """Release what fits now; give up starts held on a node where nothing has been leaving for
        ``stuck_pod_expiry`` (their room will not come: the job is retried elsewhere)."""
        held = self.held
        for node in list(held.by_node):
            self.release_held(node)
            if node not in held.by_node:
                continue
            if self.leaving(node) or self.stuck_pod_expiry is None:
                held.since[node] = now
                continue
            if now - held.since.get(node, now) < self.stuck_pod_expiry:
                continue
            for job, _, _, _ in list(held.by_node[node]):
                log.warning("kubernetes.held_start_given_up", cluster=self.cluster, job=job.id, node=node)
                self.drop_held(job.id, None)
                self.book.emit(job.id, "lost", node, f"node {node} has no room for the pod and nothing on it is "
                                                     f"leaving (held for stuckPodExpiry {self.stuck_pod_expiry:g}s)",
                               cause="Stuck")

    def _give_up_stuck(self, now: float) -> None:
        """Give up our pods not started within ``stuck_pod_expiry``."""
        book = self.book
        horizon = now - self.stuck_pod_expiry
        for key in [key for key, since in book.starting.items() if since <= horizon]:
            pod = self.cache.get(key)
            if pod is None or pod.job is None or book.reported.get(key) in FINAL:
                book.starting.pop(key, None)
                continue
            why = f" ({pod.waiting})" if pod.waiting else ""
            self.give_up(pod, f"pod stuck: not started within stuckPodExpiry "
                              f"{self.stuck_pod_expiry:g}s{why}", "Stuck")

    def _give_up_lost_nodes(self, now: float) -> None:
        """Give up our live pods on the nodes down for ``node_lost_timeout``, once per outage."""
        for name, down in list(self.nodes_down.items()):
            since, deleted, handled = down
            if handled or now - since < self.node_lost_timeout:
                continue
            down[2] = True
            if deleted:   # handled once; a node of that name that comes back starts afresh
                del self.nodes_down[name]
            what = "deleted" if deleted else "NotReady"
            for pod in self.cache.of_node(name):
                if pod.job is not None and not pod.deleting \
                        and pod.phase not in ENDED and self.book.reported.get(pod.key) not in FINAL:
                    # Force (no grace) when the node is gone: no kubelet is left to confirm.
                    grace = 0 if deleted else delete_grace(pod.job, self.settings)
                    if not deleted:
                        self.book.lost_on_node.add(pod.key)
                    self.give_up(pod, f"node {name} lost: {what} for {now - since:.0f}s "
                                      f"(nodeLostTimeout {self.node_lost_timeout:g}s)", "NodeLost", grace)


__all__ = ["LostPods"]
