"""The bind's own check: just before each bind, the node checked against the live view (called under the cluster's lock
but for :meth:`BindGuard.read_afresh`, a round trip to the API server).

The rules are :mod:`flotilla.kubernetes.admission`'s; this module keeps what
they read and gives each bind its verdict (:meth:`BindGuard.verdict`):

* ``BIND``: it fits the live view (every live pod, whoever bound it, and
  Flotilla's binds the watch has not shown yet, ``admitted_on``); its room is
  reserved until the watch shows the pod (:meth:`BindGuard.unadmit`);
* ``YIELD_BURST`` and ``YIELD``: another scheduler's pods not placed yet
  (``undecided``), or arriving in a burst (``arrivals``), may take that room:
  they go first, for at most ``UNDECIDED_WINDOW`` seconds (the start is held,
  not nominated; after a burst, tried again once it has settled);
* ``HOLD``: it does not fit, but will once the pods leaving the node are gone
  (the start is held for the node and nominated there);
* ``RETURN``: it does not fit and nothing leaving would make room: the job
  returns to its queue, with the shortfall as its reason.

While another scheduler is active (``SchedulerPresence``: one of its pods
seen waiting within ``OTHER_SCHEDULER_PERIOD``, or found by a cycle's one
consistent read), the node and the other schedulers' waiting pods are read
afresh from the API server (consistent lists), not only from the watch,
which may lag. Binds to one node then go one at a time (:meth:`BindGuard.turn`):
each reads the node after the previous one's pod is in the API server, so a
bind never rests on a read older than the binds made to that node meanwhile.
Many binds to one node decided in parallel from one read would all miss
another scheduler's pods created while they are on their way (under load, a
second or more), and that scheduler, not seeing them yet, fills the same room.
Alone on a cluster, binds to a node go in parallel: no read, no turn.
"""

from __future__ import annotations

import threading
from collections import deque
from contextlib import nullcontext
from typing import Callable, ContextManager, Iterable, Mapping

import structlog

from flotilla.core.model import Job, Node
from flotilla.core.resources import PODS
from flotilla.kubernetes.admission import (ARRIVALS_PERIOD, UNDECIDED_WINDOW, SchedulerPresence, fresh_use, shortfall,
                                           undecided_elsewhere, waits_for_node)
from flotilla.kubernetes.backend.podcache import ENDED, CachedPod
from flotilla.kubernetes.client import KubeError
from flotilla.kubernetes.intake import POD_NAME, POD_NAMESPACE, POD_UID
from flotilla.kubernetes.pods import JOB_ID, pod_requests

log = structlog.get_logger("flotilla.kubernetes")

#: The verdicts on a bind (module docstring).
BIND, YIELD_BURST, YIELD, HOLD, RETURN = "bind", "yield-burst", "yield", "hold", "return"


