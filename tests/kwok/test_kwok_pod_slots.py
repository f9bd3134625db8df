"""Pod slots and host IPs on fake clusters, read back from the API server: a node's allocatable ``pods`` holds
every pod on it (Flotilla's and foreign ones bound by ``nodeName``), and host ports conflict as NodePorts has it."""

from __future__ import annotations

import pytest
from tests.support.kwok import flotilla_pods_by_node

from flotilla.core.model import Job
from flotilla.kubernetes.client import pod_path
from flotilla.kubernetes.runner import Runner
from tests.support.kwok_backends import close_all, scheduler_and_backends, write_config

pytestmark = pytest.mark.kwok

SLOTS = """
namePrefix: node
resources: {cpu: 32, memory: 128Gi, pods: 4}
labels: {flotilla.io/test: kwok}
"""


def small(job_id: str, submitted: float, **kwargs) -> Job:
    return Job(job_id, "A", job_set="s", priority_class="armada-preemptible", requests={"cpu": 100},
               submitted=submitted, **kwargs)


def nodes_of_four_slots(cluster, tmp_path, count: int) -> None:
    """``count`` 32-core nodes whose allocatable ``pods`` is 4, in place of the fixture's."""
    from flotilla.kwok.cluster import create_nodes, load_node_template, wait_nodes_ready

    cluster.reset(nodes=0)
    path = tmp_path / "slots.yaml"
    path.write_text(SLOTS)
    names = create_nodes(cluster.client, load_node_template(path), count)
    wait_nodes_ready(cluster.client, names, 60)
    assert {n["metadata"]["name"]: n["status"]["allocatable"]["pods"]
            for n in cluster.client.get("/api/v1/nodes")["items"]} == {name: "4" for name in names}


def waiting_reasons(runner: Runner) -> dict[str, str]:
    decisions = runner.cycle().decisions
    return {job.id: decisions.explain(job) for job in decisions.queued}


def test_two_nodes_of_four_pods_bind_eight_of_ten(kwok, tmp_path):
    cluster = kwok["a"]
    nodes_of_four_slots(cluster, tmp_path, 2)
    config, scheduler, backends = scheduler_and_backends(write_config(tmp_path, kwok, names=("a",)))
    try:
        runner = Runner(scheduler, backends)
        runner.submit([small(f"j{k}", float(k)) for k in range(10)])
        assert runner.run(lambda r: sum(j.state == "running" for j in r.jobs.values()) == 8, timeout=30)
        for _ in range(3):
            runner.cycle()
        by_node = flotilla_pods_by_node(cluster.pods())
        assert {node: len(ids) for node, ids in by_node.items()} == {"node-1": 4, "node-2": 4}
        assert sorted(job_id for ids in by_node.values() for job_id in ids) == sorted(f"j{k}" for k in range(8))
        assert waiting_reasons(runner) == {"j8": "0/2 nodes are available: 2 Too many pods",
                                           "j9": "0/2 nodes are available: 2 Too many pods"}
        assert len(cluster.pods()) == 8
    finally:
        close_all(backends)
        cluster.reset(nodes=0)   # the next reset makes the fixture's nodes afresh (110 pods), not these


def test_foreign_pods_bound_by_node_name_take_their_slots(kwok, tmp_path):
    cluster = kwok["a"]
    nodes_of_four_slots(cluster, tmp_path, 1)
    cluster.create_foreign_pod("other-1", "node-1", "100m")
    cluster.create_foreign_pod("other-2", "node-1", "100m")
    cluster.wait_pods(lambda pods: sum(p["status"].get("phase") == "Running" for p in pods) == 2, what="foreign pods")
    config, scheduler, backends = scheduler_and_backends(write_config(tmp_path, kwok, names=("a",)))
    try:
        runner = Runner(scheduler, backends)
        runner.submit([small(f"j{k}", float(k)) for k in range(5)])
        assert runner.run(lambda r: sum(j.state == "running" for j in r.jobs.values()) == 2, timeout=30)
        for _ in range(3):
            runner.cycle()
        assert flotilla_pods_by_node(cluster.pods()) == {"node-1": ["j0", "j1"]}
        assert waiting_reasons(runner) == {f"j{k}": "0/1 nodes are available: 1 Too many pods" for k in (2, 3, 4)}
        # One foreign pod leaves: its slot goes to the next job.
        cluster.client.delete(pod_path("default", "other-1"), {"gracePeriodSeconds": 0})
        assert runner.run(lambda r: sum(j.state == "running" for j in r.jobs.values()) == 3, timeout=30)
        assert flotilla_pods_by_node(cluster.pods()) == {"node-1": ["j0", "j1", "j2"]}
    finally:
        close_all(backends)
        cluster.reset(nodes=0)   # the next reset makes the fixture's nodes afresh (110 pods), not these


