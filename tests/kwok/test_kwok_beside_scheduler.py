"""Flotilla beside kube-scheduler on one KWOK cluster: no node is ever overcommitted.

Each round creates 30 one-core pods for kube-scheduler (``schedulerName: default-scheduler``) while Flotilla
schedules 30 one-core jobs, on 2 nodes of 20 cores. A watch of every pod (started before the round) adds up,
after each event, the requests of the live pods bound to each node, as the kubelet counts them: the most any
node ever held must stay within its 20 cores, and 40 pods are bound in all. A bind that no longer fits when
Flotilla makes it is returned to its queue (flotilla.kubernetes.admission), and taken again by a later cycle
only where there is room. kube-scheduler binds from its own cache, which may not show Flotilla's binds yet,
and Flotilla's watch may lag its pods: while kube-scheduler is active each bind reads the API server afresh,
and binds wait while its burst is still arriving; binds to one node go one at a time, each reading after the
previous one's pod is in the API server. Round 0 is Flotilla's start-up beside it (no pod of kube-scheduler's seen
yet): the first bind of each cycle reads once whether its pods wait, and that cycle's binds go in parallel. A
kube-scheduler pod created after the last read of a node and placed before kube-scheduler's cache shows Flotilla's
bind there would still overcommit; Flotilla cannot see it in time (docs/kubernetes.md gives the measured runs).

A round that goes over prints its timeline by resource version (the API server's order, which the test's
watch, lagging under load, cannot give by its clock): each pod's creation and bind, and each of the backend's
consistent reads with the pods it listed. ``BESIDE_TIMELINE=1`` prints every round's; ``BESIDE_FRESH=1`` gives
each round a new backend, so that every round is a start-up beside kube-scheduler.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from flotilla.core.model import Job
from flotilla.kubernetes.client import KubeClient, KubeError, pod_path
from flotilla.kubernetes.runner import Runner

pytestmark = pytest.mark.kwok

NODES = ("shared-1", "shared-2")
CONFIG = """
plugins: [{{name: assetfairness}}, {{name: bestfit}}, {{name: priorityclass}}, {{name: predicates}}]
priorityClasses: [{{name: armada-default, priority: 30000, preemptible: false}}]
defaultPriorityClass: armada-default
queues: [{{name: A, weight: 1}}]
lease: {{timeout: 60s}}
clusters:
  - {{name: kwok-a, kind: kubernetes, kubeconfig: {kubeconfig}, context: {context}}}
"""


def start_kube_scheduler(kubeconfig: str, workdir: Path) -> subprocess.Popen:
    from flotilla.kwok.cluster import find_bin_dir

    config = workdir / "scheduler.yaml"
    config.write_text(f"apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
                      f"clientConnection: {{kubeconfig: {kubeconfig}, qps: 5000, burst: 10000}}\n"
                      f"leaderElection: {{leaderElect: false}}\n")
    log = open(workdir / "kube-scheduler.log", "wb")
    return subprocess.Popen([str(find_bin_dir() / "kube-scheduler"), "--config", str(config), "--secure-port", "0",
                             "--authentication-skip-lookup=true", "-v", "1"],
                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


class BindWatch:
    """Every pod event from a resource version on: the live pods' requests per node, and the most each held."""

    def __init__(self, client: KubeClient):
        self.client = client
        self.stop = threading.Event()
        self.bound: dict[tuple[str, str], tuple[str, int]] = {}
        self.most: dict[str, int] = {}
        self.order: list = []
        self.over: list[str] = []
        #: (resource version, seconds, event, pod, node) as the watch saw them (created, bound), with the
        #: backend's consistent reads of pods (their list's resource version, the pods listed).
        self.timeline: list[tuple[int, float, str, str, str]] = []
        self.t0 = time.monotonic()
        version = client.get("/api/v1/pods")["metadata"]["resourceVersion"]
        self.thread = threading.Thread(target=self._run, args=(version,), daemon=True)
        self.thread.start()

    def _run(self, version: str) -> None:
        while not self.stop.is_set():
            try:
                for event in self.client.watch("/api/v1/pods", version, 30, self.stop):
                    obj = event["object"]
                    version = obj["metadata"].get("resourceVersion", version)
                    if event["type"] != "BOOKMARK":
                        self._on(event["type"], obj)
            except KubeError:
                if not self.stop.is_set():
                    time.sleep(0.05)

    def _on(self, kind: str, pod: dict) -> None:
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
        node = pod["spec"].get("nodeName")
        rv = int(pod["metadata"]["resourceVersion"])
        if kind == "ADDED":
            self.timeline.append((rv, time.monotonic() - self.t0, "created", key[1], node or ""))
        if kind == "DELETED" or not node or pod["status"].get("phase") in ("Succeeded", "Failed"):
            self.bound.pop(key, None)
            return
        cpu = sum(int(str(c["resources"]["requests"]["cpu"]).rstrip("m")) * (1 if str(
            c["resources"]["requests"]["cpu"]).endswith("m") else 1000) for c in pod["spec"]["containers"])
        if key not in self.bound:
            self.order.append((time.monotonic(), key[1], node))
            self.timeline.append((rv, time.monotonic() - self.t0, "bound", key[1], node))
        self.bound[key] = (node, cpu)
        used = sum(amount for where, amount in self.bound.values() if where == node)
        self.most[node] = max(self.most.get(node, 0), used)
        if used > 20000 and self.order and self.order[-1][1] == key[1]:
            self.over.append(key[1])   # the bind that took the node past its allocatable

    def close(self) -> None:
        self.stop.set()
        self.client.end_watches(self.stop)
        self.thread.join(10)


