"""In-cluster pods on a KWOK cluster: pods that name Flotilla as their scheduler, taken in, queued, bound.

The scheduling loop runs in this process against the session's fake
cluster ``a`` (two 32-core nodes); pods are made through its API server as
kubectl would make them, and everything asserted is read back from the API
server (bindings, conditions, Events) or from the store.
"""

from __future__ import annotations

import threading
import time

import pytest

from flotilla.config import parse_config
from flotilla.kubernetes.client import KubeError, pod_path
from flotilla.scheduler import Scheduler
from flotilla.service.loop import ServiceLoop, service_backends
from flotilla.service.settings import from_config
from flotilla.service.store import Store

pytestmark = pytest.mark.kwok

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
        deadline = time.monotonic() + 60
        while not self.backend.intake.ready and time.monotonic() < deadline:
            time.sleep(0.05)

    def cycle(self):
        report = self.loop.run_cycle()
        assert self.backend.wait_idle(60)
        return report

    def settle(self, predicate, what: str, timeout: float = 60.0):
        """Wait (liveness only) for the cluster to show what a cycle's writes did."""
        return self.cluster.wait_pods(predicate, timeout=timeout, what=what)

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


class PodRecorder:
    """Every condition of type ``kind`` any pod showed, by pod name, from a watch (the pods may be gone since)."""

    def __init__(self, cluster, kind: str):
        self.cluster = cluster
        self.kind = kind
        self.seen: dict[str, dict] = {}
        self._stop = threading.Event()
        rv = cluster.client.get("/api/v1/pods")["metadata"]["resourceVersion"]
        self._thread = threading.Thread(target=self._run, args=(rv,), daemon=True)
        self._thread.start()

    def _run(self, rv):
        while not self._stop.is_set():
            try:
                for event in self.cluster.client.watch("/api/v1/pods", rv, 30, self._stop):
                    obj = event.get("object") or {}
                    rv = obj.get("metadata", {}).get("resourceVersion", rv)
                    if event["type"] == "BOOKMARK":
                        continue
                    found = condition(obj, self.kind)
                    if found is not None:
                        self.seen.setdefault(obj["metadata"]["name"], found)
            except KubeError:
                time.sleep(0.1)

    def stop(self):
        self._stop.set()


def test_the_seed_two_queue_example_through_pods(harness):
    """Armada's example: A's 40 preemptible pods run 32 + 8; B's 50 arrive: A keeps 32, its 8 on the second node
    are told DisruptionTarget and deleted, B runs 32 there, 18 of B wait told why."""
    c = harness.cluster
    for i in range(40):
        make_pod(c, "team-a", f"a-{i}", labels={"flotilla.io/job-set": "job-a"}, priority_class="armada-preemptible")
    for _ in range(3):
        harness.cycle()
        pods = c.pods()
        if sum(bound_per_node(pods, "team-a").values()) == 40:
            break
    assert sorted(bound_per_node(c.pods(), "team-a").values()) == [8, 32]
    full = next(node for node, n in bound_per_node(c.pods(), "team-a").items() if n == 32)
    other = "node-2" if full == "node-1" else "node-1"
    # The store knows them as jobs of source cluster, one per pod, keyed by the pod's uid.
    jobs = harness.store.list_jobs(queue="A")
    assert len(jobs) == 40 and {j["source"] for j in jobs} == {"cluster"}
    assert {j["jobSet"] for j in jobs} == {"job-a"}
    assert sorted(j["pod"]["name"] for j in jobs) == sorted(f"a-{i}" for i in range(40))

    recorder = PodRecorder(c, "DisruptionTarget")
    try:
        for i in range(50):
            make_pod(c, "team-b", f"b-{i}", priority_class="armada-preemptible")
        victims = sorted(p["metadata"]["name"] for p in live(c.pods(), "team-a") if p["spec"]["nodeName"] == other)
        assert len(victims) == 8
        for _ in range(3):   # within three cycles
            harness.cycle()
            pods = c.pods()
            if bound_per_node(pods, "team-b") == {other: 32} and not any(
                    p["metadata"]["name"] in victims for p in pods):
                break
        pods = harness.settle(lambda pods: bound_per_node(pods, "team-b") == {other: 32}
                              and not any(p["metadata"]["name"] in victims for p in pods), "B bound, victims gone")
        assert bound_per_node(pods, "team-a") == {full: 32}
        assert bound_per_node(pods, "team-b") == {other: 32}
        assert sorted(name for name in recorder.seen if name.startswith("a-")) == victims
        assert {(v["status"], v["reason"]) for v in recorder.seen.values()} == {("True", "PreemptionByScheduler")}
        # The 18 of B left wait, told why by Flotilla.
        pods = harness.settle(lambda pods: sum(
            1 for p in live(pods, "team-b") if not p["spec"].get("nodeName")
            and (condition(p, "PodScheduled") or {}).get("message", "").startswith("flotilla: ")) == 18,
            "18 pods told why")
        waiting = [p for p in live(pods, "team-b") if not p["spec"].get("nodeName")]
        assert len(waiting) == 18
        assert {condition(p, "PodScheduled")["message"] for p in waiting} == {"flotilla: 0/2 nodes fit: 2 insufficient cpu"}
        assert {(condition(p, "PodScheduled")["status"], condition(p, "PodScheduled")["reason"]) for p in waiting} \
            == {("False", "Unschedulable")}
    finally:
        recorder.stop()
    states = {}
    for j in harness.store.list_jobs():
        states.setdefault((j["queue"], j["state"]), 0)
        states[(j["queue"], j["state"])] += 1
    assert states[("A", "preempted")] == 8 and states[("B", "queued")] == 18
