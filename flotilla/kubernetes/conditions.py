"""Flotilla's word on pods it did not create: the pod conditions and Events that ``kubectl describe pod`` shows.

A pod that names Flotilla as its scheduler and waits is told why the way
kube-scheduler tells it: the condition ``PodScheduled=False`` with reason
``Unschedulable`` and a message (here starting ``flotilla: ``), plus a
Warning Event ``FailedScheduling`` on the pod. A pod chosen as a preemption
victim gets ``DisruptionTarget=True`` with reason ``PreemptionByScheduler``
before it is deleted, so a Job's ``podFailurePolicy`` can tell a preemption
from a failure.

Every pod Flotilla binds gets a Normal Event ``Scheduled``, ``Successfully
assigned NS/POD to NODE``, as kube-scheduler writes it (``kubectl describe
pod``, and the e2e framework waiting for a pod to be scheduled, read it). A
waiting in-cluster pod whose start is held on a node until the pods preempted
there are gone gets ``status.nominatedNodeName`` and a Normal Event
``Nominated``, as kube-scheduler nominates a preemptor (cleared again when the
held start is dropped). A nomination that reaches a pod already bound is
refused by the API server and is no fault: nothing is logged above debug and
no Event is written. No Event is written into a namespace being deleted
(``writable``): the API server refuses them there.

Conditions are written with a strategic-merge patch of ``pods/status``:
the API server merges ``status.conditions`` by ``type``, so the other
conditions (Ready, Initialized, ...) and the rest of the status stay as
they are, and no read of the pod is needed first.

Writes cost the API server, and a queue of thousands of pods is told the
same thing every cycle, so a pod is told again only when the reason
changes (compared as a value: a :class:`~flotilla.core.reasons.Reason`'s
code, cause and counts, or a refusal's words; the message is worded only
when written), and at most once per ``min_interval`` seconds. The memory for
that is bounded: ``forget`` drops a pod (call it when the pod is deleted)
and past ``max_entries`` the least recently written pods are forgotten
(the worst that costs is one early repeat of a condition).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections import OrderedDict
from datetime import datetime, timezone
from typing import Callable
from urllib.parse import quote

import structlog

from flotilla.core.reasons import Why
from flotilla.kubernetes.client import ApiError, KubeClient, KubeError, pod_path

log = structlog.get_logger("flotilla.kubernetes.conditions")

MESSAGE_PREFIX = "flotilla: "
#: The API server's bound on an Event's message (``NoteLengthLimit``); kube-scheduler truncates to it too.
EVENT_MESSAGE_LIMIT = 1024
#: Condition messages are bounded too: a reason listing every node must not grow a pod's status without limit.
CONDITION_MESSAGE_LIMIT = 4096
STRATEGIC_MERGE = "application/strategic-merge-patch+json"
#: The API server's refusal of a nomination on a pod that has a node (Kubernetes 1.35 and later):
#: ``status.nominatedNodeName: Forbidden: may not be set on pods that are already bound to a node``.
ALREADY_BOUND = ("status.nominatedNodeName", "already bound to a node")


def truncate(message: str, limit: int) -> str:
    """``message`` cut to ``limit`` characters, ending ``" ..."`` when cut (as kube-scheduler's events do)."""
    if len(message) <= limit:
        return message
    return message[:limit - 4] + " ..."


def now_rfc3339() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class _Written:
    __slots__ = ("reason", "at")

    def __init__(self, reason: Why | None, at: float):
        self.reason = reason
        self.at = at


class PodReporter:
    """Writes Flotilla's word onto pods it did not create (in-cluster pods).

    Thread-safe. Failures to write (pod gone, API server unreachable, a
    permission missing) never raise: a 404 means the pod is gone and it is
    forgotten; anything else is logged and the write is tried again on the
    next call after ``min_interval``.
    """

    def __init__(self, client: KubeClient, *, min_interval: float = 10.0, clock: Callable[[], float] = time.monotonic,
                 component: str = "flotilla", max_entries: int = 200_000,
                 writable: Callable[[str], bool] | None = None):
        if min_interval < 0:
            raise ValueError(f"min_interval must be >= 0, got {min_interval}")
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        self.client = client
        self.min_interval = min_interval
        self.clock = clock
        self.component = component
        self.max_entries = max_entries
        self.writable = writable
        self.instance = f"{component}-{socket.gethostname()}-{os.getpid()}"[:128]
        self._written: OrderedDict[str, _Written] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """How many pods are remembered (bounded by ``max_entries``)."""
        return len(self._written)

    def unschedulable(self, namespace: str, name: str, uid: str, reason: Why) -> bool:
        """PodScheduled=False, reason Unschedulable, message 'flotilla: ' + the reason's words, plus a Warning Event
        FailedScheduling on the pod (involvedObject with uid; reportingComponent/source = component); skipped when the reason
        is unchanged (an equal value) or the last write for this uid was less than min_interval ago. True when
        written."""
        now = self.clock()
        with self._lock:
            last = self._written.get(uid)
            if last is not None and (last.reason == reason or now - last.at < self.min_interval):
                return False
            # Claimed before the request so concurrent callers do not write twice; the reason is set on success.
            self._remember(uid, _Written(last.reason if last else None, now))
        message = truncate(MESSAGE_PREFIX + str(reason), CONDITION_MESSAGE_LIMIT)
        condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
                     "lastProbeTime": None}
        if last is None or last.reason is None:
            condition["lastTransitionTime"] = now_rfc3339()
        if not self._patch_status(namespace, name, uid, condition):
            return False
        with self._lock:
            entry = self._written.get(uid)
            if entry is not None:
                entry.reason = reason
        self._event(namespace, name, uid, "Warning", "FailedScheduling", "Scheduling",
                    truncate(message, EVENT_MESSAGE_LIMIT))
        return True

    def disruption_target(self, namespace: str, name: str, uid: str, message: str) -> None:
        """Condition DisruptionTarget=True, reason PreemptionByScheduler, on the pod's status.

        A Normal Event ``Preempted`` with the same message goes on the pod too,
        as kube-scheduler records on its victims.
        """
        condition = {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
                     "message": truncate(message, CONDITION_MESSAGE_LIMIT), "lastTransitionTime": now_rfc3339()}
        if self._patch_status(namespace, name, uid, condition):
            self._event(namespace, name, uid, "Normal", "Preempted", "Preempting",
                        truncate(message, EVENT_MESSAGE_LIMIT))

    def cancelled(self, namespace: str, name: str, uid: str, message: str) -> None:
        """A Normal Event ``Cancelled`` on the pod: its job was cancelled through Flotilla, and it is deleted."""
        self._event(namespace, name, uid, "Normal", "Cancelled", "Deleting",
                    truncate(MESSAGE_PREFIX + message, EVENT_MESSAGE_LIMIT))

    def scheduled(self, namespace: str, name: str, uid: str, node: str) -> None:
        """A Normal Event ``Scheduled`` on a pod just bound to ``node``, in kube-scheduler's words."""
        self._event(namespace, name, uid, "Normal", "Scheduled", "Binding",
                    f"Successfully assigned {namespace}/{name} to {node}")

    def nominated(self, namespace: str, name: str, uid: str, node: str | None, message: str = "") -> None:
        """Set (``node``) or clear (None) ``status.nominatedNodeName``; a Normal Event ``Nominated`` when set."""
        body = {"metadata": {"uid": uid}, "status": {"nominatedNodeName": node}}
        try:
            self.client.patch(pod_path(namespace, name) + "/status", body, kind=STRATEGIC_MERGE)
        except ApiError as exc:
            if exc.status == 422 and all(words in str(exc) for words in ALREADY_BOUND):
                # Written from the reporting pool, so the pod may be bound by the time it goes out; the API server
                # refuses a nomination on a bound pod and clears it at binding (ClearingNominatedNodeNameAfterBinding):
                # nothing is left to say.
                log.debug("pod nomination not needed, pod already bound", pod=f"{namespace}/{name}")
            elif exc.status != 404 and not (exc.status in (409, 422) and "metadata.uid" in str(exc)):
                log.warning("pod nomination not written", pod=f"{namespace}/{name}", error=str(exc))
            return
        except KubeError as exc:
            log.warning("pod nomination not written", pod=f"{namespace}/{name}", error=str(exc))
            return
        if node is not None:
            self._event(namespace, name, uid, "Normal", "Nominated", "Preempting",
                        truncate(MESSAGE_PREFIX + (message or f"nominated to node {node}"), EVENT_MESSAGE_LIMIT))

    def forget(self, uid: str) -> None:
        """Drop what is remembered of pod ``uid`` (call it when the pod is deleted)."""
        with self._lock:
            self._written.pop(uid, None)

    def _remember(self, uid: str, entry: _Written) -> None:
        self._written[uid] = entry
        self._written.move_to_end(uid)
        while len(self._written) > self.max_entries:
            self._written.popitem(last=False)

    def _patch_status(self, namespace: str, name: str, uid: str, condition: dict) -> bool:
        # The uid in the patch is a precondition: the API server refuses (422, uid immutable) a patch aimed at
        # a pod since replaced by another of the same name. The strategic merge keys conditions by type, so the
        # pod's other conditions stay.
        body = {"metadata": {"uid": uid}, "status": {"conditions": [condition]}}
        try:
            self.client.patch(pod_path(namespace, name) + "/status", body, kind=STRATEGIC_MERGE)
            return True
        except ApiError as exc:
            if exc.status == 404 or (exc.status in (409, 422) and "metadata.uid" in str(exc)):
                self.forget(uid)  # this pod is gone (its name may belong to another pod now)
                return False
            log.warning("pod condition not written", pod=f"{namespace}/{name}", condition=condition["type"],
                        error=str(exc))
        except KubeError as exc:
            log.warning("pod condition not written", pod=f"{namespace}/{name}", condition=condition["type"],
                        error=str(exc))
        return False

    def _event(self, namespace: str, name: str, uid: str, kind: str, reason: str, action: str, message: str) -> None:
        if self.writable is not None and not self.writable(namespace):
            return   # being deleted: the API server refuses new objects there
        stamp = now_rfc3339()
        event = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{name}.{time.time_ns():x}", "namespace": namespace},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": namespace, "name": name, "uid": uid},
            "type": kind, "reason": reason, "action": action, "message": message,
            "source": {"component": self.component},
            "reportingComponent": self.component, "reportingInstance": self.instance,
            "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
        }
        try:
            self.client.post(f"/api/v1/namespaces/{quote(namespace)}/events", event, parse=False)
        except KubeError as exc:
            # The namespace may be going away with the pod (deleted since the namespace watch last said); the
            # condition, already written, is what matters.
            if isinstance(exc, ApiError) and exc.status == 403 and "being terminated" in str(exc):
                log.debug("event not recorded: namespace terminating", pod=f"{namespace}/{name}", reason=reason)
                return
            log.warning("event not recorded", pod=f"{namespace}/{name}", reason=reason, error=str(exc))


__all__ = ["MESSAGE_PREFIX", "PodReporter"]