def test_host_ports_share_a_node_on_other_host_ips_and_protocols(kwok, tmp_path):
    # NodePorts' e2e shapes on one node: 54321/TCP on 127.0.0.1, 54321/TCP and /UDP on the node's IP share it;
    # a foreign pod's 54322/TCP on 0.0.0.0 keeps out 54322/TCP on any IP.
    cluster = kwok["a"]
    cluster.reset(nodes=0)
    cluster.reset(nodes=1)   # a fresh node of 110 pods
    cluster.client.post(pod_path("default"), {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "other", "namespace": "default", "labels": {"app": "someone-else"}},
        "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                                       "ports": [{"containerPort": 80, "hostPort": 54322}]}]}})
    cluster.wait_pods(lambda pods: any(p["status"].get("phase") == "Running" for p in pods), what="foreign pod")
    config, scheduler, backends = scheduler_and_backends(write_config(tmp_path, kwok, names=("a",)))
    try:
        runner = Runner(scheduler, backends)
        runner.submit([small("pod1", 1.0, host_ports=(("TCP", 54321, "127.0.0.1"),)),
                       small("pod2", 2.0, host_ports=(("TCP", 54321, "172.18.0.2"),)),
                       small("pod3", 3.0, host_ports=(("UDP", 54321, "172.18.0.2"),)),
                       small("pod5", 4.0, host_ports=(("TCP", 54322, "172.18.0.2"),))])
        done = runner.run(lambda r: sum(j.state == "running" for j in r.jobs.values()) == 3, timeout=30)
        assert done, {k: (j.state, j.reason) for k, j in runner.jobs.items()}
        for _ in range(3):
            runner.cycle()
        pods = cluster.pods()
        assert flotilla_pods_by_node(pods) == {"node-1": ["pod1", "pod2", "pod3"]}
        ports = {p["metadata"]["annotations"]["flotilla.io/job-id"]: p["spec"]["containers"][0]["ports"]
                 for p in pods if "flotilla.io/job-id" in (p["metadata"].get("annotations") or {})}
        assert ports["pod1"] == [{"containerPort": 54321, "hostPort": 54321, "protocol": "TCP",
                                  "hostIP": "127.0.0.1"}]
        assert waiting_reasons(runner) == {
            "pod5": "0/1 nodes are available: 1 node(s) didn't have free ports for the requested pod ports"}
    finally:
        close_all(backends)
        cluster.reset(nodes=0)   # the next reset makes the fixture's nodes afresh (110 pods), not these


def test_kept_finished_pods_take_no_slot(kwok, tmp_path):
    """Finished pods kept for their logs (finishedPodRetention, an hour by default) hold nothing: on a node of
    4 pod slots holding 4 of them, 4 more jobs start, and only a fifth waits for a slot."""
    cluster = kwok["a"]
    nodes_of_four_slots(cluster, tmp_path, 1)
    config, scheduler, backends = scheduler_and_backends(write_config(tmp_path, kwok, names=("a",)))
    try:
        runner = Runner(scheduler, backends)
        done = {"flotilla.io/simulated-duration": "0s"}
        runner.submit([small(f"done{k}", float(k), annotations=done) for k in range(4)])
        assert runner.run(lambda r: r.counts() == {"succeeded": 4}, timeout=30), runner.counts()
        kept = cluster.wait_pods(lambda pods: sorted(p["status"].get("phase") for p in pods) == ["Succeeded"] * 4,
                                 what="4 finished pods kept")
        assert sorted(p["spec"]["nodeName"] for p in kept) == ["node-1"] * 4
        runner.submit([small(f"j{k}", 10.0 + k) for k in range(5)])
        assert runner.run(lambda r: r.counts() == {"succeeded": 4, "running": 4, "queued": 1}, timeout=30), \
            runner.counts()
        for _ in range(3):
            runner.cycle()
        assert flotilla_pods_by_node(cluster.pods()) == {
            "node-1": ["j0", "j1", "j2", "j3"]}
        assert waiting_reasons(runner) == {"j4": "0/1 nodes are available: 1 Too many pods"}
        assert len(cluster.pods()) == 8
    finally:
        close_all(backends)
        cluster.reset(nodes=0)   # the next reset makes the fixture's nodes afresh (110 pods), not these
