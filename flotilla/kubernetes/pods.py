"""Jobs as pods and back: the pod Flotilla creates for a job, and what it reads from pods and nodes.

Every pod Flotilla creates carries the label ``flotilla.io/job-id`` (that is
how its pods are told from everyone else's) and labels for its queue, job
set and priority class; the exact values (labels are limited to 63
characters) and what the scheduler needs to rebuild the job from the pod
alone (priority, submission time, gang) are in annotations. Pods nobody
labelled that sit on a node Flotilla schedules onto are *foreign*: their
requests are taken off that node's free space, and each takes one of its
pod slots (allocatable ``pods``).
"""

from __future__ import annotations

import calendar
import copy
import hashlib
import re
import time
from dataclasses import dataclass
from typing import Any, Mapping

from flotilla.core.backend import PodTemplate
from flotilla.core.gangannotations import read_gang_annotations
from flotilla.core.model import (GANG_CARDINALITY_ANNOTATION, GANG_ID_ANNOTATION, GANG_NODE_UNIFORMITY_LABEL_ANNOTATION,
                                 DEFAULT_GRACE_PERIOD, ForeignPod, Job, JobState, Node, Taint,
                                 Toleration)
from flotilla.core.hostports import ANY_IP, host_port
from flotilla.core.nodeaffinity import AffinityError, parse_node_affinity
from flotilla.core.podrules import PodRules, parse_pod_rules
from flotilla.core.quantities import QuantityError, format_quantity, parse_quantity
from flotilla.kubernetes.requests import effective_requests
from flotilla.kubernetes.services import OWNED, exposure_manifests

PREFIX = "flotilla.io/"
JOB_ID = PREFIX + "job-id"
QUEUE = PREFIX + "queue"
JOB_SET = PREFIX + "job-set"
PRIORITY_CLASS = PREFIX + "priority-class"
PRIORITY = PREFIX + "priority"
SUBMITTED = PREFIX + "submitted"
ATTEMPT = PREFIX + "attempt"
GRACE_PERIOD = PREFIX + "grace-period"
DEADLINE = PREFIX + "active-deadline"
DURATION = PREFIX + "simulated-duration"
NAMESPACE = PREFIX + "namespace"
IMAGE = PREFIX + "image"
#: The pod's place among its job's podSpecs (label and annotation), 0 for a job of one pod.
POD_NUMBER = PREFIX + "pod-number"
#: kwok's delay annotation read by our pod-complete Stage (flotilla/kwok/stages/pods.yaml).
KWOK_COMPLETE_DELAY = "pod-complete.stage.kwok.x-k8s.io/delay"
FAKE_NODE = "kwok.x-k8s.io/node"

DEFAULT_IMAGE = "registry.k8s.io/pause:3.10"
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_NAME_BAD = re.compile(r"[^a-z0-9-]+")


def label_value(value: str) -> str:
    """``value`` if it is a valid label value, else a valid one derived from it (the exact value is in an annotation)."""
    if len(value) <= 63 and _LABEL_VALUE.match(value):
        return value
    digest = hashlib.sha1(value.encode()).hexdigest()[:10]
    cleaned = re.sub(r"[^-A-Za-z0-9_.]+", "-", value)[:50].strip("-_.")
    return f"{cleaned}-{digest}" if cleaned else digest


def pod_name(prefix: str, job_id: str, attempt: int) -> str:
    """A DNS-1123 name for the job's ``attempt``-th pod (a preempted job's next pod must not collide with the old one)."""
    cleaned = _NAME_BAD.sub("-", job_id.lower()).strip("-")
    if cleaned != job_id or len(cleaned) > 200:
        cleaned = f"{cleaned[:180].strip('-')}-{hashlib.sha1(job_id.encode()).hexdigest()[:8]}".strip("-")
    return f"{prefix}{cleaned}-{attempt}"