def kube_pod(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"schedulerName": "default-scheduler", "terminationGracePeriodSeconds": 0,
                     "nodeSelector": {"flotilla.io/test": "shared"},
                     "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                     "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}}]}}


@pytest.mark.xfail(bool(os.environ.get("BESIDE_FRESH")), strict=False, reason=(
    "the start-up race, measured with a new backend each round (BESIDE_FRESH=1) on a 2-core machine shared with "
    "other work, two runs at a time: 16 of 18 runs passed, 3 of their 90 start-up rounds over (48 bound, nodes at 26 "
    "and 22 of 20 cores, at load 11; 43 and 42 bound at load 32 to 37): the start-up cycle's binds, made in parallel "
    "on one read that found no kube-scheduler pod waiting, landed while kube-scheduler's burst, created right after "
    "that read, was placed; see docs/kubernetes.md. The default mode (the issue's five rounds on one backend) is "
    "strict: 19 of 19 runs passed at load 7 to 34"))
def test_thirty_and_thirty_pods_beside_kube_scheduler_never_overcommit_a_node(kwok, tmp_path):
    from flotilla.config import load_config
    from flotilla.kwok.cluster import create_nodes, wait_nodes_ready
    from flotilla.plugin_manager import make_backends
    from flotilla.scheduler import Scheduler

    cluster = kwok["a"]
    cluster.reset(nodes=0)
    template = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": "shared-{index}", "labels": {"flotilla.io/test": "shared"},
                             "annotations": {"kwok.x-k8s.io/node": "fake"}},
                "status": {"allocatable": {"cpu": "20", "memory": "64Gi", "pods": "110"},
                           "capacity": {"cpu": "20", "memory": "64Gi", "pods": "110"}}}
    wait_nodes_ready(cluster.client, create_nodes(cluster.client, template, 2), 60)
    path = tmp_path / "flotilla.yaml"
    path.write_text(CONFIG.format(kubeconfig=cluster.kubeconfig, context=cluster.context))
    config = load_config(path)
    scheduler = Scheduler(config)
    backends = make_backends(config, scheduler.pm)
    from flotilla.kwok.cluster import workdir
    kube = start_kube_scheduler(str(workdir(cluster.name) / "kubeconfig.yaml"), tmp_path)   # this cluster's own
    watch = BindWatch(cluster.client)
    try:
        def prepare(backend):
            """Wait for ``backend``'s watch; record its consistent reads of pods on the timeline."""
            assert backend.wait_synced(30)
            get = backend.client.get

            def traced_get(path, **kw):
                t = time.monotonic() - watch.t0
                out = get(path, **kw)
                if path == "/api/v1/pods" and kw.get("fieldSelector"):
                    items = out.get("items") or []
                    watch.timeline.append((int(out["metadata"]["resourceVersion"]), t, "read", kw["fieldSelector"],
                                           " ".join(p["metadata"]["name"] for p in items)))
                return out
            backend.client.get = traced_get
            return backend
        outcomes = []
        backend = prepare(backends["kwok-a"])
        for round_ in range(5):
            if round_ and os.environ.get("BESIDE_FRESH"):
                backend.close()
                scheduler = Scheduler(config)
                backends = make_backends(config, scheduler.pm)
                backend = prepare(backends["kwok-a"])
            runner = Runner(scheduler, backends)   # a fresh queue each round
            jobs = [Job(f"r{round_}-f{i}", "A", job_set="s", priority_class="armada-default", submitted=float(i),
                        requests={"cpu": 1000}) for i in range(30)]
            with ThreadPoolExecutor(8) as pool:
                made = pool.map(lambda i: cluster.client.post(pod_path("default"), kube_pod(f"r{round_}-k{i}")),
                                range(30))
                runner.submit(jobs)
                for _ in range(6):   # cycles while kube-scheduler binds beside them
                    runner.cycle()
                    time.sleep(0.1)
                list(made)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                runner.cycle()
                assert backend.wait_idle(30)
                if sum(1 for p in cluster.pods() if p["spec"].get("nodeName")) >= 40:
                    break
                time.sleep(0.2)
            time.sleep(1.0)   # anything still on its way is seen by the watch
            runner.cycle()
            assert backend.wait_idle(30)
            pods = cluster.pods()
            bound = sorted(p["metadata"]["name"] for p in pods if p["spec"].get("nodeName"))
            outcomes.append((len(bound), dict(watch.most), list(watch.over)))
            print(f"round {round_}: {len(bound)} bound; most {watch.most}; past allocatable by {watch.over}")
            if watch.over or len(bound) != 40 or os.environ.get("BESIDE_TIMELINE"):
                for entry in sorted(watch.timeline):
                    print("  %d %.3f %s %s %s" % entry)
            cluster.delete_all_pods()
            cluster.wait_pods(lambda pods: not pods, 60, "pods deleted")
            backend.wait_idle(30)
            time.sleep(0.5)
            watch.most.clear()
            watch.order.clear()
            watch.over.clear()
            watch.timeline.clear()
            watch.t0 = time.monotonic()
        assert outcomes == [(40, {"shared-1": 20000, "shared-2": 20000}, [])] * 5
    finally:
        watch.close()
        kube.terminate()
        try:
            kube.wait(10)
        except subprocess.TimeoutExpired:
            kube.kill()
        for backend in backends.values():
            backend.close()
        for node in NODES:
            try:
                cluster.client.delete(f"/api/v1/nodes/{node}")
            except KubeError:
                pass
