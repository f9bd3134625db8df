"""The Kubernetes cluster backend: one real (or KWOK) cluster behind the ClusterBackend protocol.

:class:`KubernetesCluster` (:mod:`~flotilla.kubernetes.backend.cluster`) is
the one public class: it owns the cluster's lock, its threads and pools, and
composes the parts below, each a module named for what it holds. A part
keeps its own state, called under the cluster's lock where it says so; it
is handed what it needs (a client, a clock, values, the shared pod cache
and ledger, and as callables the steps of other parts it takes) and never
reaches into the cluster's own state, so each can be read, and tested, on
its own.

* :mod:`~flotilla.kubernetes.backend.cluster`: the facade: it makes and
  wires the parts, runs the informer threads and pools, and implements the
  backend protocols by handing each call to a part (its docstring states the
  written rules of the whole);
* :mod:`~flotilla.kubernetes.backend.informers`: the list-watch loop of each
  kind, and whether the cluster can be read (``InformerHealth``);
* :mod:`~flotilla.kubernetes.backend.dispatch`: which kinds are watched, and
  what each listing and watch event changes, in which part; keeps the nodes;
* :mod:`~flotilla.kubernetes.backend.snapshots`: the cluster as a cycle sees
  it (our pods' jobs running, everyone else's pods as foreign usage);
* :mod:`~flotilla.kubernetes.backend.podcache`: the pod informer's copy of
  the pods, indexed per node (what a snapshot and a bind check read); shared
  by the parts;
* :mod:`~flotilla.kubernetes.backend.ledger`: the bookkeeping of the jobs'
  starts and their pods, and the job events to say; shared like the pod
  cache;
* :mod:`~flotilla.kubernetes.backend.lostpods`: the platform's failures:
  pods stuck, nodes lost, held starts whose room never comes;
* :mod:`~flotilla.kubernetes.backend.podevents`: what a pod's change means
  for the cache and, for a pod of ours, for its job (its events, its pod
  kept for its log or deleted);
* :mod:`~flotilla.kubernetes.backend.namespaces`: the namespaces' labels and
  those being deleted;
* :mod:`~flotilla.kubernetes.backend.starts`: the start path: a decision's
  starts made pods now, held for their node, or checked just before their
  bind;
* :mod:`~flotilla.kubernetes.backend.stops`: the stop path: a decision's
  stopped pods left out of the snapshots and deleted;
* :mod:`~flotilla.kubernetes.backend.volumewaits`: the starts whose claims
  are bound first: their volume writes, and their wait for the claims;
* :mod:`~flotilla.kubernetes.backend.writes`: the requests that create, bind
  and delete pods and a job's services and ingresses, each refusal said as
  what the job becomes;
* :mod:`~flotilla.kubernetes.backend.bindguard`: the bind's own check, just
  before each bind, and its verdict;
* :mod:`~flotilla.kubernetes.backend.held`: the starts held for their node
  until the room its leaving pods free is there;
* :mod:`~flotilla.kubernetes.backend.reporting`: Flotilla's word on pods and
  PodGroups, through a pool of its own;
* :mod:`~flotilla.kubernetes.backend.victimlogs`: preempted pods' log tails,
  read before their delete and kept for ``finishedPodRetention``;
* :mod:`~flotilla.kubernetes.backend.priorityclasses`: the config's
  priority classes made sure of in the cluster, and the cluster's own;
* :mod:`~flotilla.kubernetes.backend.config`: a ``kind: kubernetes`` config
  entry as a :class:`KubernetesCluster` and its pod settings.

The rules a part applies that are not about this cluster's state live beside
this package in :mod:`flotilla.kubernetes` (admission, conditions, intake,
podgroupstatus, priorityclasses, services, volumes, pods).
"""

from __future__ import annotations

from flotilla.kubernetes.backend.cluster import KubernetesCluster
from flotilla.kubernetes.backend.config import backend_from_config, pod_settings
from flotilla.kubernetes.backend.podevents import IMAGE_PULL_BACKOFFS, PLATFORM_FAILURES
from flotilla.kubernetes.backend.starts import annotation_duration
from flotilla.kubernetes.backend.writes import NamespaceMissing

__all__ = ["IMAGE_PULL_BACKOFFS", "KubernetesCluster", "NamespaceMissing", "PLATFORM_FAILURES", "annotation_duration",
           "backend_from_config", "pod_settings"]