@dataclass(frozen=True, slots=True)
class PodSettings:
    """How jobs become pods on one cluster."""

    namespace: str = "default"
    name_prefix: str = "flotilla-"
    image: str = DEFAULT_IMAGE
    scheduler_name: str = "flotilla"
    grace_default: float = DEFAULT_GRACE_PERIOD
    deadline_cpu: float | None = 3 * 86400
    deadline_gpu: float | None = 14 * 86400
    set_priority_class_name: bool = True
    #: Ingress hosts are ``<pod>-<port>.<ingress_domain>``; none: rules by path (flotilla/kubernetes/services.py).
    ingress_domain: str | None = None


def _seconds_int(value: float) -> int:
    return max(1, int(round(value)))


def job_namespace(job: Job, settings: PodSettings, template: PodTemplate | None = None) -> str:
    """The job's own namespace, else the cluster's ``namespace`` setting (``default`` unless set)."""
    return ((template.namespace if template is not None else None) or getattr(job, "namespace", None)
            or job.annotations.get(NAMESPACE) or settings.namespace)


def named_grace_period(job: Job) -> float | None:
    """The grace period ``job`` names itself (its attribute, else its annotation), or None."""
    value = getattr(job, "grace_period", None)
    if value is None and GRACE_PERIOD in job.annotations:
        try:
            value = float(job.annotations[GRACE_PERIOD])
        except ValueError:
            value = None
    return value


def job_grace_period(job: Job, settings: PodSettings) -> int:
    value = named_grace_period(job)
    return _seconds_int(settings.grace_default if value is None else value)


def delete_grace(job: Job, settings: PodSettings) -> int | None:
    """The grace period to delete ``job``'s pod with: the job's own when it names one; else None, the pod's
    ``terminationGracePeriodSeconds``, which it was made with (a job rebuilt from its pod names none)."""
    if named_grace_period(job) is None:
        return None
    return job_grace_period(job, settings)


def job_deadline(job: Job, settings: PodSettings) -> int | None:
    value = getattr(job, "deadline", None)
    if value is None and DEADLINE in job.annotations:
        try:
            value = float(job.annotations[DEADLINE])
        except ValueError:
            value = None
    if value is None:
        gpu = any(amount > 0 for name, amount in job.requests.items() if name.endswith("/gpu"))
        value = settings.deadline_gpu if gpu else settings.deadline_cpu
    return None if value is None else _seconds_int(value)


def pod_manifest(job: Job, node: str | None, attempt: int, settings: PodSettings,
                 duration: float | None = None, priority_class_known: bool = True,
                 template: PodTemplate | None = None) -> dict[str, Any]:
    """The pod for ``job``: bound to ``node`` (``spec.nodeName``) or, with ``node=None``, pending for a binding.

    With a ``template`` (what the user submitted), the pod is the user's
    podSpec with the fields the scheduler owns set on top (:func:`owned_fields`),
    in the job's namespace, with the job's labels and annotations beside
    Flotilla's own and its ``flotilla.io/pod-number``. Without one, a
    stand-in pod of the job's requests (``simulate --real-time``, benchmarks).
    """
    labels = dict(template.labels) if template is not None else {}
    labels.update({
        JOB_ID: label_value(job.id),
        QUEUE: label_value(job.queue),
        JOB_SET: label_value(job.job_set or "none"),
        PRIORITY_CLASS: label_value(job.priority_class or "none"),
    })
    annotations = dict(template.annotations) if template is not None else {}
    annotations.update(job.annotations)
    annotations.update({
        JOB_ID: job.id, QUEUE: job.queue, JOB_SET: job.job_set, PRIORITY_CLASS: job.priority_class,
        PRIORITY: str(job.priority), SUBMITTED: repr(float(job.submitted)), ATTEMPT: str(attempt),
    })
    if template is not None:
        labels[POD_NUMBER] = annotations[POD_NUMBER] = str(template.pod_number)
    if job.gang is not None:
        annotations[GANG_ID_ANNOTATION] = job.gang.id
        annotations[GANG_CARDINALITY_ANNOTATION] = str(job.gang.cardinality)
        if job.gang.uniformity_label:
            annotations[GANG_NODE_UNIFORMITY_LABEL_ANNOTATION] = job.gang.uniformity_label
    if duration is not None:
        annotations[KWOK_COMPLETE_DELAY] = f"{max(0, int(round(duration * 1000)))}ms"
    spec = copy.deepcopy(dict(template.pod_spec)) if template is not None else _stand_in_spec(job, settings)
    owned_fields(spec, job, node, settings, priority_class_known)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(settings.name_prefix, job.id, attempt),
            "namespace": job_namespace(job, settings, template),
            "labels": labels,
            "annotations": annotations,
        },
        "spec": spec,
    }
    if template is not None and (template.services or template.ingresses):
        annotations[OWNED] = ",".join(f"{resource}/{obj['metadata']['name']}" for resource, obj in
                                      exposure_manifests(pod, template.services, template.ingresses))
    return pod


