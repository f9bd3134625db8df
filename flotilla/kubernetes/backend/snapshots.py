"""The cluster as a cycle sees it: a :class:`ClusterSnapshot` made from the informers' copy, sending no request.

Written rules. While the node or the pod informer is not in sync with a
reachable API server there is no snapshot (``ClusterUnavailable``): the
scheduler leaves the cluster out of that cycle and goes on with the others.

A pod labelled ``flotilla.io/job-id``, or an in-cluster pod Flotilla bound,
is ours: its job is running on its node (rebuilt from the pod, see
:mod:`flotilla.kubernetes.pods`), and so is a job whose pod is being made
(in flight), so that the next cycle cannot double-book its room. Any other
pod bound to a node we see uses that node's resources and one of its pod
slots (``foreign``, whose ``pods`` counts them) and holds its host ports
there (``foreign_ports``). Ended pods (Succeeded, Failed) hold nothing, as
kube-scheduler (whose pod informer lists none) and the kubelet's admission
see them. A pod of ours being deleted by anyone else, an earlier pod of a
job that has a newer one, and a pod given up (reported ``lost``) hold their
resources until they are gone, as the kubelet counts them: foreign usage.
A pod Flotilla stopped by a decision is in neither (the cluster's docstring,
Stopped pods): that decision gave its room away.

Hot path: the nodes' foreign sums are copied from the pod cache's per-node
index; only our live pods are walked, one by one, with names bound locally.
"""

from __future__ import annotations

from flotilla.core.backend import ClusterUnavailable
from flotilla.core.model import ClusterSnapshot, Job, Node
from flotilla.core.resources import PODS
from flotilla.kubernetes.backend.ledger import Ledger
from flotilla.kubernetes.backend.podcache import ENDED, PodCache


class Snapshots:
    """Snapshots of cluster ``cluster`` (the module docstring's rules), each made under ``lock``.

    Read: ``nodes`` (name -> :class:`Node`, as the node watch keeps them), ``cache`` (the pods), ``book`` (which
    jobs are in flight, stopping, stopped, and which pod is each job's), ``health`` (whether the informers are in
    sync), ``volumes`` (the claims and volumes, :class:`~flotilla.kubernetes.volumes.VolumeState`) and
    ``namespaces`` (their labels).
    """

    def __init__(self, cluster: str, lock, nodes: dict[str, Node], cache: PodCache, book: Ledger, *, health,
                 volumes, namespaces) -> None:
        self.cluster = cluster
        self.lock = lock
        self.nodes = nodes
        self.cache = cache
        self.book = book
        self.health = health
        self.volumes = volumes
        self.namespaces = namespaces

    def take(self) -> ClusterSnapshot:
        """The cluster now; raises ``ClusterUnavailable`` while it cannot be read."""
        with self.lock:
            if not self.health.available:
                raise ClusterUnavailable(f"cluster {self.cluster}: {self.health.error}")
            known = self.nodes
            nodes = list(known.values())
            running: list[Job] = []
            seen: set[str] = set()
            # Everyone else's pods, as their events left them; then ours, one by one (names bound locally: this
            # loop is per pod and per cycle).
            foreign, foreign_ports = self.cache.foreign_use(known)
            book = self.book
            stopping, job_pod_of, reported_of = book.stopping, book.job_pod.get, book.reported.get
            stopped = book.stopped
            append, see = running.append, seen.add
            for pod in self.cache.own.values():
                node = pod.node
                if node is None or node not in known or pod.phase in ENDED:
                    continue
                job = pod.job
                job_id = job.id
                if pod.deleting or job_id in stopping or job_pod_of(job_id) != pod.key \
                        or reported_of(pod.key) == "lost":
                    if pod.key in stopped:
                        continue   # stopped by a decision, which gave its room away (module docstring)
                    # No longer the job's, but on its node until gone: the kubelet still counts it.
                    requests = job.requests
                else:
                    append(job)
                    see(job_id)
                    continue
                used = foreign.setdefault(pod.node, {})
                for resource, amount in requests.items():
                    used[resource] = used.get(resource, 0) + amount
                used[PODS] = used.get(PODS, 0) + 1
                if job.host_ports:
                    foreign_ports[pod.node] = foreign_ports.get(pod.node, ()) + job.host_ports
            for job_id, job in book.inflight.items():
                if job_id not in seen and job_id not in book.stopping and job.node in known:
                    running.append(job)
            foreign_pods = self.cache.foreign_pods(known)
            volumes = self.volumes.view(self.health.side_errors)
        return ClusterSnapshot(self.cluster, nodes, running, foreign, foreign_pods, volumes=volumes,
                               foreign_ports=foreign_ports, namespace_labels=self.namespaces.labels)


__all__ = ["Snapshots"]
