"""The pod informer's copy of a cluster's pods, indexed per node (called under the cluster's lock).

Written rule: every question a cycle or a bind asks of one node (its live
pods, what everyone else's pods use and which host ports they hold there,
the pods affinity and spread rules look at) reads that node's own index,
kept as pod events arrive; a snapshot copies the per-node sums and walks
only Flotilla's live pods (``own``), never every pod of the cluster. An
ended pod (Succeeded, Failed), kept for its log, holds nothing and is in
no per-node index.

Which pod is whose, and what a pod of Flotilla's means for its job, is
:mod:`flotilla.kubernetes.backend.podevents`'s, and what a snapshot counts
:mod:`flotilla.kubernetes.backend.snapshots`'s: this module only keeps the
copy and its sums consistent.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from typing import Mapping

from flotilla.core.model import ForeignPod, Job
from flotilla.core.resources import PODS

#: The phases of a pod that has ended.
ENDED = frozenset({"Succeeded", "Failed"})
#: What was reported of a pod that ends its story (nothing more is said about it).
FINAL = ("succeeded", "failed", "preempted", "cancelled", "lost", "returned")


@dataclass(slots=True)
class CachedPod:
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


class PodCache:
    """Every pod the watch shows, by ``(namespace, name)``, with the per-node indexes the module docstring names."""

    def __init__(self) -> None:
        self.pods: dict[tuple[str, str], CachedPod] = {}
        #: The keys of ``pods`` bound to each node that have not ended: a node's questions (its load, a pod
        #: leaving it) read its own live pods, not every pod of the cluster nor those kept for their logs.
        self.on_node: dict[str, set[tuple[str, str]]] = {}
        #: Our pods (made or bound by Flotilla) that have not ended, the ones a snapshot looks at one by one.
        self.own: dict[tuple[str, str], CachedPod] = {}
        #: What everyone else's live pods use on each node, kept as their events arrive: a snapshot copies it
        #: instead of walking pods that are not Flotilla's.
        self.foreign_on: dict[str, dict[str, int]] = {}
        #: The host ports everyone else's live pods bind on each node (node -> pod key -> its ports), kept alike.
        self.foreign_ports_on: dict[str, dict[tuple[str, str], tuple]] = {}
        #: Everyone else's live pods per node, for pod affinity and spread, and each node's tuple of them as the
        #: last snapshot gave it (dropped when one of them changes, so an unchanged node's is the same object).
        self.foreign_pods_on: dict[str, dict[tuple[str, str], ForeignPod]] = {}
        self.foreign_pod_tuples: dict[str, tuple[ForeignPod, ...]] = {}

    def get(self, key: tuple[str, str]) -> CachedPod | None:
        return self.pods.get(key)

    def put(self, key: tuple[str, str], pod: CachedPod) -> None:
        """Keep ``pod`` (new, or replacing what was kept under ``key``) and its part of the indexes."""
        old = self.pods.get(key)
        if old is not None:
            self._unindex(key, old)
        self.pods[key] = pod
        if pod.node is not None and pod.phase not in ENDED:   # (an ended pod, kept for its log, holds nothing)
            self.on_node.setdefault(pod.node, set()).add(key)
        if pod.job is not None:
            if pod.phase in ENDED:
                # Holds nothing (kept for its log, finishedPodRetention): no snapshot needs to walk it.
                self.own.pop(key, None)
            else:
                self.own[key] = pod   # (an update keeps its place: snapshots list our pods in a stable order)
        else:
            self.own.pop(key, None)
            if pod.node is not None and pod.phase not in ENDED:
                self._charge_foreign(pod.node, pod.requests, 1)
                if pod.ports:
                    self.foreign_ports_on.setdefault(pod.node, {})[key] = pod.ports
                if pod.foreign is not None:
                    self.foreign_pods_on.setdefault(pod.node, {})[key] = pod.foreign
                    self.foreign_pod_tuples.pop(pod.node, None)

    def pop(self, key: tuple[str, str]) -> CachedPod | None:
        """Forget pod ``key`` (gone from the cluster); returns what was kept of it."""
        old = self.pods.pop(key, None)
        if old is not None:
            self._unindex(key, old)
            self.own.pop(key, None)
        return old

    def of_node(self, node: str) -> list[CachedPod]:
        """The live pods bound to ``node``."""
        pods = self.pods
        return [pods[key] for key in self.on_node.get(node, ())]

    def foreign_use(self, known: Mapping[str, object]) -> tuple[dict[str, dict[str, int]], dict[str, tuple]]:
        """What everyone else's live pods use on each node of ``known``, and the host ports they hold there
        (copies: the snapshot adds the pods of ours that no longer count as their jobs')."""
        foreign = {node: dict(used) for node, used in self.foreign_on.items() if node in known}
        foreign_ports = {node: tuple(chain.from_iterable(ports.values()))
                         for node, ports in self.foreign_ports_on.items() if node in known}
        return foreign, foreign_ports

    def foreign_pods(self, known: Mapping[str, object]) -> dict[str, tuple[ForeignPod, ...]]:
        """Everyone else's live pods on each node of ``known``, as pod rules see them (an unchanged node's tuple is
        the one the last call gave)."""
        tuples = self.foreign_pod_tuples
        foreign_pods = {}
        for node, on in self.foreign_pods_on.items():
            if node in known:
                pods = tuples.get(node)
                if pods is None:
                    pods = tuples[node] = tuple(on.values())
                foreign_pods[node] = pods
        return foreign_pods

    def bound_in_cluster(self) -> dict[str, tuple[str, bool]]:
        """Every live in-cluster pod Flotilla bound (not being deleted): job id -> (node, running)."""
        return {pod.job.id: (pod.node, pod.phase == "Running") for pod in self.own.values()
                if pod.incluster and pod.job is not None and pod.node and not pod.deleting
                and pod.phase not in ENDED}

    def live_jobs_by_node(self) -> dict[str, list[str]]:
        """Job ids of our live (not deleting, not ended) pods per node (``""``: not bound yet), every pod walked."""
        out: dict[str, list[str]] = {}
        for pod in self.pods.values():
            if pod.job is not None and not pod.deleting and pod.phase not in ENDED:
                out.setdefault(pod.node or "", []).append(pod.job.id)
        return out

    def _unindex(self, key: tuple[str, str], old: CachedPod) -> None:
        """Take ``old``'s part out of the per-node indexes (``own`` is the caller's to change)."""
        on = self.on_node.get(old.node) if old.node is not None else None
        if on is not None:
            on.discard(key)
            if not on:
                del self.on_node[old.node]
        if old.job is None and old.node is not None and old.phase not in ENDED:
            self._charge_foreign(old.node, old.requests, -1)
            if old.ports:
                ports = self.foreign_ports_on[old.node]
                del ports[key]
                if not ports:
                    del self.foreign_ports_on[old.node]
            on = self.foreign_pods_on.get(old.node)
            if on is not None and on.pop(key, None) is not None:
                self.foreign_pod_tuples.pop(old.node, None)
                if not on:
                    del self.foreign_pods_on[old.node]

    def _charge_foreign(self, node: str, requests: Mapping[str, int] | None, sign: int) -> None:
        """Count a foreign pod on ``node`` in (1) or out (-1): its requests, and one pod slot (``pods``)."""
        used = self.foreign_on.setdefault(node, {})
        for resource, amount in (*(requests or {}).items(), (PODS, 1)):
            left = used.get(resource, 0) + sign * amount
            if left:
                used[resource] = left
            else:
                used.pop(resource, None)
        if not used:
            del self.foreign_on[node]