def _stand_in_spec(job: Job, settings: PodSettings) -> dict[str, Any]:
    """One pause container holding the job's requests, for jobs that come without a podSpec."""
    resources = {name: format_quantity(amount, name) for name, amount in job.requests.items()}
    spec: dict[str, Any] = {
        "containers": [{
            "name": "job",
            "image": job.annotations.get(IMAGE, settings.image),
            "resources": {"requests": resources, "limits": dict(resources)},
        }],
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "tolerations": [_toleration_dict(t) for t in job.tolerations],
    }
    if job.node_selector:
        spec["nodeSelector"] = dict(job.node_selector)
    if job.affinity is not None:
        spec["affinity"] = {"nodeAffinity": job.affinity.to_kubernetes()}
    if job.host_ports:
        spec["containers"][0]["ports"] = [{"containerPort": port, "hostPort": port, "protocol": protocol,
                                           **({} if ip == ANY_IP else {"hostIP": ip})}
                                          for protocol, port, ip in job.host_ports]
    return spec


def owned_fields(spec: dict[str, Any], job: Job, node: str | None, settings: PodSettings,
                 priority_class_known: bool = True) -> None:
    """Set, in ``spec``, the fields the scheduler owns; everything else stays as the user gave it.

    nodeName (unless bound later through the binding subresource),
    schedulerName, priorityClassName (when the cluster has the class),
    terminationGracePeriodSeconds and activeDeadlineSeconds (the job's,
    in whole seconds), restartPolicy (Never unless the user chose
    OnFailure), and every container's requests equal to its limits.
    """
    spec.setdefault("restartPolicy", "Never")
    spec["schedulerName"] = settings.scheduler_name
    spec["terminationGracePeriodSeconds"] = job_grace_period(job, settings)
    deadline = job_deadline(job, settings)
    if deadline is not None:
        spec["activeDeadlineSeconds"] = deadline
    else:
        spec.pop("activeDeadlineSeconds", None)
    if node is not None:
        spec["nodeName"] = node
    if settings.set_priority_class_name and priority_class_known and job.priority_class:
        spec["priorityClassName"] = job.priority_class
    else:
        spec.pop("priorityClassName", None)
    for group in ("containers", "initContainers"):
        for container in spec.get(group) or ():
            resources = container.get("resources")
            if resources:
                both = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
                resources["requests"], resources["limits"] = both, dict(both)


def _toleration_dict(t: Toleration) -> dict[str, str]:
    out = {"operator": t.operator}
    if t.key:
        out["key"] = t.key
    if t.value:
        out["value"] = t.value
    if t.effect:
        out["effect"] = t.effect
    return out


# -- reading back ------------------------------------------------------------------

