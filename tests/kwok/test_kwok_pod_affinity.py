"""Inter-pod affinity, anti-affinity and topology spread on a KWOK cluster: pods made as kubectl makes them and
jobs submitted through the API, bound by Flotilla's loop, with other schedulers' pods counted.

Everything asserted is read back from the API server (bindings, conditions) or from the store.
"""

from __future__ import annotations

import time

import pytest

from flotilla.kubernetes.client import pod_path
from tests.support.incluster import Harness, condition, live, make_namespace, make_pod

pytestmark = pytest.mark.kwok

HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
E2E_KEY = "kubernetes.io/e2e-pts-filter"


def anti(required: bool, app: str = "web", key: str = HOSTNAME) -> dict:
    term = {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}
    if required:
        return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    return {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "podAffinityTerm": term}]}}


@pytest.fixture
def four(kwok, tmp_path):
    """Cluster ``a`` with four empty 32-core nodes, namespaces team-a (queue A) and flotilla-jobs, the loop."""
    cluster = kwok["a"]
    cluster.reset(nodes=4)
    make_namespace(cluster, "team-a", "A")
    cluster.create_namespace("flotilla-jobs")
    h = Harness(tmp_path, cluster)
    yield h
    h.close()


def bound(pods, namespace="team-a") -> dict[str, str]:
    return {p["metadata"]["name"]: p["spec"]["nodeName"] for p in live(pods, namespace) if p["spec"].get("nodeName")}


def run(h, count: int, what: str, namespace="team-a", cycles: int = 6) -> list[dict]:
    return h.settle(lambda pods: len(bound(pods, namespace)) >= count, what, cycles=cycles)


def label_nodes(h, labels: dict[str, dict[str, str]]) -> None:
    """Label the nodes, then wait (liveness only) until the backend's node watch shows the labels."""
    for node, values in labels.items():
        h.cluster.client.patch(f"/api/v1/nodes/{node}", {"metadata": {"labels": values}})
    deadline = time.monotonic() + 30
    while True:
        seen = {node.name: node.labels for node in h.backend.snapshot().nodes}
        if all(seen.get(node, {}).get(k) == v for node, values in labels.items() for k, v in values.items()):
            return
        assert time.monotonic() < deadline, f"node labels not seen: {seen}"
        time.sleep(0.05)


def test_kubectl_pods_with_required_anti_affinity_one_per_node_and_the_fifth_waits(four):
    c = four.cluster
    for k in range(5):
        make_pod(c, "team-a", f"web-{k}", labels={"app": "web"}, extra_spec={"affinity": anti(True)})
    four.seen(5)
    run(four, 4, "four bound")
    for _ in range(2):
        four.cycle()
    pods = four.settle(lambda pods: any((condition(p, "PodScheduled") or {}).get("message", "").startswith(
        "flotilla: ") for p in live(pods, "team-a") if not p["spec"].get("nodeName")), "the fifth told why")
    placed = bound(pods)
    assert len(placed) == 4 and sorted(placed.values()) == ["node-1", "node-2", "node-3", "node-4"]
    (waiting,) = [p for p in live(pods, "team-a") if not p["spec"].get("nodeName")]
    assert condition(waiting, "PodScheduled")["message"] == \
        "flotilla: 0/4 nodes are available: 4 node(s) didn't match pod anti-affinity rules"


def test_kubectl_pods_with_preferred_anti_affinity_all_bound_spread_over_the_nodes(four):
    c = four.cluster
    for k in range(5):
        make_pod(c, "team-a", f"web-{k}", labels={"app": "web"}, extra_spec={"affinity": anti(False)})
    four.seen(5)
    pods = run(four, 5, "five bound")
    assert sorted(set(bound(pods).values())) == ["node-1", "node-2", "node-3", "node-4"]


def test_kubectl_pods_spread_over_zones_of_one_and_three_nodes_four_and_four(four):
    c = four.cluster
    label_nodes(four, {"node-1": {ZONE: "a"}, "node-2": {ZONE: "b"}, "node-3": {ZONE: "b"}, "node-4": {ZONE: "b"}})
    spread = [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
               "labelSelector": {"matchLabels": {"app": "web"}}}]
    for k in range(8):
        make_pod(c, "team-a", f"web-{k}", labels={"app": "web"}, extra_spec={"topologySpreadConstraints": spread})
    four.seen(8)
    pods = run(four, 8, "eight bound")
    zone = {"node-1": "a", "node-2": "b", "node-3": "b", "node-4": "b"}
    per_zone = {"a": 0, "b": 0}
    for node in bound(pods).values():
        per_zone[zone[node]] += 1
    assert per_zone == {"a": 4, "b": 4}


