"""A kubelet of 20 pod slots (``maxPods: 20``) and 30 jobs through a real ``flotilla serve``: Flotilla binds no
more pods than the node has slots, so the kubelet refuses none (no ``OutOfpods``); 20 run, the other 10 wait with
kube-scheduler's ``Too many pods`` and run once slots free up, and no job fails. A 21st pod bound to the node by
name meanwhile (no scheduler) shows the limit is the kubelet's: it is refused with ``OutOfpods``.

The node is ``real-1`` (tests/support/realnode.py), its kubelet restarted with ``maxPods: 20`` for the test
(``scripts/real-node kubelet-restart --max-pods 20``) and with its usual config after it. The jobs wait on a
file in a hostPath directory, so that all 20 are seen running together however loaded the machine is.
"""

from __future__ import annotations

import threading
import time

import pytest
from tests.support.serve import wait_for
from tests.support.realnode_jobs import busybox, events, kinds, serve, submit
from tests.support.realnode_jobs import bare_pod

from flotilla.kubernetes.client import KubeClient, KubeError, pod_path

pytestmark = pytest.mark.realnode

SLOTS = 20
TOO_MANY_PODS = "0/1 nodes are available: 1 Too many pods"


class NodePods:
    """A watch of the pods bound to the node, counted as the kubelet admits them: a pod takes a slot from its
    bind until it is Succeeded or Failed (or gone). Records the most held at once (all pods, and the test
    namespace's) and every pod's end: phase and the kubelet's reason (``OutOfpods`` when it refused one)."""

    def __init__(self, real_node, leave_out: str):
        self.namespace = real_node.namespace
        self.leave_out = leave_out   # a namespace whose pods are not counted
        self.client = KubeClient.from_kubeconfig(real_node.kubeconfig, real_node.context)
        self.selector = {"fieldSelector": f"spec.nodeName={real_node.node}"}
        self.live: dict[tuple[str, str], bool] = {}
        self.ended: dict[tuple[str, str], tuple[str, str]] = {}
        self.most = self.most_ours = 0
        self.stop = threading.Event()
        listing = self.client.get("/api/v1/pods", **self.selector)
        for pod in listing["items"]:
            self._on("ADDED", pod)
        self.thread = threading.Thread(target=self._run, args=(listing["metadata"]["resourceVersion"],),
                                       daemon=True)
        self.thread.start()

    def _run(self, version: str) -> None:
        while not self.stop.is_set():
            try:
                for event in self.client.watch("/api/v1/pods", version, 30, self.stop, **self.selector):
                    obj = event["object"]
                    version = obj["metadata"].get("resourceVersion", version)
                    if event["type"] != "BOOKMARK":
                        self._on(event["type"], obj)
            except KubeError:
                if not self.stop.is_set():
                    time.sleep(0.05)

    def _on(self, kind: str, pod: dict) -> None:
        meta, status = pod["metadata"], pod.get("status") or {}
        key = (meta["namespace"], meta["name"])
        if key[0] == self.leave_out:
            return
        phase = status.get("phase")
        if phase in ("Succeeded", "Failed"):
            self.ended[key] = (phase, status.get("reason") or "")
        if kind == "DELETED" or phase in ("Succeeded", "Failed"):
            self.live.pop(key, None)
            return
        self.live[key] = True
        self.most = max(self.most, len(self.live))
        self.most_ours = max(self.most_ours, sum(ns == self.namespace for ns, _ in self.live))

    def close(self) -> None:
        self.stop.set()
        self.client.end_watches(self.stop)
        self.thread.join(10)
        self.client.close()


def kubelets_word_on_a_pod_bound_by_name(real_node, namespace: str) -> tuple[str, str]:
    """Bind a pod to the node by name (no scheduler involved): the phase and reason the kubelet gives it."""
    real_node.client.post(pod_path(namespace), bare_pod("over-the-limit", "true", real_node.image))

    def decided():
        pod = real_node.client.get(pod_path(namespace, "over-the-limit"))
        return pod if pod["status"].get("phase") not in (None, "Pending") else None

    pod = real_node.wait(decided, what="the kubelet's word on a pod bound by name")
    return pod["status"]["phase"], pod["status"].get("reason") or ""


def test_thirty_jobs_on_twenty_pod_slots_run_twenty_then_ten_and_none_fails(real_node, tmp_path):
    gate = tmp_path / "gate"
    gate.mkdir()
    job = busybox(real_node, "while [ ! -e /gate/go ]; do sleep 0.2; done", container={
        "resources": {"limits": {"cpu": "10m", "memory": "16Mi"}},   # 30 fit the node's cpu and memory at once
        "volumeMounts": [{"name": "gate", "mountPath": "/gate", "readOnly": True}]},
        volumes=[{"name": "gate", "hostPath": {"path": str(gate), "type": "Directory"}}])
    with real_node.max_pods(SLOTS):
        node = real_node.client.get(f"/api/v1/nodes/{real_node.node}")
        assert node["status"]["allocatable"]["pods"] == str(SLOTS)
        probes = f"{real_node.namespace}-probe"
        real_node.create_namespace(probes)
        watch = NodePods(real_node, leave_out=probes)
        srv = serve(real_node, tmp_path, stuckPodExpiry="5m")   # 20 sandboxes at once take a while on 2 cores
        api = srv.http("alice")
        try:
            ids = submit(srv, tmp_path, [job] * 30)

            def states() -> dict[str, str]:
                return {j["id"]: j["state"] for j in api.get("/v1/queues/A/jobsets/s/jobs").json()["jobs"]}

            seen: list = []

            def twenty_run_ten_wait() -> bool:
                now = states()
                seen[:] = [sorted(now.values()), {}]
                running = {i for i in ids if now[i] == "running"}
                queued = {i for i in ids if now[i] == "queued"}
                seen[1] = {i: api.get(f"/v1/jobs/{i}").json()["reason"] for i in queued}
                return (len(running), set(seen[1].values())) == (SLOTS, {TOO_MANY_PODS})

            try:
                real_node.wait(twenty_run_ten_wait, timeout=180, step=0.5, what="20 running, 10 waiting")
            except AssertionError as exc:
                raise AssertionError(f"{exc}; last seen: {seen}") from None
            assert (seen[0], len(seen[1])) == (["queued"] * 10 + ["running"] * SLOTS, 30 - SLOTS), seen
            # The limit is the kubelet's: a 21st pod bound to the node by name is refused.
            assert kubelets_word_on_a_pod_bound_by_name(real_node, probes) == ("Failed", "OutOfpods")
            (gate / "go").touch()   # every job ends now: the 10 waiting ones as soon as they start
            wait_for(lambda: set(states().values()) == {"succeeded"}, timeout=180, step=0.5)
            records = {i: api.get(f"/v1/jobs/{i}").json() for i in ids}
            assert {(r["state"], r["retries"], r["node"]) for r in records.values()} == {
                ("succeeded", 0, real_node.node)}
            evs = events(srv)
            assert {i: [k for k, _ in kinds(evs, i)] for i in ids} == {
                i: ["submitted", "queued", "leased", "pending", "running", "succeeded"] for i in ids}
            wait_for(lambda: sum(key[0] == real_node.namespace for key in watch.ended) == 30, timeout=60)
        finally:
            srv.kill()
            api.close()
            watch.close()
            real_node.delete_pods(probes)
    ours = {key: end for key, end in watch.ended.items() if key[0] == real_node.namespace}
    assert (watch.most, watch.most_ours) == (SLOTS, SLOTS)
    assert (len(ours), set(ours.values())) == (30, {("Succeeded", "")})
