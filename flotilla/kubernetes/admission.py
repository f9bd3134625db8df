"""Room on a node at the moment of a bind, and the kubelet's refusals: a job returned to its queue, not failed.

Flotilla decides on a snapshot. Between the snapshot and the bind, other
schedulers (kube-scheduler beside Flotilla, a DaemonSet controller, a user
setting ``nodeName``) may bind pods to the same node. So just before each
bind (a pod created with ``nodeName``, or a ``pods/binding``) the backend
checks the node against its live view: every live pod the watch shows on
the node, whoever bound it (terminating ones too, as the kubelet counts
them), plus Flotilla's own binds not yet seen by the watch. A pod that no
longer fits is not bound: its job is *returned* to its queue with the
reason (``Insufficient cpu``, ``Too many pods``, kube-scheduler's words),
using none of its retries. A bind that fits only once a pod leaving the
node is gone is held for that node instead (the backend's held starts).

Another scheduler's pods that wait for it to place them (just created, no
node yet, not found unschedulable, no scheduling gates) may take any node's
room within moments, and its cache may not show Flotilla's newest binds yet:
a bind that would not fit beside them waits until that scheduler has placed
them (or said it cannot). While such pods keep arriving, those that arrived
within ``ARRIVALS_PERIOD`` count so even once placed: the other scheduler's
view of the node may not show Flotilla's newest binds yet, so a bind into
the room its burst may take waits for the burst to pass. A bind gives way
so for at most ``UNDECIDED_WINDOW`` seconds. The room contested at that
moment goes to the pods that were waiting first.

The watch may lag: under load another scheduler's pod can be created, and
even bound, before the watch shows it, and that scheduler binds from its own
cache, which may not show Flotilla's bind yet. So while another scheduler is
active (its pods seen within ``OTHER_SCHEDULER_PERIOD``), each bind first
reads the API server afresh (a consistent list, not the watch): the pods on
the node and the pods waiting for other schedulers. The check then counts the
larger of the two views of the node (:func:`fresh_use`) and every waiting pod
either view shows (:func:`waits_for_node`); binds to one node go one at a time
then, each reading after the previous one's pod is in the API server (binds
decided together from one read would all miss a burst created while they are
on their way). Until another scheduler has been
seen (at start-up, and once ``OTHER_SCHEDULER_PERIOD`` has passed without
one), the watch alone cannot say none is there: its pods may be created, and
even placed, before the watch shows them. So the first bind of each cycle of
starts makes one consistent read of the pods waiting for other schedulers
(:class:`SchedulerPresence`), and the binds of that cycle wait for it: one
read per cycle on a cluster where Flotilla is alone, not one per bind. If it
shows one undecided, the other scheduler is active and every bind reads
afresh as above. What is left open is a pod created after the last read of a node and
placed by the other scheduler before its cache shows Flotilla's bind there:
Flotilla cannot see it in time, and the kubelet refuses whichever pod no
longer fits (docs/kubernetes.md gives how often).

The kubelet checks again when the pod arrives (``pkg/kubelet/lifecycle/
predicate.go``): a pod it does not admit ends ``Failed`` at once with the
reason of the first check that failed. Those reasons say the node was the
wrong place at that moment, not that the job is wrong, so such a pod's job
is returned too (:func:`admission_rejection`); a kubelet's ``Evicted`` and
node shutdowns stay platform failures (retried, counted).

Both kinds are counted by the ``flotilla_binds_returned_total{cluster,
reason}`` metric, with a reason label from a bounded set
(:func:`returned_label`).
"""

from __future__ import annotations

import threading
from typing import Callable, Iterable, Mapping

#: The kubelet's admission reasons (predicate.go) that send the job back to its queue. ``OutOf<resource>``
#: (``OutOfcpu``, ``OutOfmemory``, ``OutOfpods``, ``OutOfephemeral-storage``, an extended resource's) is matched
#: by its prefix; the others are the scheduler filters the kubelet runs again (NodeAffinity, NodeName, NodePorts,
#: TaintToleration for NoExecute taints) and the errors it could not classify.
ADMISSION_REASONS = frozenset({
    "NodeAffinity", "NodeName", "NodePorts", "TaintToleration", "UnexpectedAdmissionError", "InvalidNodeInfo",
    "UnknownReason", "UnexpectedPredicateFailureType", "PodOSSelectorNodeLabelDoesNotMatch",
    "TopologyAffinityError", "SMTAlignmentError",
})
OUT_OF = "OutOf"
#: The metric's label for a refusal outside the lists above (kept bounded whatever a kubelet writes).
OTHER = "Other"


