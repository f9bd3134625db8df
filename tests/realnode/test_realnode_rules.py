"""Placement rules a real kubelet enforces, through a real ``flotilla serve`` on ``real-1``: a preemptor waits
for its victim to be gone (no ``OutOfcpu``), required node affinity, one host port per node.

Each test starts its own ``flotilla serve`` with one Kubernetes cluster entry for the node's cluster, in the
test's own namespace (tests/support/realnode.py); jobs run the local busybox image.
"""

from __future__ import annotations

import json
import time

import pytest
from tests.support.serve import Server, cli, wait_for
from tests.support.realnode_jobs import busybox, events, kinds, status, submit

from flotilla.core.quantities import format_quantity, parse_quantity
from flotilla.service.roles.status import StatusReader

pytestmark = pytest.mark.realnode

CONFIG = """
priorityClasses:
  - {name: armada-default, priority: 30000, preemptible: false}
  - {name: armada-preemptible, priority: 20000, preemptible: true}
defaultPriorityClass: armada-default
queues:
  - {name: A, weight: 1, owners: [alice]}
  - {name: B, weight: 1, owners: [alice]}
evict: {probability: 0}
lease: {timeout: 60s, maxRetries: 1}
gracePeriod: {default: 1s, max: 60s}
cycle: {period: 0.2s}
server: {listen: "127.0.0.1:PORT"}
store: {url: "sqlite:///DB"}
auth:
  tokens:
    - {token: alice-token, user: alice}
clusters:
"""


def serve(real_node, tmp_path) -> Server:
    """``flotilla serve`` on the real node only (its label), in the test's namespace."""
    entry = {"name": "real", "kind": "kubernetes", "kubeconfig": real_node.kubeconfig, "context": real_node.context,
             "namespace": real_node.namespace, "nodeSelector": "kubernetes.io/hostname=real-1"}
    # Three minutes to come up, as in test_realnode: serve's imports alone can take over 30 s on a loaded machine.
    return Server(tmp_path, CONFIG + f"  - {json.dumps(entry)}\n").start(timeout=180)


def node_cpu(real_node, leave: int = 500) -> str:
    """real-1's allocatable cpu less ``leave`` millicores, as a quantity: a job asking it fills the node for any
    job asking more than ``leave`` (other pods of 100m still fit beside it)."""
    node = real_node.client.get("/api/v1/nodes/real-1")
    return format_quantity(parse_quantity(node["status"]["allocatable"]["cpu"], "cpu") - leave, "cpu")


def job_pods(real_node) -> dict[str, dict]:
    """The namespace's pods by job id (terminating ones included)."""
    return {p["metadata"]["annotations"]["flotilla.io/job-id"]: p for p in real_node.pods()
            if "flotilla.io/job-id" in (p["metadata"].get("annotations") or {})}


def waiting_reason(srv: Server, job_id: str) -> str | None:
    """Why the scheduler's last published cycle left ``job_id`` queued (what the UI shows)."""
    store = srv.store()
    try:
        return StatusReader(store, ttl=0).get().get("jobReasons", {}).get(job_id)
    finally:
        store.close()


def out_of_resources(real_node) -> list[str]:
    return [p["metadata"]["name"] for p in real_node.pods() if (p["status"].get("reason") or "").startswith("OutOf")]


TRAP = "trap 'echo term; sleep 30' TERM; echo started; while true; do sleep 1; done"


def test_a_preemptor_starts_on_a_full_real_node_once_its_victim_is_gone(real_node, tmp_path):
    srv = serve(real_node, tmp_path)
    cpu = node_cpu(real_node)
    try:
        victim_spec = busybox(real_node, TRAP, terminationGracePeriodSeconds=5, priorityClassName="armada-preemptible")
        victim_spec["podSpec"]["containers"][0]["resources"] = {"limits": {"cpu": cpu, "memory": "32Mi"}}
        [victim] = submit(srv, tmp_path, [victim_spec], job_set="low", queue="A")
        wait_for(lambda: status(srv, victim)["state"] == "running", timeout=60)
        pod_name = job_pods(real_node)[victim]["metadata"]["name"]
        wait_for(lambda: b"started" in real_node.client.pod_log(real_node.namespace, pod_name).read(), timeout=30)

        urgent_spec = busybox(real_node, "echo urgent; sleep 2")
        urgent_spec["podSpec"]["containers"][0]["resources"] = {"limits": {"cpu": "1", "memory": "32Mi"}}
        [urgent] = submit(srv, tmp_path, [urgent_spec], job_set="high", queue="B")

        log = b""
        deleted_at = gone_at = created_at = running_at = None
        together = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and running_at is None:
            pods = job_pods(real_node)
            now = time.monotonic()
            # The victim has released the node once its pod is gone or has ended (its containers stopped:
            # the kubelet no longer counts it).
            released = victim not in pods or pods[victim]["status"].get("phase") in ("Succeeded", "Failed")
            if victim in pods:
                if pods[victim]["metadata"].get("deletionTimestamp") and deleted_at is None:
                    deleted_at = now
                try:
                    text = real_node.client.pod_log(real_node.namespace, pod_name).read() or b""
                except Exception:  # noqa: BLE001 - the pod went between the list and the read
                    text = b""
                # Once the container is removed the kubelet answers "unable to retrieve container logs for ...":
                # keep the last read of the container's own output.
                if b"started" in text.split(b"\n"):
                    log = text
            if released and deleted_at is not None and gone_at is None:
                gone_at = now
            if urgent in pods:
                created_at = created_at or now
                if not released:
                    together.append(pods[victim]["status"].get("phase"))
                if pods[urgent]["status"].get("phase") in ("Running", "Succeeded"):
                    running_at = now
            time.sleep(0.1)
        assert b"term" in log.split(b"\n")
        assert together == []
        assert deleted_at is not None and gone_at is not None and running_at is not None
        assert gone_at <= created_at and running_at - deleted_at <= 5 + 5
        record = wait_for(lambda: (lambda s: s if s["state"] == "succeeded" else None)(status(srv, urgent)), timeout=60)
        assert record["node"] == "real-1"
        assert status(srv, victim)["state"] in ("preempted", "queued", "leased", "pending", "running")
        assert out_of_resources(real_node) == []
        assert not [e for e in events(srv, "low", queue="A") + events(srv, "high", queue="B")
                    if "OutOf" in (e.get("reason") or "")]
    finally:
        srv.kill()


