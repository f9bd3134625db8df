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

from typing import Mapping

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
TOO_MANY_PODS = "Too many pods"


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


__all__ = ["ADMISSION_REASONS", "OTHER", "TOO_MANY_PODS", "admission_rejection", "returned_label", "shortfall"]
