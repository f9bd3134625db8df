"""A service loop in this process over a KWOK cluster: pods made as kubectl makes them, taken in and bound."""

from __future__ import annotations
import time
import pytest
from flotilla.config import parse_config
from flotilla.kubernetes.client import KubeError, pod_path
from flotilla.scheduler import Scheduler
from flotilla.service.loop import ServiceLoop, service_backends
from flotilla.service.settings import from_config
from flotilla.service.store import Store


CONFIG = """
priorityClasses:
  - {name: armada-default, priority: 30000, preemptible: false}
  - {name: armada-preemptible, priority: 20000, preemptible: true}
defaultPriorityClass: armada-default
queues:
  - {name: A, weight: 1, namespaces: [team-a]}
  - {name: B, weight: 1, namespaces: [team-b, team-b2]}
lease: {timeout: 120s, maxRetries: 3}
cycle: {period: 0.2s}
clusters:
  - {name: a, kind: kubernetes, kubeconfig: KUBECONFIG, context: CONTEXT, namespace: flotilla-jobs}
"""


def make_namespace(cluster, name: str, queue: str | None = None) -> None:
    body = {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": {"flotilla.io/queue": queue} if queue else {}}}
    try:
        cluster.client.post("/api/v1/namespaces", body)
    except KubeError as exc:
        if getattr(exc, "status", None) != 409:
            raise
        cluster.client.patch(f"/api/v1/namespaces/{name}", {"metadata": {"labels": {"flotilla.io/queue": queue}}})


def make_pod(cluster, namespace: str, name: str, cpu: str = "1", *, labels=None, annotations=None,
             priority_class: str | None = None, scheduler: str = "flotilla", extra_spec=None) -> dict:
    spec = {"schedulerName": scheduler, "terminationGracePeriodSeconds": 1, "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": cpu}}}]}
    if priority_class:
        spec["priorityClassName"] = priority_class
    spec.update(extra_spec or {})
    return cluster.client.post(pod_path(namespace), {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {}),
                     "annotations": dict(annotations or {})},
        "spec": spec})


class Harness:
    """A store, the loop and the Kubernetes backend of cluster ``a``, run cycle by cycle."""

    def __init__(self, tmp_path, cluster, extra: str = "", store_url: str | None = None):
        text = CONFIG.replace("KUBECONFIG", cluster.kubeconfig).replace("CONTEXT", cluster.context) + extra
        self.cfg = parse_config(text, "incluster.yaml")
        self.settings = from_config(self.cfg)
        self.store = Store(store_url or f"sqlite:///{tmp_path}/incluster.db")
        self.store.sync_queues(self.settings.queues)
        self.backends = service_backends(self.cfg)
        self.backend = self.backends["a"]
        assert self.backend.wait_synced(60)
        self.loop = ServiceLoop(self.store, self.settings, Scheduler(self.cfg), self.backends, seed=0)
        self.cluster = cluster
        # Told again at every change of reason (the 10 s per pod bound is the reporter's, tested with it).
        self.backend.reporter.min_interval = 0.0
        deadline = time.monotonic() + 60
        while not self.backend.intake.ready and time.monotonic() < deadline:
            time.sleep(0.05)

    def cycle(self):
        report = self.loop.run_cycle()
        assert self.backend.wait_idle(60)
        return report

    def seen(self, count: int, timeout: float = 60.0) -> None:
        """Wait (liveness only) until the backend's watch has shown ``count`` waiting in-cluster pods."""
        deadline = time.monotonic() + timeout
        while len(self.backend.waiting_pods()) < count:
            assert time.monotonic() < deadline, f"the watch showed {len(self.backend.waiting_pods())} pods"
            time.sleep(0.05)

    def settle(self, predicate, what: str, timeout: float = 60.0, *, cycles: int = 0, seen=None) -> list[dict]:
        """Wait (liveness only) for the cluster to show what a cycle's writes did: the pods, once ``predicate(pods)``.

        ``cycles`` runs up to that many cycles first, stopping after the first
        whose writes show. On timeout the AssertionError names ``what`` and
        what ``seen(pods)`` says of the pods read last (by default each pod's
        name and phase).
        """
        for _ in range(cycles):
            self.cycle()
            if predicate(self.cluster.pods()):
                break
        seen = seen or (lambda pods: sorted((p["metadata"]["name"], p["status"].get("phase")) for p in pods))
        deadline = time.monotonic() + timeout
        while True:
            pods = self.cluster.pods()
            if predicate(pods):
                return pods
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; saw: {seen(pods)}")
            time.sleep(0.1)

    def close(self):
        for backend in self.backends.values():
            backend.close()
        self.store.close()


