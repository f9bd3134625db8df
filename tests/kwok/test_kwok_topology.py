"""Topology-aware gangs on a KWOK cluster: the pods of a gang with a uniformity label land in one rack.

Every outcome is read back from the API server (the nodes the pods are bound
to), not from Flotilla's own view.
"""

from __future__ import annotations

import time

import pytest
from tests.support.kwok import flotilla_pods_by_node
from tests.support.kwok_backends import close_all, job, scheduler_and_backends, wait_idle, write_config

from flotilla.core.model import Gang
from flotilla.kubernetes.runner import Runner

pytestmark = pytest.mark.kwok

RACKS = {"node-1": "r1", "node-2": "r1", "node-3": "r2", "node-4": "r2"}


def label_nodes(cluster, labels: dict[str, str | None]) -> None:
    for node, rack in labels.items():
        cluster.client.patch(f"/api/v1/nodes/{node}", {"metadata": {"labels": {"rack": rack}}})


def test_a_topology_gangs_pods_land_in_the_one_rack_that_holds_it(kwok, tmp_path):
    """Four 32-core nodes in racks r1 and r2. Others' pods leave r1 room for three 8-core pods (node-1: 8 free,
    node-2: 20) and r2 for four (16 free on each): the gang's four pods are bound to node-3 and node-4.
    Best fit per pod, without the label, would start on node-1 (the tightest node)."""
    cluster = kwok["a"]
    cluster.reset(nodes=4)
    try:
        label_nodes(cluster, RACKS)
        for node, cpu in (("node-1", "24"), ("node-2", "12"), ("node-3", "16"), ("node-4", "16")):
            cluster.create_foreign_pod(f"other-{node}", node, cpu)
        config, scheduler, backends = scheduler_and_backends(write_config(tmp_path, kwok, names=("a",)))
        try:
            backend = backends["kwok-a"]
            deadline = time.monotonic() + 10
            while (len(backend.snapshot().foreign) < 4 or
                   {n.name: n.labels.get("rack") for n in backend.snapshot().nodes} != RACKS) and \
                    time.monotonic() < deadline:
                time.sleep(0.05)
            runner = Runner(scheduler, backends)
            runner.submit(job(f"g-{i}", "A", cpu=8, submitted=i, gang=Gang("g", 4, uniformity_label="rack"))
                          for i in range(1, 5))
            result = runner.cycle()
            assert sorted(p.node for p in result.decisions.scheduled) == ["node-3", "node-3", "node-4", "node-4"]
            wait_idle(backends, runner)
            pods = cluster.wait_pods(lambda pods: sum(p["status"].get("phase") == "Running" for p in pods) == 8,
                                     what="the gang's pods running")
            assert flotilla_pods_by_node(pods) == {"node-3": ["g-1", "g-2"], "node-4": ["g-3", "g-4"]}
            # The pods carry the gang's label, so a scheduler reading them back keeps the gang in its rack.
            annotations = [p["metadata"]["annotations"] for p in pods
                           if "flotilla.io/job-id" in (p["metadata"].get("annotations") or {})]
            assert {a["armadaproject.io/gangNodeUniformityLabel"] for a in annotations} == {"rack"}
            running = [j for j in backend.snapshot().running if j.id.startswith("g-")]
            assert sorted(j.id for j in running) == ["g-1", "g-2", "g-3", "g-4"]
            assert {j.gang.uniformity_label for j in running} == {"rack"}
        finally:
            close_all(backends)
    finally:
        label_nodes(cluster, {node: None for node in RACKS})