def _quantity(value: Any, resource: str) -> int:
    try:
        return parse_quantity(value, resource)
    except QuantityError:
        # Not whole in our unit (e.g. 1.5 bytes of memory): round up, never let it fit where it would not.
        from decimal import ROUND_CEILING, Decimal
        text = str(value)
        for suffix, factor in (("Ki", 2**10), ("Mi", 2**20), ("Gi", 2**30), ("Ti", 2**40), ("m", Decimal("0.001"))):
            if text.endswith(suffix):
                amount = Decimal(text[: -len(suffix)]) * Decimal(factor)
                break
        else:
            amount = Decimal(text)
        if resource == "cpu":
            amount *= 1000
        return int(amount.to_integral_value(ROUND_CEILING))


def _request_map(resources: Mapping[str, Any] | None) -> dict[str, int]:
    """A container's (or the pod's) requests; a limit alone is also the request, as the API server defaults it."""
    resources = resources or {}
    both = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    return {name: _quantity(value, name) for name, value in both.items()}


def pod_requests(pod: Mapping[str, Any]) -> dict[str, int]:
    """Effective requests as kube-scheduler counts them (:func:`flotilla.kubernetes.requests.effective_requests`)."""
    spec = pod.get("spec") or {}
    containers = [_request_map(c.get("resources")) for c in spec.get("containers") or ()]
    init = [(_request_map(c.get("resources")), c.get("restartPolicy") == "Always")
            for c in spec.get("initContainers") or ()]
    overhead = {name: _quantity(value, name) for name, value in (spec.get("overhead") or {}).items()}
    pod_level = _request_map(spec.get("resources")) if spec.get("resources") else None
    return effective_requests(containers, init, overhead, pod_level)


def pod_host_ports(spec: Mapping[str, Any]) -> tuple[tuple[str, int, str], ...]:
    """The ``(protocol, port, host IP)`` a pod binds on its node: its containers' and sidecars' host ports
    (every container port with ``hostNetwork``), sorted, each once; host IP ``0.0.0.0`` when none is named
    (:func:`flotilla.core.hostports.host_port`)."""
    containers = list(spec.get("containers") or ())
    containers += [c for c in spec.get("initContainers") or () if c.get("restartPolicy") == "Always"]
    found = set()
    for container in containers:
        for port in container.get("ports") or ():
            number = port.get("hostPort") or (port.get("containerPort") if spec.get("hostNetwork") else None)
            if number:
                found.add(host_port(port.get("protocol"), number, port.get("hostIP")))
    return tuple(sorted(found))


def is_ours(pod: Mapping[str, Any]) -> bool:
    return JOB_ID in ((pod.get("metadata") or {}).get("labels") or {})


def pod_phase(pod: Mapping[str, Any]) -> str:
    return (pod.get("status") or {}).get("phase") or "Pending"


def is_terminal(pod: Mapping[str, Any]) -> bool:
    return pod_phase(pod) in ("Succeeded", "Failed")


def container_outcomes(pod: Mapping[str, Any]) -> list[str]:
    """What went wrong in the pod's containers: ``container train exited 137 (OOMKilled)``, init containers first."""
    status = pod.get("status") or {}
    out = []
    for group, kind in (("initContainerStatuses", "init container"), ("containerStatuses", "container")):
        for container in status.get(group) or ():
            terminated = (container.get("state") or {}).get("terminated") or \
                (container.get("lastState") or {}).get("terminated")
            if terminated and terminated.get("exitCode", 0) != 0:
                text = f"{kind} {container.get('name', '?')} exited {terminated['exitCode']}"
                if terminated.get("reason"):
                    text += f" ({terminated['reason']})"
                if terminated.get("message"):
                    text += f": {terminated['message']}"
                out.append(text)
    return out


def failure_reason(pod: Mapping[str, Any]) -> str:
    """Why a pod failed, for the job's events: the pod's reason and message, then each container's exit."""
    status = pod.get("status") or {}
    parts = []
    if status.get("reason"):
        parts.append(status["reason"] + (f": {status['message']}" if status.get("message") else ""))
    elif status.get("message"):
        parts.append(status["message"])
    parts.extend(container_outcomes(pod))
    return "; ".join(parts) or "pod failed"