@pytest.fixture
def harness(kwok, tmp_path):
    cluster = kwok["a"]
    for name, queue in (("team-a", "A"), ("team-b", "B"), ("team-b2", None), ("team-c", "B")):
        make_namespace(cluster, name, queue)
    h = Harness(tmp_path, cluster)
    yield h
    h.close()


def live(pods, namespace=None):
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")
            and (namespace is None or p["metadata"]["namespace"] == namespace)]


def bound_per_node(pods, namespace):
    out: dict[str, int] = {}
    for p in live(pods, namespace):
        node = p["spec"].get("nodeName")
        if node:
            out[node] = out.get(node, 0) + 1
    return out


def condition(pod, kind):
    return next((c for c in (pod.get("status") or {}).get("conditions") or () if c["type"] == kind), None)


def fill(cluster, free: dict[str, int]) -> None:
    """Someone else's pods leaving ``free`` cores on each node (one pod of 1 core named ``spare-NODE-k`` per core
    that can be freed later)."""
    for node, cores in free.items():
        cluster.create_foreign_pod(f"fill-{node}", node, str(32 - cores - 2))
        cluster.create_foreign_pod(f"spare-{node}-0", node, "1")
        cluster.create_foreign_pod(f"spare-{node}-1", node, "1")


PODGROUP_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "podgroups.scheduling.volcano.sh"},
    "spec": {"group": "scheduling.volcano.sh", "scope": "Namespaced",
             "names": {"kind": "PodGroup", "plural": "podgroups", "singular": "podgroup", "shortNames": ["pg"]},
             "versions": [{"name": "v1beta1", "served": True, "storage": True, "subresources": {"status": {}},
                           "schema": {"openAPIV3Schema": {"type": "object",
                                                          "x-kubernetes-preserve-unknown-fields": True}}}]}}


def ensure_podgroup_crd(cluster) -> None:
    """The PodGroup CRD on the session's cluster (a minimal stand-in for deploy/'s manifest: this test reads
    only spec.minMember)."""
    try:
        cluster.client.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", PODGROUP_CRD)
    except KubeError as exc:
        if getattr(exc, "status", None) != 409:
            raise
    deadline = time.monotonic() + 30
    while True:
        try:
            cluster.client.get("/apis/scheduling.volcano.sh/v1beta1/podgroups")
            return
        except KubeError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


SERVE_CONFIG = """
priorityClasses:
  - {name: armada-default, priority: 30000, preemptible: false}
defaultPriorityClass: armada-default
queues:
  - {name: B, weight: 1, namespaces: [team-b]}
lease: {timeout: 60s, maxRetries: 3}
cycle: {period: 0.2s}
server: {listen: "127.0.0.1:PORT"}
store: {url: "sqlite:///DB"}
auth:
  tokens:
    - {token: admin-token, user: root, groups: [admins]}
    - {token: root-token, user: root, groups: [admins]}
  adminGroups: [admins]
clusters:
"""


def make_job(cluster, namespace: str, name: str, parallelism: int, cpu: str = "1", *, priority_class=None,
             labels=None) -> dict:
    """A ``batch/v1`` Job whose pods name Flotilla; its Job controller (the fixture's controller-manager) makes
    them, and ignores a pod Flotilla preempts (podFailurePolicy on DisruptionTarget), making a new one."""
    spec = {"schedulerName": "flotilla", "terminationGracePeriodSeconds": 1, "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": cpu}}}]}
    if priority_class:
        spec["priorityClassName"] = priority_class
    return cluster.client.post(f"/apis/batch/v1/namespaces/{namespace}/jobs", {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": namespace},
        "spec": {"parallelism": parallelism, "completions": parallelism, "backoffLimit": 0,
                 "podFailurePolicy": {"rules": [{"action": "Ignore",
                                                 "onPodConditions": [{"type": "DisruptionTarget"}]}]},
                 "template": {"metadata": {"labels": dict(labels or {})}, "spec": spec}}})