def test_e2e_four_pods_with_max_skew_one_are_evenly_distributed_into_two_nodes(four):
    """The shapes of test/e2e/scheduling/predicates.go's spec of that name: two nodes get a dedicated topology
    key, a ReplicaSet's four pods require those nodes and spread over the key with maxSkew 1."""
    c = four.cluster
    label_nodes(four, {"node-2": {E2E_KEY: "node-2"}, "node-4": {E2E_KEY: "node-4"}})
    spec = {
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": E2E_KEY, "operator": "In", "values": ["node-2", "node-4"]}]}]}}},
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": E2E_KEY, "whenUnsatisfiable": "DoNotSchedule",
                                       "labelSelector": {"matchExpressions": [
                                           {"key": "e2e-pts-filter", "operator": "Exists"}]}}]}
    for k in range(4):
        make_pod(c, "team-a", f"e2e-pts-filter-{k}", labels={"e2e-pts-filter": ""}, extra_spec=spec)
    four.seen(4)
    pods = run(four, 4, "four bound")
    assert sorted(bound(pods).values()) == ["node-2", "node-2", "node-4", "node-4"]


def someone_elses_pod(cluster, name: str, node: str, labels: dict, affinity: dict | None = None) -> None:
    spec = {"nodeName": node, "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                              "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}}]}
    if affinity:
        spec["affinity"] = affinity
    cluster.client.post(pod_path("team-a"), {"apiVersion": "v1", "kind": "Pod",
                                            "metadata": {"name": name, "namespace": "team-a", "labels": labels},
                                            "spec": spec})


def test_pods_flotilla_did_not_place_are_counted_both_ways(four):
    c = four.cluster
    # Bound by someone else: an app=web pod on node-1, and on node-2 a pod whose anti-affinity keeps app=web out.
    someone_elses_pod(c, "other-web", "node-1", {"app": "web"})
    someone_elses_pod(c, "loner", "node-2", {"app": "loner"}, anti(True))
    c.wait_pods(lambda pods: sum(1 for p in pods if p["status"].get("phase") == "Running") == 2, what="running")
    for k in range(3):
        make_pod(c, "team-a", f"web-{k}", labels={"app": "web"}, extra_spec={"affinity": anti(True)})
    four.seen(3)
    four.settle(lambda pods: len(bound(pods)) >= 4, "two more bound", cycles=6)
    for _ in range(2):
        four.cycle()
    pods = c.pods()
    ours = {name: node for name, node in bound(pods).items() if name.startswith("web-")}
    # node-1 holds an app=web pod, node-2's pod excludes app=web: two go to node-3 and node-4, one waits.
    assert sorted(ours.values()) == ["node-3", "node-4"]
    (waiting,) = [p for p in live(pods, "team-a") if not p["spec"].get("nodeName")]
    assert condition(waiting, "PodScheduled")["message"] == (
        "flotilla: 0/4 nodes are available: 3 node(s) didn't match pod anti-affinity rules, "
        "1 node(s) didn't satisfy existing pods anti-affinity rules")


def test_api_jobs_with_required_anti_affinity_one_per_node_and_the_fifth_waits(four):
    from flotilla.service.jobspec import prepare
    from tests.support.service import job, job_file

    specs = []
    for k in range(5):
        spec = job(f"w{k}", cpu="1")
        spec["labels"] = {"app": "web"}
        spec["podSpec"]["affinity"] = anti(True)
        specs.append(spec)
    _, new = prepare(job_file("A", "api", specs), four.settings)
    ids = [s.id for s in four.store.submit("A", "api", "alice", new)]
    pods = run(four, 4, "four API jobs bound", namespace="flotilla-jobs")
    for _ in range(2):
        four.cycle()
    pods = four.cluster.pods()
    assert sorted(bound(pods, "flotilla-jobs").values()) == ["node-1", "node-2", "node-3", "node-4"]
    states = sorted(four.store.get_job(i)["state"] for i in ids)
    assert states.count("queued") == 1 and len([s for s in states if s != "queued"]) == 4


def labelled_namespace(h, name: str, labels: dict[str, str]) -> None:
    """Make namespace ``name`` with ``labels`` (patched if it exists), then wait (liveness only) until the
    backend's namespace watch shows them."""
    h.cluster.create_namespace(name)
    h.cluster.client.patch(f"/api/v1/namespaces/{name}", {"metadata": {"labels": labels}})
    deadline = time.monotonic() + 30
    while True:
        seen = h.backend.snapshot().namespace_labels.get(name, {})
        if all(seen.get(k) == v for k, v in labels.items()):
            return
        assert time.monotonic() < deadline, f"namespace labels not seen: {seen}"
        time.sleep(0.05)


