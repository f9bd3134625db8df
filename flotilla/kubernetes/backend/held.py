"""Held starts: starts waiting on their node for the room its leaving pods free (called under the cluster's lock).

A kubelet refuses a pod its node has no room for yet (``OutOfcpu``), and
room freed by preemption comes only when the victims' pods are gone, after
their grace period. So a start on a node where some pod is leaving is held
for that node, first come first served: the job is reported running there
(the scheduler keeps its room and gives it to no other job), and its pod is
made as soon as it fits beside the node's live pods (terminating ones
included) and the pods being created (:meth:`HeldStarts.release`).

Written rules: no start overtakes an earlier one on its node (the first
that does not fit keeps those after it waiting); a held start whose room
does not come although nothing on its node is leaving any more is released
anyway, and the bind's own check (:mod:`flotilla.kubernetes.backend.bindguard`)
returns it to its queue; an entry whose job was stopped or started again
since (its start count differs) is stale and dropped. A waiting in-cluster
pod held for a node is nominated there once (``status.nominatedNodeName``,
as kube-scheduler does; ``nominated``).
"""

from __future__ import annotations

from typing import Callable, Iterable, Mapping

from flotilla.core.backend import PodTemplate
from flotilla.core.model import Job, Node
from flotilla.core.resources import PODS, UNLIMITED_PODS
from flotilla.kubernetes.backend.podcache import ENDED, CachedPod
from flotilla.kubernetes.intake import POD_UID


class HeldStarts:
    """``by_node``: node -> the starts held for it, in order: (job, attempt, template, start count); ``ids``: the
    held job ids; ``since``: node -> since when nothing on it has been leaving; ``nominated``: the held in-cluster
    starts told their node."""

    def __init__(self) -> None:
        self.by_node: dict[str, list[tuple]] = {}
        self.ids: set[str] = set()
        self.since: dict[str, float] = {}
        self.nominated: set[str] = set()

    def hold(self, node: str, job: Job, attempt: int, template: PodTemplate | None, started: int, now: float,
             nominate: bool) -> bool:
        """Hold ``job``'s start (its ``started``-th) for ``node``; True when its in-cluster pod is to be nominated to
        the node now (once, and only with ``nominate``)."""
        self.by_node.setdefault(node, []).append((job, attempt, template, started))
        self.ids.add(job.id)
        self.since.setdefault(node, now)
        if nominate and POD_UID in job.annotations and job.id not in self.nominated:
            self.nominated.add(job.id)
            return True
        return False

    def forget(self, job_id: str) -> None:
        """Take ``job_id``'s held start out of every node's queue."""
        self.ids.discard(job_id)
        for node, waiting in list(self.by_node.items()):
            waiting[:] = [entry for entry in waiting if entry[0].id != job_id]
            if not waiting:
                del self.by_node[node]
                self.since.pop(node, None)

    def node_load(self, node: str, pods_on_node: Iterable[CachedPod], inflight: Mapping[str, Job]) -> dict[str, int]:
        """What the kubelet counts on ``node``: its live pods (``pods_on_node``, terminating ones too) and the pods
        being created (``inflight`` starts there not held)."""
        load: dict[str, int] = {}
        created = set()
        for pod in pods_on_node:
            if pod.phase in ENDED:
                continue
            if pod.job is not None:
                created.add(pod.job.id)
            for resource, amount in (pod.requests if pod.job is None else pod.job.requests).items():
                load[resource] = load.get(resource, 0) + amount
            load[PODS] = load.get(PODS, 0) + 1
        for job_id, job in inflight.items():
            if job.node == node and job_id not in created and job_id not in self.ids:
                for resource, amount in job.requests.items():
                    load[resource] = load.get(resource, 0) + amount
                load[PODS] = load.get(PODS, 0) + 1
        return load

    def release(self, node: str, target: Node | None, load: dict[str, int] | None, leaving: Callable[[], bool],
                starts: Mapping[str, int]) -> list[tuple[Job, int, PodTemplate | None]]:
        """The starts held for ``node`` (``target``; gone: None) whose pods are to be made now, in order, taken out
        of the queue (module docstring). ``load``: :meth:`node_load` (None when the node is gone); ``leaving()``:
        whether a pod on it is on its way out; ``starts``: job id -> its start count."""
        waiting = self.by_node.get(node)
        out: list[tuple[Job, int, PodTemplate | None]] = []
        if not waiting:
            return out
        while waiting:
            job, attempt, template, started = waiting[0]
            if starts.get(job.id) != started or job.id not in self.ids:
                waiting.pop(0)   # stale: stopped or started again since
                continue
            if load is None or any(load.get(resource, 0) + amount > target.resources.get(resource, 0)
                                   for resource, amount in job.requests.items()) \
                    or load.get(PODS, 0) + 1 > target.resources.get(PODS, UNLIMITED_PODS):
                if load is None or leaving():
                    return out
                # Nothing on the node is leaving: the room will not come by waiting. The bind's own check
                # returns the job to its queue.
            waiting.pop(0)
            self.ids.discard(job.id)
            for resource, amount in job.requests.items():
                load[resource] = load.get(resource, 0) + amount
            load[PODS] = load.get(PODS, 0) + 1
            out.append((job, attempt, template))
        del self.by_node[node]
        self.since.pop(node, None)
        return out

    def job_ids(self) -> dict[str, list[str]]:
        """Job ids of the starts held per node, in order."""
        return {node: [entry[0].id for entry in waiting] for node, waiting in self.by_node.items() if waiting}
