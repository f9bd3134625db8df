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


IN_CLUSTER_RACKS = {"node-1": "rack-a", "node-2": "rack-a", "node-3": "rack-b", "node-4": "rack-b"}


def test_a_gang_of_pods_made_with_kubectl_lands_in_one_rack_and_members_must_agree(kwok, tmp_path):
    """Pods made as kubectl makes them, naming a gang of three 6-core pods with the uniformity label ``rack``.

    Others' pods leave rack-a room for one such pod (node-1: 8 free, node-2: 4) and rack-b for three (node-3: 12,
    node-4: 10): the gang is bound to node-3 (two) and node-4 (one). Without the label the tightest node, node-1,
    would take a member and split the gang over both racks. A second gang whose two pods disagree on the label is
    never stored: both are told why and neither is bound."""
    from tests.support.incluster import Harness, bound_per_node, condition, live, make_namespace, make_pod

    cluster = kwok["a"]
    cluster.reset(nodes=4)
    h = None
    try:
        label_nodes(cluster, IN_CLUSTER_RACKS)
        for node, cpu in (("node-1", "24"), ("node-2", "28"), ("node-3", "20"), ("node-4", "22")):
            cluster.create_foreign_pod(f"other-{node}", node, cpu)
        make_namespace(cluster, "team-b", "B")
        h = Harness(tmp_path, cluster)
        deadline = time.monotonic() + 10
        while (len(h.backend.snapshot().foreign) < 4 or
               {n.name: n.labels.get("rack") for n in h.backend.snapshot().nodes} != IN_CLUSTER_RACKS) and \
                time.monotonic() < deadline:
            time.sleep(0.05)
        gang = {"armadaproject.io/gangId": "g", "armadaproject.io/gangCardinality": "3",
                "armadaproject.io/gangNodeUniformityLabel": "rack"}
        for i in range(3):
            make_pod(cluster, "team-b", f"g-{i}", "6", annotations=gang)
        split = {"armadaproject.io/gangId": "d", "armadaproject.io/gangCardinality": "2"}
        make_pod(cluster, "team-b", "d-0", annotations={**split, "armadaproject.io/gangNodeUniformityLabel": "rack"})
        make_pod(cluster, "team-b", "d-1", annotations={**split, "armadaproject.io/gangNodeUniformityLabel": "zone"})
        h.seen(5)
        told = ("flotilla: metadata.annotations.armadaproject.io/gangNodeUniformityLabel: gang 'd' members disagree "
                "on the uniformity label (d-0 says 'rack', d-1 says 'zone')")

        def done(pods) -> bool:
            by_name = {p["metadata"]["name"]: p for p in live(pods, "team-b")}
            return sum(1 for name in ("g-0", "g-1", "g-2") if by_name[name]["spec"].get("nodeName")) == 3 and \
                all((condition(by_name[name], "PodScheduled") or {}).get("message") == told for name in ("d-0", "d-1"))

        pods = h.settle(done, "the gang bound and the split gang told why", cycles=4,
                        seen=lambda pods: sorted((p["metadata"]["name"], p["spec"].get("nodeName"),
                                                  (condition(p, "PodScheduled") or {}).get("message"))
                                                 for p in live(pods, "team-b")))
        on = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in live(pods, "team-b")}
        assert bound_per_node(pods, "team-b") == {"node-3": 2, "node-4": 1}
        assert on["d-0"] is None and on["d-1"] is None
        racks = {n["metadata"]["name"]: n["metadata"]["labels"].get("rack")
                 for n in cluster.client.get("/api/v1/nodes")["items"]}
        assert {racks[on[f"g-{i}"]] for i in range(3)} == {"rack-b"}
        jobs = h.store.list_jobs(queue="B")
        assert sorted(j["pod"]["name"] for j in jobs) == ["g-0", "g-1", "g-2"]
        assert {j["gang"]["id"] for j in jobs} == {"team-b/g"}
    finally:
        if h is not None:
            h.close()
        label_nodes(cluster, {node: None for node in IN_CLUSTER_RACKS})