def admission_rejection(reason: str) -> bool:
    """Whether a failed pod's ``status.reason`` is a kubelet admission refusal that returns its job to the queue."""
    return reason in ADMISSION_REASONS or (reason.startswith(OUT_OF) and len(reason) > len(OUT_OF))


def returned_label(reason: str, resources: Mapping[str, int] | None = None) -> str:
    """``reason`` as a label value of ``flotilla_binds_returned_total``: the kubelet's reason or the live check's
    (``Insufficient cpu``, ``Too many pods``); an ``OutOf``/``Insufficient`` resource the node does not declare
    (``resources``, when given) and anything else unknown become ``Other``."""
    if reason in ADMISSION_REASONS or reason == TOO_MANY_PODS:
        return reason
    for prefix in (OUT_OF, INSUFFICIENT):
        if reason.startswith(prefix) and len(reason) > len(prefix):
            resource = reason[len(prefix):]
            if resources is None or resource in resources or resource == "pods":
                return reason
    return OTHER


INSUFFICIENT = "Insufficient "
#: How long another scheduler's new pod counts as about to be placed (seconds since the watch first showed it), and
#: the longest a bind gives way to another scheduler's pods.
UNDECIDED_WINDOW = 10.0
#: While another scheduler's pods keep arriving, those that arrived within this many seconds count as about to
#: take room even once placed: its view of a node may not show Flotilla's newest binds yet.
ARRIVALS_PERIOD = 1.0