#: A failed pod's own reasons that mean its node went away (shut down, lost): retry policies' ``NodeLost``.
NODE_GONE_REASONS = frozenset({"NodeLost", "Shutdown", "NodeShutdown", "Terminated"})


def failure_details(pod: Mapping[str, Any]) -> tuple[int | None, str]:
    """A failed pod's exit code and cause, as retry policies match them (:data:`flotilla.core.backend.FAILURE_CAUSES`).

    A pod the kubelet failed itself (``status.reason``: Evicted, DeadlineExceeded, a node shut down) has that
    cause and no exit code: its containers were killed for it, whatever code they died with. Otherwise the exit
    code is that of the first container (init containers first) that exited non-zero, and the cause ``OOMKilled``
    when that container was killed for memory.
    """
    status = pod.get("status") or {}
    reason = status.get("reason") or ""
    if reason:
        if reason in ("Evicted", "DeadlineExceeded"):
            return None, reason
        return None, "NodeLost" if reason in NODE_GONE_REASONS else ""
    for group in ("initContainerStatuses", "containerStatuses"):
        for container in status.get(group) or ():
            terminated = (container.get("state") or {}).get("terminated") or \
                (container.get("lastState") or {}).get("terminated")
            code = terminated.get("exitCode", 0) if terminated else 0
            if isinstance(code, int) and code != 0:
                return code, "OOMKilled" if terminated.get("reason") == "OOMKilled" else ""
    return None, ""


def pod_finished_at(pod: Mapping[str, Any]) -> float | None:
    """When an ended pod ended (seconds since the epoch): its containers' latest ``state.terminated.finishedAt``,
    else its ``Ready`` condition's ``lastTransitionTime``; None when the pod says neither. Read from the pod
    itself, so that a process started later knows how long a finished pod has been kept."""
    status = pod.get("status") or {}
    times = [((container.get("state") or {}).get("terminated") or {}).get("finishedAt")
             for group in ("initContainerStatuses", "containerStatuses") for container in status.get(group) or ()]
    if not any(times):
        times = [condition.get("lastTransitionTime") for condition in status.get("conditions") or ()
                 if condition.get("type") == "Ready"]
    seconds = [_epoch(text) for text in times if isinstance(text, str)]
    seconds = [value for value in seconds if value is not None]
    return max(seconds) if seconds else None


def _epoch(text: str) -> float | None:
    """An RFC 3339 time as the API server writes it (``2026-11-29T00:30:00Z``), else None."""
    try:
        return float(calendar.timegm(time.strptime(text[:19], "%Y-%m-%dT%H:%M:%S")))
    except ValueError:
        return None


