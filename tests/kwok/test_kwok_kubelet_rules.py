"""Kubelet admission rules on fake clusters: a preemptor held for its node until its victim is gone, host
ports one per node, required node affinity over 1,000 nodes in 10 zones.

Outcomes are read back from the API server (pods, their nodes, when they exist), not from Flotilla's view.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from tests.support.kwok import NODE_TEMPLATE, flotilla_pods_by_node

from flotilla.core.model import Job
from flotilla.core.nodeaffinity import parse_node_affinity
from flotilla.kubernetes.pods import GRACE_PERIOD
from flotilla.kubernetes.runner import Runner
from tests.support.kwok_backends import close_all, scheduler_and_backends, write_config

pytestmark = pytest.mark.kwok


def job(job_id, queue, cpu=1, submitted=0.0, pc="armada-preemptible", **kwargs) -> Job:
    return Job(job_id, queue, job_set="s", priority_class=pc, requests={"cpu": cpu * 1000}, submitted=submitted,
               **kwargs)


def pods_of(pods: list[dict]) -> dict[str, dict]:
    """Flotilla pods by job id (any state, terminating ones included)."""
    return {p["metadata"]["annotations"]["flotilla.io/job-id"]: p for p in pods
            if "flotilla.io/job-id" in (p["metadata"].get("annotations") or {})}


def test_a_preemptor_is_held_for_its_node_until_its_victim_is_gone(kwok, tmp_path):
    cluster = kwok["a"]
    cluster.reset(nodes=1)
    config, scheduler, backends = scheduler_and_backends(write_config(tmp_path, kwok, names=("a",)))
    backend = backends["kwok-a"]
    try:
        runner = Runner(scheduler, backends)
        runner.submit([job("victim", "A", cpu=32, annotations={GRACE_PERIOD: "4"})])
        assert runner.run(lambda r: r.jobs["victim"].state == "running", timeout=30)

        runner.submit([job("urgent", "B", cpu=24, submitted=1.0, pc="armada-default")])
        result = runner.cycle()
        assert [p.job.id for p in result.decisions.scheduled] == ["urgent"]
        assert [j.id for j in result.decisions.preempted] == ["victim"]
        # Planned on node-1 and held there: no pod yet, the victim terminating.
        assert backend.held() == {"node-1": ["urgent"]}

        # Others arrive while the victim terminates. The scheduler sees the node as the preemption left it (the
        # victim's room is urgent's): the filler takes the 8 cores left beside urgent at once, its start held
        # behind urgent's; the 16-core job has no room.
        runner.submit([job("filler", "A", cpu=8, submitted=2.0), job("big", "B", cpu=16, submitted=3.0,
                                                                        pc="armada-default")])
        seen_together = []
        placed = []
        victim_gone = urgent_created = None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            result = runner.cycle()
            placed += [(p.job.id, p.node) for p in result.decisions.scheduled]
            assert not result.decisions.preempted
            pods = pods_of(cluster.pods())
            if "victim" in pods and ("urgent" in pods or "filler" in pods):
                seen_together.append(time.monotonic())
            if "victim" not in pods and victim_gone is None:
                victim_gone = time.monotonic()
            if "urgent" in pods and urgent_created is None:
                urgent_created = time.monotonic()
            if victim_gone is None:
                assert placed == [("filler", "node-1")]
                assert backend.held() == {"node-1": ["urgent", "filler"]}
            if urgent_created is not None and pods["urgent"]["status"].get("phase") == "Running":
                break
            time.sleep(0.1)
        assert seen_together == []
        assert victim_gone is not None and urgent_created is not None and urgent_created >= victim_gone
        assert pods["urgent"]["spec"]["nodeName"] == "node-1"
        # Once the victim is gone, both held pods are made.
        assert runner.run(lambda r: r.jobs["filler"].state == "running", timeout=30)
        assert placed == [("filler", "node-1")]
        assert runner.jobs["filler"].node == "node-1"
        assert runner.jobs["big"].state == "queued"
        assert not [p for p in cluster.pods() if p["status"].get("reason", "").startswith("OutOf")]
    finally:
        close_all(backends)


def test_jobs_with_one_host_port_never_share_a_kwok_node(kwok, tmp_path):
    config, scheduler, backends = scheduler_and_backends(write_config(tmp_path, kwok, names=("a",)))
    try:
        runner = Runner(scheduler, backends)
        runner.submit([job(f"web-{k}", "A", submitted=float(k), host_ports=(("TCP", 8080, "0.0.0.0"),)) for k in range(3)])
        assert runner.run(lambda r: sum(j.state == "running" for j in r.jobs.values()) == 2, timeout=30)
        for _ in range(3):
            runner.cycle()
        pods = kwok["a"].pods()
        assert flotilla_pods_by_node(pods) == {"node-1": ["web-0"], "node-2": ["web-1"]}
        assert {p["spec"]["containers"][0]["ports"][0]["hostPort"] for p in pods} == {8080}
        assert runner.jobs["web-2"].state == "queued"
    finally:
        close_all(backends)


ZONES = 10
NODES = 1000


def _zoned_nodes(cluster, tmp_path) -> None:
    """1,000 32-core nodes, node-i in zone z(i mod 10); z0 nodes with i mod 50 == 0 are ``special``; z1 nodes
    carry ``size`` = i // 10 (0-99)."""
    from flotilla.kwok.cluster import load_node_template, render_node, wait_nodes_ready

    cluster.reset(nodes=0)
    path = tmp_path / "node.yaml"
    path.write_text(NODE_TEMPLATE)
    template = load_node_template(path)

    def one(i: int) -> str:
        node = render_node(template, i)
        labels = node["metadata"]["labels"]
        labels["zone"] = f"z{i % ZONES}"
        if i % 50 == 0:
            labels["special"] = "yes"
        if i % 10 == 1:
            labels["size"] = str(i // 10)
        cluster.client.post("/api/v1/nodes", node)
        return node["metadata"]["name"]

    with ThreadPoolExecutor(8) as pool:
        names = list(pool.map(one, range(1, NODES + 1)))
    wait_nodes_ready(cluster.client, names, 180)


def _required(*expressions) -> object:
    return parse_node_affinity({"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": list(expressions)}]}})


