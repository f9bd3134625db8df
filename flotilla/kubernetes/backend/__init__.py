"""The Kubernetes cluster backend: one real (or KWOK) cluster behind the ClusterBackend protocol.

:class:`KubernetesCluster` (:mod:`~flotilla.kubernetes.backend.cluster`) is
the one public class: it owns the cluster's lock, its threads and pools, and
composes the parts below, each a module named for what it holds. A part
keeps its own state, called under the cluster's lock where it says so; it
is handed what it needs (a client, a clock, values) and never calls back
into the cluster, so each can be read, and tested, on its own.

* :mod:`~flotilla.kubernetes.backend.cluster`: the facade: snapshots,
  decisions applied, pod writes and their bind check, held starts, job
  events (its docstring states the written rules of all of them);
* :mod:`~flotilla.kubernetes.backend.podcache`: the pod informer's copy of
  the pods, indexed per node (what a snapshot and a bind check read);
* :mod:`~flotilla.kubernetes.backend.victimlogs`: preempted pods' log tails,
  read before their delete and kept for ``finishedPodRetention``;
* :mod:`~flotilla.kubernetes.backend.config`: a ``kind: kubernetes`` config
  entry as a :class:`KubernetesCluster` and its pod settings.

The rules a part applies that are not about this cluster's state live beside
this package in :mod:`flotilla.kubernetes` (admission, conditions, intake,
podgroupstatus, priorityclasses, services, volumes, pods).
"""

from __future__ import annotations

from flotilla.kubernetes.backend.cluster import (IMAGE_PULL_BACKOFFS, PLATFORM_FAILURES, KubernetesCluster,
                                                 annotation_duration)
from flotilla.kubernetes.backend.config import backend_from_config, pod_settings
from flotilla.kubernetes.backend.writes import NamespaceMissing

__all__ = ["IMAGE_PULL_BACKOFFS", "KubernetesCluster", "NamespaceMissing", "PLATFORM_FAILURES", "annotation_duration",
           "backend_from_config", "pod_settings"]
