"""The cluster's PriorityClass objects, read as Kubernetes means them, and Flotilla's own written beside them.

Kubernetes gives every pod a priority from its ``priorityClassName`` (or
the cluster's ``globalDefault`` class, or 0 with neither), written into the
pod at admission; a pending pod may preempt pods of lower priority unless
its class says ``preemptionPolicy: Never``. Flotilla keeps the cluster's
classes from a watch (:class:`PriorityClassTracker`) and makes each a
Flotilla priority class (:func:`cluster_classes`) that its config does not
define by that name:

* priority: the class's value plus the config's
  ``clusterPriorityClasses.priorityOffset`` (0: Kubernetes values and
  Flotilla priorities compare as they are);
* preemptible: yes (in Kubernetes any pod may be preempted by one of higher
  priority), except the system classes (values above 1,000,000,000:
  ``system-cluster-critical``, ``system-node-critical``), never preempted;
* preempts: unless ``preemptionPolicy: Never``;
* preemption to fair share (the evict action) takes its pods only when
  ``clusterPriorityClasses.fairSharePreemption`` is on (off by default: in
  Kubernetes only a pod of higher priority displaces another).

``system-cluster-critical`` (2,000,000,000) and ``system-node-critical``
(2,000,001,000) are known on every Kubernetes cluster, as the API server
makes them, watched or not. A pod that names no class and was given none is
of the class :data:`NO_CLASS` (priority 0 plus the offset), as Kubernetes
gives it priority 0; its name is not a Kubernetes object name, so no
cluster class can take it.

Flotilla makes its config's classes in the cluster (so that the pods it
creates can name them) only where the cluster has no class of that name,
labelled :data:`MANAGED_BY`; it never updates nor deletes a class it did not
make. A cluster class named like one of Flotilla's keeps its value: the
cluster's pods naming it are scheduled at Flotilla's class of that name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import structlog

from flotilla.core.model import PriorityClass
from flotilla.kubernetes.client import ApiError, KubeError, Unreachable

log = structlog.get_logger("flotilla.kubernetes.priorityclasses")

PRIORITY_CLASSES_PATH = "/apis/scheduling.k8s.io/v1/priorityclasses"
#: The label on the classes Flotilla made (the only ones it would ever change).
MANAGED_BY = ("app.kubernetes.io/managed-by", "flotilla")
#: Kubernetes' highest value a user's class may have; above it are the system classes, never preempted here.
HIGHEST_USER_PRIORITY = 1_000_000_000
#: The classes every Kubernetes cluster has (the API server makes them): name -> value.
SYSTEM_CLASSES = {"system-cluster-critical": 2_000_000_000, "system-node-critical": 2_000_001_000}
#: The class of a cluster pod that names none and was given none: priority 0, as Kubernetes gives it.
NO_CLASS = "(none)"


@dataclass(frozen=True, slots=True)
class ClusterPriorityClass:
    name: str
    value: int
    global_default: bool = False
    preempts: bool = True        # preemptionPolicy is not Never
    managed: bool = False        # made by Flotilla (labelled MANAGED_BY)


def read_priority_class(obj: Mapping[str, Any]) -> ClusterPriorityClass | None:
    """The class an object describes, None if it has no name or no whole-number value."""
    meta = obj.get("metadata") or {}
    name, value = meta.get("name"), obj.get("value")
    if not name or isinstance(value, bool) or not isinstance(value, int):
        return None
    labels = meta.get("labels") or {}
    return ClusterPriorityClass(name, value, bool(obj.get("globalDefault")),
                                obj.get("preemptionPolicy") != "Never", labels.get(MANAGED_BY[0]) == MANAGED_BY[1])


class PriorityClassTracker:
    """One cluster's PriorityClass objects, kept from list and watch events (called under the backend's lock)."""

    def __init__(self):
        self.classes: dict[str, ClusterPriorityClass] = {}
        self.synced = False
        self.version = 0          # bumped at every change: the loop rebuilds its merged list only then

    def replace(self, items: Iterable[Mapping[str, Any]]) -> None:
        classes = {pc.name: pc for pc in map(read_priority_class, items) if pc is not None}
        if classes != self.classes:
            self.classes = classes
            self.version += 1
        self.synced = True

    def on_event(self, kind: str, obj: Mapping[str, Any]) -> None:
        pc = read_priority_class(obj)
        if pc is None:
            return
        if kind == "DELETED":
            if self.classes.pop(pc.name, None) is not None:
                self.version += 1
        elif self.classes.get(pc.name) != pc:
            self.classes[pc.name] = pc
            self.version += 1


def cluster_classes(own: Iterable[PriorityClass], clusters: Iterable[Iterable[ClusterPriorityClass]],
                    offset: int = 0, fair_share: bool = False) -> list[PriorityClass]:
    """Flotilla's classes ``own``, then the system classes, :data:`NO_CLASS` and every cluster class ``own``
    does not name (see the module docstring). A name two clusters give different values keeps the first
    cluster's (their order: the backends' names)."""
    out = list(own)
    seen = {pc.name for pc in out}
    given = [ClusterPriorityClass(name, value) for name, value in SYSTEM_CLASSES.items()]
    given.append(ClusterPriorityClass(NO_CLASS, 0))
    for classes in clusters:
        given.extend(sorted(classes, key=lambda pc: pc.name))
    for pc in given:
        if pc.name in seen:
            continue
        seen.add(pc.name)
        out.append(PriorityClass(pc.name, pc.value + offset, pc.value <= HIGHEST_USER_PRIORITY, pc.preempts,
                                 fair_share))
    return out


def setup_priority_classes(client, wanted: Iterable[tuple[str, int, bool]], cluster: str) -> set[str] | None:
    """Make Flotilla's classes ``wanted`` that the cluster lacks (labelled :data:`MANAGED_BY`); the names the
    cluster then has (None: it could not be read). A class of the cluster's own is left as it is, and a value
    of its that differs from Flotilla's is said once."""
    try:
        existing = {item["metadata"]["name"]: item for item in client.get(PRIORITY_CLASSES_PATH).get("items", [])}
    except Unreachable:
        return None
    except KubeError as exc:
        log.warning("kubernetes.priority_classes_unreadable", cluster=cluster, error=str(exc))
        return set()
    names = set(existing)
    for name, priority, preemptible in wanted:
        if name in existing:
            theirs = read_priority_class(existing[name])
            if theirs is not None and not theirs.managed and theirs.value != int(priority):
                log.warning("kubernetes.priority_class_differs", cluster=cluster, name=name, cluster_value=theirs.value,
                            flotilla_priority=int(priority),
                            reason="the cluster's class is left as it is; Flotilla schedules pods naming it at its "
                                   "own class of that name")
            continue
        body = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                "metadata": {"name": name, "labels": {MANAGED_BY[0]: MANAGED_BY[1]}},
                "value": int(priority), "globalDefault": False, "preemptionPolicy": "PreemptLowerPriority",
                "description": f"Flotilla priority class ({'preemptible' if preemptible else 'not preemptible'})"}
        try:
            client.post(PRIORITY_CLASSES_PATH, body)
            names.add(name)
        except ApiError as exc:
            if exc.status == 409:
                names.add(name)
            else:
                log.warning("kubernetes.priority_class_not_created", cluster=cluster, name=name, error=str(exc))
        except KubeError:
            return None
    return names


__all__ = ["ClusterPriorityClass", "HIGHEST_USER_PRIORITY", "MANAGED_BY", "NO_CLASS", "PRIORITY_CLASSES_PATH",
           "PriorityClassTracker", "SYSTEM_CLASSES", "cluster_classes", "read_priority_class",
           "setup_priority_classes"]