def test_a_namespace_selector_chooses_namespaces_by_their_labels_and_follows_their_changes(four):
    c = four.cluster
    labelled_namespace(four, "db-silver", {"tier": "silver"})
    labelled_namespace(four, "db-gold", {"tier": "gold"})
    for namespace, node in (("db-silver", "node-2"), ("db-gold", "node-3")):
        c.client.post(pod_path(namespace), {"apiVersion": "v1", "kind": "Pod",
                                            "metadata": {"name": "db", "namespace": namespace, "labels": {"app": "db"}},
                                            "spec": {"nodeName": node, "containers": [
                                                {"name": "c", "image": "registry.k8s.io/pause:3.10",
                                                 "resources": {"requests": {"cpu": "1"}}}]}})
    c.wait_pods(lambda pods: sum(1 for p in pods if p["status"].get("phase") == "Running") == 2, what="running")

    def near_db(tier: str) -> dict:
        return {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": HOSTNAME,
             "namespaceSelector": {"matchLabels": {"tier": tier}}}]}}

    make_pod(c, "team-a", "near-silver", extra_spec={"affinity": near_db("silver")})
    make_pod(c, "team-a", "near-bronze", extra_spec={"affinity": near_db("bronze")})
    four.seen(2)
    run(four, 1, "near-silver bound")
    for _ in range(2):
        four.cycle()
    pods = four.settle(lambda pods: any((condition(p, "PodScheduled") or {}).get("message", "").startswith(
        "flotilla: ") for p in live(pods, "team-a") if not p["spec"].get("nodeName")), "near-bronze told why")
    # The db pod of the silver namespace is on node-2; no namespace is bronze, so near-bronze's term selects no pod.
    assert bound(pods) == {"near-silver": "node-2"}
    (waiting,) = [p for p in live(pods, "team-a") if not p["spec"].get("nodeName")]
    assert condition(waiting, "PodScheduled")["message"] == \
        "flotilla: 0/4 nodes are available: 4 node(s) didn't match pod affinity rules"
    # The gold namespace becomes bronze: its db pod (node-3) now counts for near-bronze.
    labelled_namespace(four, "db-gold", {"tier": "bronze"})
    pods = run(four, 2, "near-bronze bound")
    assert bound(pods) == {"near-silver": "node-2", "near-bronze": "node-3"}


def test_cluster_default_spread_constraints_spread_a_replica_sets_pods(kwok, tmp_path):
    # podTopologySpread.defaultConstraints: maxSkew 1 over hostnames. A ReplicaSet's pods carry no constraint of
    # their own; the default selects them by the ReplicaSet's selector, so they land one per node. Pods with no
    # service and no controller get no default: best fit stacks them.
    cluster = kwok["a"]
    cluster.reset(nodes=4)
    make_namespace(cluster, "team-a", "A")
    cluster.create_namespace("flotilla-jobs")
    h = Harness(tmp_path, cluster, extra="podTopologySpread: {defaultConstraints: [{maxSkew: 1, topologyKey: "
                                          "kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule}]}\n")
    try:
        rs = cluster.client.post("/apis/apps/v1/namespaces/team-a/replicasets", {
            "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web", "namespace": "team-a"},
            "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"schedulerName": "flotilla", "containers": [
                                      {"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}}})
        owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": rs["metadata"]["uid"],
                 "controller": True}
        deadline = time.monotonic() + 30
        while ("ReplicaSet", "team-a", "web") not in h.backend.intake.controllers:
            assert time.monotonic() < deadline, "the ReplicaSet was not seen"
            time.sleep(0.05)
        for k in range(4):
            cluster.client.post(pod_path("team-a"), {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": f"web-{k}", "namespace": "team-a", "labels": {"app": "web"},
                             "ownerReferences": [owner]},
                "spec": {"schedulerName": "flotilla", "terminationGracePeriodSeconds": 1, "containers": [
                    {"name": "c", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": {"cpu": "1"}}}]}})
        for k in range(2):
            make_pod(cluster, "team-a", f"plain-{k}", labels={"app": "plain"})
        h.seen(6)
        pods = run(h, 6, "six bound")
        placed = bound(pods)
        assert sorted(node for name, node in placed.items() if name.startswith("web-")) == \
            ["node-1", "node-2", "node-3", "node-4"]
        assert len({node for name, node in placed.items() if name.startswith("plain-")}) == 1
    finally:
        h.close()