def test_a_preempted_jobs_log_end_is_kept_after_its_pod_is_deleted(real_node, tmp_path):
    """The victim's pod is deleted to free the node, and Kubernetes keeps no log of it: what its container had
    written is read just before the delete and `flotilla logs` prints it once the pod is gone."""
    srv = serve(real_node, tmp_path)
    cpu = node_cpu(real_node)
    try:
        victim_spec = busybox(real_node, "echo started; echo working; while true; do sleep 1; done",
                              terminationGracePeriodSeconds=1, priorityClassName="armada-preemptible")
        victim_spec["podSpec"]["containers"][0]["resources"] = {"limits": {"cpu": cpu, "memory": "32Mi"}}
        [victim] = submit(srv, tmp_path, [victim_spec], job_set="low", queue="A")
        wait_for(lambda: status(srv, victim)["state"] == "running", timeout=60)
        wait_for(lambda: cli(srv, "alice", "logs", victim).stdout == "started\nworking\n", timeout=30)
        urgent_spec = busybox(real_node, "sleep 2")
        urgent_spec["podSpec"]["containers"][0]["resources"] = {"limits": {"cpu": "1", "memory": "32Mi"}}
        [urgent] = submit(srv, tmp_path, [urgent_spec], job_set="high", queue="B")
        wait_for(lambda: status(srv, victim)["state"] == "preempted", timeout=60)
        wait_for(lambda: victim not in job_pods(real_node), timeout=60)
        out = cli(srv, "alice", "logs", victim)
        assert (out.returncode, out.stdout, out.stderr) == (0, "started\nworking\n", "")
        out = cli(srv, "alice", "logs", victim, "--tail", "1")
        assert (out.returncode, out.stdout, out.stderr) == (0, "working\n", "")
        assert status(srv, urgent)["state"] in ("pending", "running", "succeeded")
    finally:
        srv.kill()


def _affinity(*values: str) -> dict:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": list(values)}]}]}}}


def test_required_node_affinity_on_the_real_node(real_node, tmp_path):
    srv = serve(real_node, tmp_path)
    try:
        [here, nowhere] = submit(srv, tmp_path, [busybox(real_node, "echo here", affinity=_affinity("real-1")),
                                                 busybox(real_node, "echo nowhere", affinity=_affinity("real-9"))])
        record = wait_for(lambda: (lambda s: s if s["state"] == "succeeded" else None)(status(srv, here)), timeout=60)
        assert record["node"] == "real-1"
        assert job_pods(real_node).get(here, {}).get("spec", {}).get("affinity") in (None, _affinity("real-1"))
        reason = wait_for(lambda: waiting_reason(srv, nowhere), timeout=30)
        assert status(srv, nowhere)["state"] == "queued"
        assert reason == "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector"
        assert nowhere not in job_pods(real_node)
    finally:
        srv.kill()


def test_two_jobs_with_one_host_port_take_turns_on_the_real_node(real_node, tmp_path):
    # The first job holds the port until the test writes a file into a hostPath directory (not a fixed time,
    # which a loaded machine can spend before the second job is even looked at).
    gate = tmp_path / "gate"
    gate.mkdir()
    srv = serve(real_node, tmp_path)
    try:
        def web(command, **pod):
            spec = busybox(real_node, command, **pod)
            spec["podSpec"]["containers"][0]["ports"] = [{"containerPort": 8080, "hostPort": 8080}]
            return spec
        held = web("echo first; while [ ! -e /gate/go ]; do sleep 0.2; done",
                   container={"volumeMounts": [{"name": "gate", "mountPath": "/gate", "readOnly": True}]},
                   volumes=[{"name": "gate", "hostPath": {"path": str(gate), "type": "Directory"}}])
        [first, second] = submit(srv, tmp_path, [held, web("echo second; sleep 1")])
        wait_for(lambda: status(srv, first)["state"] == "running", timeout=60)
        assert status(srv, second)["state"] == "queued"
        assert wait_for(lambda: waiting_reason(srv, second), timeout=30) == \
            "0/1 nodes are available: 1 node(s) didn't have free ports for the requested pod ports"
        opened = time.time()
        (gate / "go").touch()
        for job_id in (first, second):
            wait_for(lambda: status(srv, job_id)["state"] == "succeeded", timeout=60)
        evs = events(srv)
        # The second job is leased only once the gate let the first end (its "succeeded" event is stamped when the
        # report is taken in, which may follow by a cycle the pod's end that the snapshot already saw), and its
        # container starts after the first's ended, by the kubelet's own times (kept pods, whole seconds).
        second_leased = min(e["time"] for e in evs if e["jobId"] == second and e["kind"] == "leased")
        assert second_leased >= opened
        pods = job_pods(real_node)
        first_ended = pods[first]["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"]
        second_started = pods[second]["status"]["containerStatuses"][0]["state"]["terminated"]["startedAt"]
        assert second_started >= first_ended
        assert [k for k, _ in kinds(evs, second)][-1] == "succeeded"
        assert out_of_resources(real_node) == []
    finally:
        srv.kill()