def undecided_elsewhere(pod: Mapping, scheduler_name: str) -> bool:
    """Whether ``pod`` (no node yet) waits for another scheduler that has not decided about it: not Flotilla's
    (neither made by it nor naming ``scheduler_name``), no scheduling gates, not found unschedulable
    (``PodScheduled=False``)."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    if "flotilla.io/job-id" in (meta.get("labels") or {}) or spec.get("schedulingGates"):
        return False
    if (spec.get("schedulerName") or "default-scheduler") == scheduler_name:
        return False
    return not any(c.get("type") == "PodScheduled" and c.get("status") == "False"
                   for c in (pod.get("status") or {}).get("conditions") or ())
TOO_MANY_PODS = "Too many pods"
#: Another scheduler counts as active (binds read the API server afresh) this many seconds after the watch last
#: showed one of its pods waiting.
OTHER_SCHEDULER_PERIOD = 300.0

#: How long a read that found no other scheduler's pod waiting vouches for the binds after it (seconds).
PRESENCE_READ_TRUSTED = 0.25


def waiting_elsewhere(pod: Mapping, scheduler_name: str) -> bool:
    """Whether ``pod``, read afresh, is another scheduler's undecided pod (:func:`undecided_elsewhere`) still to be
    placed (no node yet; not deleted; Pending)."""
    spec = pod.get("spec") or {}
    if spec.get("nodeName") or (pod.get("metadata") or {}).get("deletionTimestamp") \
            or (pod.get("status") or {}).get("phase", "Pending") != "Pending":
        return False
    return undecided_elsewhere(pod, scheduler_name)


def waits_for_node(pod: Mapping, labels: Mapping[str, str], scheduler_name: str) -> bool:
    """Whether ``pod``, read afresh, waits elsewhere (:func:`waiting_elsewhere`) and may take room on a node of
    ``labels`` (its nodeSelector matches)."""
    if any(labels.get(k) != v for k, v in ((pod.get("spec") or {}).get("nodeSelector") or {}).items()):
        return False
    return waiting_elsewhere(pod, scheduler_name)


class SchedulerPresence:
    """Whether another scheduler is active, for the binds' fresh reads (module docstring): one of its pods seen
    waiting within ``OTHER_SCHEDULER_PERIOD`` (:meth:`seen`, from the watch), or else found by this cycle's one
    consistent read of the pods waiting for other schedulers (:meth:`active`; :meth:`new_cycle` starts a cycle of
    starts). Until a read says none waits, binds do not go: the first of a cycle reads, the others wait for it.
    A read that found none is trusted for ``PRESENCE_READ_TRUSTED`` seconds only: under load a cycle's binds
    spread over a second or more, and another scheduler's burst may start right after the read; a later bind of
    the same cycle then makes a new read (shared with the binds that wait on it), so the reads stay bounded by
    time, not by binds."""

    def __init__(self, clock: Callable[[], float], scheduler_name: str):
        self.clock = clock
        self.scheduler_name = scheduler_name
        self.seen_at: float | None = None   # when the watch, or a read, last showed another scheduler's pod waiting
        self.cycle = 0
        self.probed = -1                    # the cycle whose read is done
        self.probed_at = 0.0                # when that read was made
        self.reads = 0
        self._lock = threading.Lock()

    def seen(self, at: float) -> None:
        self.seen_at = at

    def new_cycle(self) -> None:
        self.cycle += 1

    def recent(self) -> bool:
        seen = self.seen_at
        return seen is not None and self.clock() - seen <= OTHER_SCHEDULER_PERIOD

    def active(self, read_waiting: Callable[[], list[dict] | None]) -> bool:
        """Whether another scheduler is active, reading the pods waiting for other schedulers (``read_waiting``:
        a consistent list, None when it failed) once per cycle while none has been seen recently."""
        if self.recent():
            return True
        with self._lock:
            if self.recent():
                return True
            if self.probed == self.cycle and self.clock() - self.probed_at <= PRESENCE_READ_TRUSTED:
                return False
            cycle = self.cycle
            waiting = read_waiting()
            self.reads += 1
            self.probed = cycle
            self.probed_at = self.clock()
            if waiting is not None and any(waiting_elsewhere(pod, self.scheduler_name) for pod in waiting):
                self.seen_at = self.clock()
                return True
            return False


def fresh_use(live: Iterable[tuple[str | None, Mapping[str, int]]],
              admitted: Mapping[str, Mapping[str, int]]) -> tuple[dict[str, int], int]:
    """The requests and number of pods on a node as a fresh read shows it: its live pods (``(job id or None,
    requests)``, terminating ones too) and Flotilla's admitted binds (job id -> requests) the read does not show."""
    load: dict[str, int] = {}
    pods = 0
    seen = set()
    for job_id, requests in live:
        pods += 1
        if job_id is not None:
            seen.add(job_id)
        for resource, amount in requests.items():
            load[resource] = load.get(resource, 0) + amount
    for job_id, requests in admitted.items():
        if job_id not in seen:
            pods += 1
            for resource, amount in requests.items():
                load[resource] = load.get(resource, 0) + amount
    return load, pods


def shortfall(requests: Mapping[str, int], load: Mapping[str, int], allocatable: Mapping[str, int],
              pods: int, pod_slots: int | None) -> str | None:
    """What a pod of ``requests`` lacks on a node already holding ``load`` and ``pods`` pods, as kube-scheduler's
    NodeResourcesFit says it (``Too many pods``, ``Insufficient cpu``); None when it fits. ``pod_slots``: the
    node's allocatable ``pods`` (None: not declared)."""
    if pod_slots is not None and pods + 1 > pod_slots:
        return TOO_MANY_PODS
    for resource, amount in requests.items():
        if amount > 0 and resource != "pods" and load.get(resource, 0) + amount > allocatable.get(resource, 0):
            return INSUFFICIENT + resource
    return None


__all__ = ["ADMISSION_REASONS", "OTHER", "OTHER_SCHEDULER_PERIOD", "PRESENCE_READ_TRUSTED", "TOO_MANY_PODS", "UNDECIDED_WINDOW",
           "ARRIVALS_PERIOD", "SchedulerPresence", "admission_rejection", "fresh_use", "returned_label", "shortfall",
           "undecided_elsewhere", "waiting_elsewhere", "waits_for_node"]