class BindGuard:
    """What the bind check reads beyond the pod cache: Flotilla's binds not yet seen (``admitted_on``: node -> job
    id -> requests; ``admitted``: job id -> node), other schedulers' pods not placed yet (``undecided``: key ->
    (first seen, requests, nodeSelector)) and their recent arrivals, and since when each start has given way to
    them (``yielding``); whether another scheduler is active (``presence``)."""

    #: The verdicts of :meth:`verdict`, for the parts handed a guard.
    BIND, YIELD_BURST, YIELD, HOLD, RETURN = BIND, YIELD_BURST, YIELD, HOLD, RETURN

    def __init__(self, client, cluster: str, scheduler_name: str, clock: Callable[[], float]) -> None:
        self.client = client
        self.cluster = cluster
        self.scheduler_name = scheduler_name
        self.admitted_on: dict[str, dict[str, Mapping[str, int]]] = {}
        self.admitted: dict[str, str] = {}
        self.undecided: dict[tuple[str, str], tuple[float, Mapping[str, int], Mapping[str, str]]] = {}
        self.arrivals: deque = deque()                   # (key, first seen, requests, nodeSelector) of those pods
        #: Whether another scheduler is active: binds read the API server afresh then (admission module).
        self.presence = SchedulerPresence(clock, scheduler_name)
        self.yielding: dict[str, float] = {}             # job id -> since when its bind gives way to them
        self.turns: dict[str, threading.Lock] = {}       # node -> its binds' turn while another scheduler is active

    def turn(self, node: str) -> ContextManager:
        """The turn of a bind to ``node``, held from its fresh read until its pod is in the API server: one at a
        time per node while another scheduler is active (module docstring), none needed when Flotilla is alone."""
        if not self.presence.active(self.read_waiting):
            return nullcontext()
        lock = self.turns.get(node)
        if lock is None:
            lock = self.turns.setdefault(node, threading.Lock())
        return lock

    # -- the live view -------------------------------------------------------------------------
    def live_use(self, node: str, pods_on_node: Iterable[CachedPod],
                 stopping: Mapping[str, str]) -> tuple[dict[str, int], int, dict[str, int], int]:
        """What the kubelet of ``node`` will count: the requests and number of its live pods (``pods_on_node``),
        whoever bound them (terminating ones too), with Flotilla's binds not yet seen by the watch; then the part
        of both that is leaving (deleted, or ours being stopped: ``stopping``)."""
        load: dict[str, int] = {}
        leaving: dict[str, int] = {}
        pods = gone = 0
        seen = set()
        for pod in pods_on_node:
            if pod.phase in ENDED:
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
        for job_id, requests in self.admitted_on.get(node, {}).items():
            if job_id in seen:
                continue
            pods += 1
            for resource, amount in requests.items():
                load[resource] = load.get(resource, 0) + amount
        return load, pods, leaving, gone

    def read_afresh(self, node: str) -> tuple[list[dict], list[dict]] | None:
        """While another scheduler is active: the pods on ``node`` and those waiting for other schedulers, read from
        the API server itself (consistent lists), not from the watch, which may lag. None when no other scheduler
        is active or the read fails (the watch's view stands then)."""
        if not self.presence.active(self.read_waiting):
            return None
        try:
            on_node = self.client.get("/api/v1/pods", fieldSelector=f"spec.nodeName={node}").get("items") or []
        except KubeError as exc:
            log.info("kubernetes.fresh_read_failed", cluster=self.cluster, node=node, error=str(exc))
            return None
        waiting = self.read_waiting()
        return None if waiting is None else (on_node, waiting)

    def read_waiting(self) -> list[dict] | None:
        """The pods waiting for other schedulers, read from the API server itself (None when the read fails)."""
        try:
            return self.client.get("/api/v1/pods", fieldSelector="spec.nodeName=,spec.schedulerName!="
                                                                 + self.scheduler_name).get("items") or []
        except KubeError as exc:
            log.info("kubernetes.fresh_read_failed", cluster=self.cluster, error=str(exc))
            return None

    def fresh_view(self, node: Node, fresh: tuple[list[dict], list[dict]],
                   inflight: Mapping[str, Job]) -> tuple[dict[str, int], int, dict]:
        """From a fresh read of ``node`` (:meth:`read_afresh`): what its kubelet will count, and the requests of the
        other schedulers' waiting pods that may take room there and the watch does not show waiting (by key).
        ``inflight``: the starts whose pods the watch has not shown yet, by job id."""
        on_node, waiting = fresh
        admitted = self.admitted_on.get(node.name, {})
        bound_here = {}   # in-cluster pods Flotilla is binding here, by pod: their job ids (their pods carry no label)
        for job_id in admitted:
            job = inflight.get(job_id)
            if job is not None and POD_UID in job.annotations:
                bound_here[(job.annotations[POD_NAMESPACE], job.annotations[POD_NAME])] = job_id
        live = []
        for obj in on_node:
            if (obj.get("status") or {}).get("phase") in ENDED:
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
            if key not in self.undecided and waits_for_node(obj, node.labels, self.scheduler_name):
                try:
                    unseen[key] = pod_requests(obj)
                except (ValueError, ArithmeticError):
                    continue
        return load, pods, unseen

    # -- the verdict -----------------------------------------------------------------------------
    def verdict(self, job: Job, node: str, target: Node, load: dict[str, int], pods: int, leaving: dict[str, int],
                gone: int, unseen: Mapping, clock: Callable[[], float]) -> tuple[str, object]:
        """The verdict on binding ``job`` to node ``node`` (``target``) now, from its live use (``load``, ``pods``,
        the part ``leaving`` and the number of pods ``gone``, :meth:`live_use`) and the other schedulers' pods a
        fresh read found waiting (``unseen``), with the verdict's detail: the moment for ``YIELD_BURST`` (its
        settling counts from it), the shortfall for ``RETURN``. ``BIND`` reserves the room (module docstring)."""
        slots = target.resources.get(PODS)   # its allocatable pods, None when it declares none
        short = shortfall(job.requests, load, target.resources, pods, slots)
        if short is None:
            now = clock()
            waited = now - self.yielding.setdefault(job.id, now)
            incoming = self.incoming(target, now) if (self.undecided or self.arrivals or unseen) \
                and waited < UNDECIDED_WINDOW else None
            if incoming is not None:
                for requests in unseen.values():
                    for resource, amount in requests.items():
                        incoming[resource] = incoming.get(resource, 0) + amount
                if unseen or self.burst_on(target, now):
                    # Its pods are still arriving: more may come than any read shows, placed from a cache
                    # that may not show this bind. Its burst goes first (held, tried again as it settles).
                    return YIELD_BURST, now
            if incoming and shortfall(job.requests, {r: load.get(r, 0) + incoming.get(r, 0)
                                                     for r in set(load) | set(incoming)},
                                      target.resources, pods, slots) is not None:
                # Another scheduler is placing pods that may take this room: they go first (held, and tried
                # again as soon as they are placed or found unschedulable, or its burst is over).
                return YIELD, None
            self.yielding.pop(job.id, None)
            self.admitted[job.id] = node
            self.admitted_on.setdefault(node, {})[job.id] = job.requests
            return BIND, None
        if gone and shortfall(job.requests, {r: v - leaving.get(r, 0) for r, v in load.items()},
                              target.resources, pods - gone, slots) is None:
            return HOLD, None
        return RETURN, short

    def unadmit(self, job_id: str) -> None:
        """Forget ``job_id``'s reserved room: its pod is seen by the watch, or its start is over."""
        node = self.admitted.pop(job_id, None)
        if node is not None:
            on = self.admitted_on[node]
            on.pop(job_id, None)
            if not on:
                del self.admitted_on[node]

    # -- other schedulers' pods ------------------------------------------------------------------
    def note_pod(self, key, obj: dict, node: str | None, phase: str, deleting: bool, requests,
                 clock: Callable[[], float]) -> bool:
        """Keep ``undecided`` from a pod that is not Flotilla's; True when one of them was just decided (bound, or
        found unschedulable): room held for it may go now."""
        if node is None and phase == "Pending" and not deleting and undecided_elsewhere(obj, self.scheduler_name):
            if key not in self.undecided:
                entry = (clock(), requests or {}, (obj.get("spec") or {}).get("nodeSelector") or {})
                self.presence.seen(entry[0])
                self.undecided[key] = entry
                self.arrivals.append((key, *entry))
            return False
        return self.undecided.pop(key, None) is not None

    def forget_pod(self, key) -> bool:
        """Pod ``key`` is gone; True when it was another scheduler's pod not placed yet."""
        return self.undecided.pop(key, None) is not None

    def incoming(self, node: Node, now: float) -> dict[str, int]:
        """The room another scheduler may take on ``node`` any moment: the requests of its pods not placed yet (seen
        within ``UNDECIDED_WINDOW`` seconds), and, while its pods keep arriving, of those that arrived within
        ``ARRIVALS_PERIOD`` seconds and were placed since (its view of the node may not show Flotilla's newest
        binds yet). A pod whose nodeSelector the node does not match takes nothing."""
        incoming: dict[str, int] = {}
        arrivals = self.arrivals
        while arrivals and arrivals[0][1] < now - ARRIVALS_PERIOD:
            arrivals.popleft()
        horizon = now - UNDECIDED_WINDOW
        recent = [entry[1:] for entry in arrivals if entry[0] not in self.undecided]
        for since, requests, selector in [*self.undecided.values(), *recent]:
            if since < horizon or any(node.labels.get(k) != v for k, v in selector.items()):
                continue
            for resource, amount in requests.items():
                incoming[resource] = incoming.get(resource, 0) + amount
        return incoming

    def burst_on(self, node: Node, now: float) -> bool:
        """Whether another scheduler's pods that may take room on ``node`` arrived within ``ARRIVALS_PERIOD``
        seconds (its burst is not over)."""
        return any(since >= now - ARRIVALS_PERIOD and not any(node.labels.get(k) != v for k, v in selector.items())
                   for _, since, _, selector in self.arrivals)

    def settle_delay(self, now: float) -> float:
        """Seconds until the other scheduler's burst is over (its last arrival ``ARRIVALS_PERIOD`` old), and a
        little more."""
        last = max((since for _, since, _, _ in self.arrivals), default=now)
        return min(max(last + ARRIVALS_PERIOD - now, 0.0), ARRIVALS_PERIOD) + 0.05