def test_required_node_affinity_over_a_thousand_nodes_in_ten_zones(kwok, tmp_path):
    cluster = kwok["a"]
    _zoned_nodes(cluster, tmp_path)
    config, scheduler, backends = scheduler_and_backends(write_config(tmp_path, kwok, names=("a",)))
    try:
        groups = {
            "in": (_required({"key": "zone", "operator": "In", "values": ["z3", "z7"]}), 205,
                   {f"node-{i}" for i in range(1, NODES + 1) if i % 10 in (3, 7)}),
            "notin": (_required({"key": "zone", "operator": "NotIn", "values": [f"z{k}" for k in range(9)]}), 105,
                      {f"node-{i}" for i in range(1, NODES + 1) if i % 10 == 9}),
            "exists": (_required({"key": "special", "operator": "Exists"}), 25,
                       {f"node-{i}" for i in range(50, NODES + 1, 50)}),
            "gt": (_required({"key": "size", "operator": "Gt", "values": ["94"]}), 10,
                   {f"node-{i}" for i in (951, 961, 971, 981, 991)}),
        }
        runner = Runner(scheduler, backends)
        serial = 0
        for name, (affinity, count, _) in groups.items():
            for k in range(count):
                serial += 1
                runner.submit([job(f"{name}-{k}", "A", cpu=32, submitted=float(serial), affinity=affinity)])
        placed_total = sum(len(nodes) for _, _, nodes in groups.values())
        assert placed_total == 200 + 100 + 20 + 5
        assert runner.run(lambda r: sum(j.state == "running" for j in r.jobs.values()) == placed_total,
                          timeout=120, period=0.5)
        by_node = flotilla_pods_by_node(cluster.pods())
        for name, (_, count, nodes) in groups.items():
            got = {node for node, ids in by_node.items() for job_id in ids if job_id.startswith(f"{name}-")}
            assert got == nodes, name
            assert sum(r.state == "queued" for job_id, r in runner.jobs.items()
                       if job_id.startswith(f"{name}-")) == count - len(nodes), name
        assert all(len(ids) == 1 for ids in by_node.values())
    finally:
        close_all(backends)