def disruption(pod: Mapping[str, Any]) -> str:
    """The pod's ``DisruptionTarget=True`` condition as ``reason: message`` (evicted, preempted, a taint), or ``""``."""
    for condition in (pod.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "DisruptionTarget" and condition.get("status") == "True":
            reason = condition.get("reason") or "DisruptionTarget"
            return reason + (f": {condition['message']}" if condition.get("message") else "")
    return ""


#: Waiting reasons of a container whose image will never come (the kubelet's images package): the job fails.
PERMANENT_PULL_REASONS = frozenset({"ErrImageNeverPull", "InvalidImageName"})
#: What a registry says of an image that does not exist, in an ``ErrImagePull`` message (containerd's wording).
IMAGE_MISSING = ("not found", "manifest unknown", "repository does not exist")
#: The waiting reasons the kubelet gives while it merely prepares a container: said only when nothing else is.
_PREPARING = ("ContainerCreating", "PodInitializing")


def waiting_container(pod: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """``(container, reason, message)`` of the pod's first waiting container that says why (init containers
    first; ``ContainerCreating`` only when no container says more), or None."""
    status = pod.get("status") or {}
    preparing = None
    for group in ("initContainerStatuses", "containerStatuses"):
        for container in status.get(group) or ():
            waiting = (container.get("state") or {}).get("waiting")
            if waiting and waiting.get("reason"):
                found = (container.get("name", "?"), waiting["reason"], waiting.get("message") or "")
                if waiting["reason"] not in _PREPARING:
                    return found
                preparing = preparing or found
    return preparing


def permanent_pull_failure(reason: str, message: str) -> bool:
    """Whether a waiting container's image will never be pulled: never-pull policy, an invalid name, or an image
    the registry says does not exist. (``ImagePullBackOff`` alone is not: the backend counts its back-offs.)"""
    if reason in PERMANENT_PULL_REASONS:
        return True
    return reason == "ErrImagePull" and any(text in message.lower() for text in IMAGE_MISSING)


def waiting_reason(pod: Mapping[str, Any]) -> str:
    """Why a pod that has not started is waiting (``container c: ErrImagePull: ...``), or ``""``."""
    status = pod.get("status") or {}
    found = waiting_container(pod)
    if found is not None:
        name, reason, message = found
        return f"container {name}: {reason}" + (f": {message}" if message else "")
    for condition in status.get("conditions") or ():
        if condition.get("status") == "False" and condition.get("reason"):
            return f"{condition.get('type')}: {condition['reason']}"
    return ""


def job_from_pod(pod: Mapping[str, Any], cluster: str, requests_cache: dict | None = None) -> Job:
    """The running job a Flotilla pod stands for, rebuilt from its labels, annotations and spec."""
    meta = pod["metadata"]
    ann = meta.get("annotations") or {}
    labels = meta.get("labels") or {}
    spec = pod.get("spec") or {}
    # Flotilla wrote these annotations from the job's gang; the one reading of them (a wrong one is dropped).
    gang = read_gang_annotations(ann).gang() if GANG_ID_ANNOTATION in ann else None
    requests = pod_requests(pod)
    if requests_cache is not None:  # identical request mappings shared, as the core expects of bulk jobs
        key = tuple(sorted(requests.items()))
        requests = requests_cache.setdefault(key, requests)
    tolerations = tuple(
        Toleration(t.get("key", ""), t.get("operator", "Equal"), t.get("value", ""), t.get("effect", ""))
        for t in spec.get("tolerations") or ())
    try:
        priority = int(ann.get(PRIORITY, "0"))
    except ValueError:
        priority = 0
    try:
        submitted = float(ann.get(SUBMITTED, "0"))
    except ValueError:
        submitted = 0.0
    user_annotations = {k: v for k, v in ann.items() if not k.startswith(PREFIX) and "kwok.x-k8s.io" not in k
                        and k not in (GANG_ID_ANNOTATION, GANG_CARDINALITY_ANNOTATION)}
    return Job(
        id=ann.get(JOB_ID) or labels[JOB_ID],
        queue=ann.get(QUEUE) or labels.get(QUEUE, ""),
        job_set=ann.get(JOB_SET, labels.get(JOB_SET, "")),
        priority=priority,
        priority_class=ann.get(PRIORITY_CLASS) or spec.get("priorityClassName") or "",
        submitted=submitted,
        requests=requests,
        node_selector=dict(spec.get("nodeSelector") or {}),
        tolerations=tolerations,
        gang=gang,
        state=JobState.RUNNING,
        cluster=cluster,
        node=spec.get("nodeName"),
        annotations=user_annotations,
        host_ports=pod_host_ports(spec),
        affinity=_node_affinity(spec),
        labels=dict(labels),
        namespace=meta.get("namespace") or "",
        pod_rules=_pod_rules(spec, meta.get("namespace") or "default", labels),
    )


def _pod_rules(spec: Mapping[str, Any], namespace: str, labels: Mapping[str, str]) -> PodRules | None:
    """The pod's inter-pod affinity and spread as the core's object (None: none, or none Kubernetes accepts)."""
    affinity = spec.get("affinity") or {}
    if not (affinity.get("podAffinity") or affinity.get("podAntiAffinity") or spec.get("topologySpreadConstraints")):
        return None
    try:
        return parse_pod_rules(affinity, spec.get("topologySpreadConstraints"), namespace, labels)
    except AffinityError:
        return None


def foreign_pod(key: tuple[str, str], labels: Mapping[str, str], spec: Mapping[str, Any],
                terminating: bool = False) -> ForeignPod:
    """Someone else's pod (``key`` its namespace and name) as pod rules see it: only its required anti-affinity
    binds other pods, so only that is kept of its rules."""
    rules = _pod_rules(spec, key[0], labels)
    if rules is not None:
        rules = PodRules(anti_affinity=rules.anti_affinity) if rules.anti_affinity else None
    return ForeignPod(f"{key[0]}/{key[1]}", key[0], dict(labels), rules, terminating)


def _node_affinity(spec: Mapping[str, Any]):
    """The pod's node affinity as the core's object (a running pod's: only the label keys it reads matter)."""
    try:
        return parse_node_affinity((spec.get("affinity") or {}).get("nodeAffinity"))
    except AffinityError:
        return None


#: The taint that says what ``spec.unschedulable`` says (cordoned): left to ``unschedulable``, as kube-scheduler's
#: NodeUnschedulable plugin words it.
_CORDON_TAINT = "node.kubernetes.io/unschedulable"
#: The taints Kubernetes' node lifecycle controller puts on a node that is not Ready (or whose kubelet is silent).
NOT_READY_TAINTS = frozenset({"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"})


def node_ready(node: Mapping[str, Any]) -> bool:
    for condition in (node.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return False


def node_from_object(obj: Mapping[str, Any], cluster: str) -> Node:
    """A scheduler node: allocatable resources (``pods`` too: its pod slots), labels, taints; a cordoned node is
    unschedulable.

    A node that is not Ready keeps the ``node.kubernetes.io/not-ready`` (or ``unreachable``) taint the node
    lifecycle controller gives it, and is given ``node.kubernetes.io/not-ready:NoSchedule`` when it has neither
    (no controller running): it takes only pods that tolerate it, and a job waits with kube-scheduler's words,
    ``node(s) had untolerated taint {node.kubernetes.io/not-ready: }``, not those of a cordoned node.
    """
    meta = obj["metadata"]
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    allocatable = status.get("allocatable") or status.get("capacity") or {}
    # ``pods`` is the node's pod slots (flotilla.core.resources): every pod on it, anyone's, takes one.
    resources = {name: _quantity(value, name) for name, value in allocatable.items()}
    taints = tuple(Taint(t.get("key", ""), t.get("value", ""), t.get("effect", "NoSchedule"))
                   for t in spec.get("taints") or () if t.get("key") != _CORDON_TAINT)
    if not node_ready(obj) and not any(t.key in NOT_READY_TAINTS for t in taints):
        taints += (Taint("node.kubernetes.io/not-ready", "", "NoSchedule"),)
    return Node(
        name=meta["name"],
        cluster=cluster,
        resources=resources,
        labels=dict(meta.get("labels") or {}),
        taints=taints,
        unschedulable=bool(spec.get("unschedulable")),
    )


__all__ = ["ATTEMPT", "FAKE_NODE", "JOB_ID", "KWOK_COMPLETE_DELAY", "PodSettings", "QUEUE", "failure_details", "is_ours",
           "pod_finished_at",
           "is_terminal",
           "container_outcomes", "failure_reason", "job_from_pod", "label_value", "owned_fields", "POD_NUMBER",
           "waiting_reason", "node_from_object", "node_ready", "pod_manifest", "pod_name",
           "pod_host_ports", "pod_phase", "pod_requests", "disruption"]
