"""A pod's effective requests, counted as kube-scheduler and the kubelet count them.

Both refuse or place a pod by one figure per resource (the component
helpers' ``PodRequests``):

* the regular containers add up;
* restartable init containers (sidecars, ``restartPolicy: Always``) start
  before the containers and keep running beside them, so they add up with
  the containers too;
* an ordinary init container runs alone, but beside every sidecar started
  before it: the pod needs at least that init container's request plus
  those sidecars' (the largest such sum over the init containers);
* pod-level ``resources`` (cpu, memory, hugepages), when given, replace the
  containers' figure for that resource;
* ``overhead`` (set with a RuntimeClass) comes on top.

Flotilla counts its own jobs this way (:mod:`flotilla.service.jobspec`)
and every pod it reads back from a cluster (:func:`flotilla.kubernetes.pods.pod_requests`),
so a node it fills is a node the kubelet admits the pod on.
"""

from __future__ import annotations

from typing import Iterable, Mapping

#: Resources a pod-level ``resources`` stanza may set (the others are refused by the API server).
POD_LEVEL_RESOURCES = ("cpu", "memory")


def is_pod_level_resource(name: str) -> bool:
    return name in POD_LEVEL_RESOURCES or name.startswith("hugepages-")


def effective_requests(containers: Iterable[Mapping[str, int]],
                       init_containers: Iterable[tuple[Mapping[str, int], bool]] = (),
                       overhead: Mapping[str, int] | None = None,
                       pod_level: Mapping[str, int] | None = None) -> dict[str, int]:
    """The pod's request per resource (see the module docstring).

    ``init_containers`` are ``(requests, restartable)`` in their order in
    the pod (a sidecar counts only for the init containers after it).
    """
    total: dict[str, int] = {}
    for requests in containers:
        for name, amount in requests.items():
            total[name] = total.get(name, 0) + amount
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for requests, restartable in init_containers:
        if restartable:
            for name, amount in requests.items():
                sidecars[name] = sidecars.get(name, 0) + amount
            during = sidecars
        else:
            during = dict(sidecars)
            for name, amount in requests.items():
                during[name] = during.get(name, 0) + amount
        for name, amount in during.items():
            if amount > init_peak.get(name, 0):
                init_peak[name] = amount
    for name, amount in sidecars.items():
        total[name] = total.get(name, 0) + amount
    for name, amount in init_peak.items():
        if amount > total.get(name, 0):
            total[name] = amount
    for name, amount in (pod_level or {}).items():
        if is_pod_level_resource(name):
            total[name] = amount
    for name, amount in (overhead or {}).items():
        total[name] = total.get(name, 0) + amount
    return total


__all__ = ["POD_LEVEL_RESOURCES", "effective_requests", "is_pod_level_resource"]
