"""What a kubelet checks at admission, honoured at placement: requests as it counts them, host ports per node,
and the placement fields Flotilla does not honour refused at submission with their path."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from flotilla.kubernetes.pods import pod_host_ports, pod_requests
from flotilla.kubernetes.requests import effective_requests
from flotilla.service.api import create_app
from flotilla.service.jobspec import prepare
from flotilla.service.store import Store
from tests.support.scenario import config, invoke, placements, run_once
from tests.support.service import config as service_config
from tests.support.service import headers, job, job_file, settings
from tests.support.loop import make, run_until

GI = 2**30


# -- requests ---------------------------------------------------------------------------------

def test_effective_requests_count_sidecars_with_containers_and_init_containers_alone():
    containers = [{"cpu": 1000, "memory": GI}, {"cpu": 500}]
    # init 0: ordinary, 4 cpu alone; sidecar 1 (200m) starts; init 2: ordinary 3 cpu beside the sidecar.
    init = [({"cpu": 4000}, False), ({"cpu": 200, "memory": GI}, True), ({"cpu": 3000}, False)]
    # containers 1500m + sidecar 200m = 1700m; init peak max(4000, 200, 3000 + 200) = 4000.
    assert effective_requests(containers, init) == {"cpu": 4000, "memory": 2 * GI}
    # A sidecar before a big init container: that init container runs beside it (5000 + 200).
    assert effective_requests(containers, [({"cpu": 200}, True), ({"cpu": 5000}, False)]) == \
        {"cpu": 5200, "memory": GI}
    # Overhead on top; pod-level cpu replaces the containers' sum (but not other resources).
    assert effective_requests(containers, (), {"cpu": 100, "memory": 1}, {"cpu": 8000}) == \
        {"cpu": 8100, "memory": GI + 1}


def test_pod_requests_read_back_count_sidecars_and_pod_level_resources():
    pod = {"spec": {"containers": [{"resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1", "memory": "1Gi"}}}],
                    "initContainers": [{"restartPolicy": "Always", "resources": {"requests": {"cpu": "500m"}}},
                                       {"resources": {"requests": {"cpu": "2"}}}],
                    "overhead": {"memory": "64Mi"}}}
    # cpu: containers 1 + sidecar 0.5 = 1.5 vs init 2 + sidecar 0.5 = 2.5; memory: the limit is the request.
    assert pod_requests(pod) == {"cpu": 2500, "memory": GI + 64 * 2**20}
    pod["spec"]["resources"] = {"requests": {"cpu": "4"}, "limits": {"cpu": "4"}}
    assert pod_requests(pod) == {"cpu": 4000, "memory": GI + 64 * 2**20}


def _sidecar_job(client_id):
    spec = job(client_id, cpu="1", memory="1Gi")
    spec["podSpec"]["initContainers"] = [
        {"name": "proxy", "image": "busybox", "restartPolicy": "Always",
         "resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": "500m"}}},
        {"name": "fetch", "image": "busybox", "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "2"}}}]
    spec["podSpec"]["runtimeClassName"] = "kata"
    spec["podSpec"]["overhead"] = {"cpu": "250m", "memory": "128Mi"}
    return spec


def test_submitted_jobs_are_counted_as_the_kubelet_counts_them():
    _, (new,) = prepare(job_file("A", "s", [_sidecar_job("a")]), settings())
    # cpu: max(1 + 0.5, 2 + 0.5) + 0.25 overhead; memory 1Gi + 128Mi overhead.
    assert new.pods[0].requests == {"cpu": 2750, "memory": GI + 128 * 2**20}


# -- refused placement fields -----------------------------------------------------------------

@pytest.fixture
def api(tmp_path):
    s = settings()
    store = Store(f"sqlite:///{tmp_path}/api.db")
    store.sync_queues(s.queues)
    yield TestClient(create_app(store, s)), store
    store.close()


def refused(api, body) -> list[str]:
    client, store = api
    r = client.post("/v1/submit", json=body, headers=headers("alice"))
    assert r.status_code == 422, r.text
    assert store.count_jobs() == 0
    return [e["text"] for e in r.json()["error"]["errors"]]


TERM = {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "kubernetes.io/hostname"}


def test_placement_fields_flotilla_does_not_honour_are_refused_with_their_path(api):
    port = {"containerPort": 80, "hostPort": 8080}
    twice = job("f")
    twice["podSpec"]["containers"].append({"name": "side", "image": "busybox", "ports": [dict(port)]})
    twice["podSpec"]["containers"][0]["ports"] = [dict(port)]
    claims = job("g")
    claims["podSpec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    texts = refused(api, job_file("A", "s", [
        job("a", affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": ""}]}}),
        job("b", affinity={"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {**TERM, "namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "Equals"}]}}]}}),
        job("c", topologySpreadConstraints=[{"maxSkew": 0, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}]),
        job("d", schedulingGates=[{"name": "wait"}], priority=5, preemptionPolicy="Never"),
        job("e", resourceClaims=[{"name": "gpu", "resourceClaimName": "gpu-claim"}]),
        twice, claims,
        job("h", runtimeClassName="kata"),
        job("i", overhead={"cpu": "100m"}),
    ]))
    assert texts == [
        "job 0 (clientId 'a'): podSpec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]."
        "topologyKey: can not be empty",
        "job 1 (clientId 'b'): podSpec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]."
        "namespaceSelector.matchExpressions[0].operator: expected one of In, NotIn, Exists, DoesNotExist, "
        "got 'Equals'",
        "job 2 (clientId 'c'): podSpec.topologySpreadConstraints[0].maxSkew: must be greater than zero, got 0",
        "job 3 (clientId 'd'): podSpec.schedulingGates: scheduling gates are not honoured: Flotilla binds the pod "
        "when it places the job, so there is nothing to gate",
        "job 3 (clientId 'd'): podSpec.priority: priority is set by the API server from priorityClassName: leave it out",
        "job 3 (clientId 'd'): podSpec.preemptionPolicy: preemptionPolicy is set by the API server from the priority "
        "class, and Flotilla's preemption follows priority classes: leave it out",
        "job 4 (clientId 'e'): podSpec.resourceClaims: resource claims (dynamic resource allocation) are not "
        "honoured by Flotilla's placement: request resources in containers' resources instead",
        "job 5 (clientId 'f'): podSpec.containers[1].ports[0].hostPort: hostPort 8080/TCP is also used by "
        "containers[0].ports[0].hostPort: a pod cannot bind one host port twice",
        "job 6 (clientId 'g'): podSpec.containers[0].resources.claims: resource claims (dynamic resource "
        "allocation) are not honoured by Flotilla's placement",
        "job 7 (clientId 'h'): podSpec.runtimeClassName: a RuntimeClass adds its overhead to the pod, which the "
        "placement must count: give the RuntimeClass's overhead in overhead too (the API server refuses one that "
        "differs)",
        "job 8 (clientId 'i'): podSpec.overhead: overhead without runtimeClassName: the API server refuses a pod "
        "whose overhead no RuntimeClass defines",
    ]


def test_host_ports_and_os_become_placement_requirements():
    web = job("w", hostNetwork=True, os={"name": "linux"})
    web["podSpec"]["containers"][0]["ports"] = [{"containerPort": 9000}, {"containerPort": 53, "protocol": "UDP"}]
    plain = job("p")
    plain["podSpec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080}, {"containerPort": 81}]
    _, (a, b) = prepare(job_file("A", "s", [web, plain]), settings())
    assert a.pods[0].host_ports == [["TCP", 9000, "0.0.0.0"], ["UDP", 53, "0.0.0.0"]]
    assert a.pods[0].node_selector == {"kubernetes.io/os": "linux"}
    assert b.pods[0].host_ports == [["TCP", 8080, "0.0.0.0"]] and b.pods[0].node_selector == {}
    assert pod_host_ports({"containers": [{"ports": [{"containerPort": 80, "hostPort": 8080}]}],
                           "initContainers": [{"restartPolicy": "Always", "ports": [{"containerPort": 1, "hostPort": 9}]},
                                              {"ports": [{"containerPort": 2, "hostPort": 10}]}]}) == \
        (("TCP", 9, "0.0.0.0"), ("TCP", 8080, "0.0.0.0"))


# -- host ports, per node ---------------------------------------------------------------------

NODES = """
clusters:
  - name: c1
    nodes:
      - {name: node-1, resources: {cpu: 32}}
      - {name: node-2, resources: {cpu: 32}}
      - {name: node-3, resources: {cpu: 32}}
"""


def test_jobs_binding_one_host_port_never_share_a_node(tmp_path):
    state = NODES + """
jobs:
  - {id: r-1, queue: A, requests: {cpu: 1}, state: running, node: node-1, hostPorts: [{port: 8080}]}
  - {id: q-1, queue: A, requests: {cpu: 1}, submitted: 1, hostPorts: [{port: 8080}]}
  - {id: q-2, queue: A, requests: {cpu: 1}, submitted: 2, hostPorts: [{port: 8080}]}
  - {id: q-3, queue: A, requests: {cpu: 1}, submitted: 3, hostPorts: [{port: 8080}]}
  - {id: u-1, queue: A, requests: {cpu: 1}, submitted: 4, hostPorts: [{port: 8080, protocol: UDP}]}
  - {id: n-1, queue: A, requests: {cpu: 1}, submitted: 5}
"""
    out = run_once(tmp_path, config(), state)
    # Best fit would stack every job on node-1; 8080/TCP is held there, then on node-2 and node-3 in turn.
    assert placements(out) == {"q-1": "node-2", "q-2": "node-3", "u-1": "node-1", "n-1": "node-1"}
    assert out["reasons"] == {
        "q-3": "0/3 nodes are available: 3 node(s) didn't have free ports for the requested pod ports"}


def test_preempting_for_a_host_port_takes_its_holder(tmp_path):
    state = """
clusters:
  - name: c1
    nodes:
      - {name: node-1, resources: {cpu: 32}}
jobs:
  - {id: low, queue: A, priorityClass: armada-preemptible, requests: {cpu: 1}, state: running, node: node-1,
     hostPorts: [{port: 8080}]}
  - {id: other, queue: A, priorityClass: armada-preemptible, requests: {cpu: 8}, state: running, node: node-1}
  - {id: urgent, queue: B, priorityClass: armada-default, requests: {cpu: 1}, submitted: 1, hostPorts: [{port: 8080}]}
"""
    out = run_once(tmp_path, config(extra="evict: {probability: 0}"), state)
    # The node has room; only the port is in the way: its holder goes, the larger job stays.
    assert placements(out) == {"urgent": "node-1"}
    assert out["preempted"] == ["low"]


def test_a_non_preemptible_holder_keeps_its_port(tmp_path):
    state = """
clusters:
  - name: c1
    nodes:
      - {name: node-1, resources: {cpu: 32}}
jobs:
  - {id: fixed, queue: A, priorityClass: armada-default, requests: {cpu: 1}, state: running, node: node-1,
     hostPorts: [{port: 8080}]}
  - {id: urgent, queue: B, priorityClass: armada-default, requests: {cpu: 1}, submitted: 1, hostPorts: [{port: 8080}]}
"""
    out = run_once(tmp_path, config(extra="evict: {probability: 0}"), state)
    assert placements(out) == {} and out["preempted"] == []
    assert out["reasons"] == {"urgent": "0/1 nodes are available: 1 node(s) didn't have free ports for the requested pod ports"}


def test_served_jobs_with_one_host_port_land_on_distinct_nodes_of_a_simulated_cluster(tmp_path):
    settings_, store, loop, clock = make(tmp_path, service_config())
    specs = []
    for k in range(5):
        spec = job(f"w{k}", cpu="1")
        spec["podSpec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080}]
        spec["annotations"] = {"flotilla.io/simulated-duration": "1h"}
        specs.append(spec)
    _, new = prepare(job_file("A", "s", specs), settings_)
    ids = [s.id for s in store.submit("A", "s", "alice", new, now=clock.now)]
    run_until(loop, clock, lambda: sum(store.get_job(i)["state"] == "running" for i in ids) == 4)
    nodes = sorted(store.get_job(i)["node"] for i in ids[:4])
    assert nodes == ["c1-node-1", "c1-node-2", "c2-node-1", "c2-node-2"]
    for _ in range(3):
        loop.run_cycle()
        clock.now += 1
    assert store.get_job(ids[4])["state"] == "queued"
    store.close()


# -- host ports as NodePorts keeps them apart: protocol, port and overlapping host IPs ---------------------

E2E_NODES = """
clusters:
  - name: c1
    nodes:
      - {name: node-1, resources: {cpu: 32}, labels: {e2e: "90"}}
      - {name: node-2, resources: {cpu: 32}}
"""


def test_same_host_port_on_different_host_ips_and_protocols_shares_a_node(tmp_path):
    # e2e: "validates that there is no conflict between pods with same hostPort but different hostIP and
    # protocol": 54321/TCP on 127.0.0.1, 54321/TCP on the node's IP, 54321/UDP on the node's IP, one node.
    state = E2E_NODES + """
jobs:
  - {id: pod1, queue: A, requests: {cpu: 1}, submitted: 1, nodeSelector: {e2e: "90"},
     hostPorts: [{port: 54321, protocol: TCP, hostIP: 127.0.0.1}]}
  - {id: pod2, queue: A, requests: {cpu: 1}, submitted: 2, nodeSelector: {e2e: "90"},
     hostPorts: [{port: 54321, protocol: TCP, hostIP: 172.18.0.2}]}
  - {id: pod3, queue: A, requests: {cpu: 1}, submitted: 3, nodeSelector: {e2e: "90"},
     hostPorts: [{port: 54321, protocol: UDP, hostIP: 172.18.0.2}]}
"""
    out = run_once(tmp_path, config(), state)
    assert placements(out) == {"pod1": "node-1", "pod2": "node-1", "pod3": "node-1"}
    assert out["reasons"] == {}


def test_a_host_port_on_0_0_0_0_conflicts_with_every_host_ip(tmp_path):
    # e2e: "validates that there exists conflict between pods with same hostPort and protocol but one using
    # 0.0.0.0 hostIP": pod4 binds 54322/TCP with no host IP (0.0.0.0), pod5 54322/TCP on the node's IP.
    state = E2E_NODES + """
jobs:
  - {id: pod4, queue: A, requests: {cpu: 1}, state: running, cluster: c1, node: node-1,
     nodeSelector: {e2e: "90"}, hostPorts: [{port: 54322, protocol: TCP}]}
  - {id: pod5, queue: A, requests: {cpu: 1}, submitted: 1, nodeSelector: {e2e: "90"},
     hostPorts: [{port: 54322, protocol: TCP, hostIP: 172.18.0.2}]}
  - {id: pod6, queue: A, requests: {cpu: 1}, submitted: 2, nodeSelector: {e2e: "90"},
     hostPorts: [{port: 54322, protocol: UDP, hostIP: 172.18.0.2}]}
"""
    out = run_once(tmp_path, config(), state)
    assert placements(out) == {"pod6": "node-1"}
    assert out["reasons"] == {"pod5": "0/2 nodes are available: 1 node(s) didn't have free ports for the requested "
                                      "pod ports, 1 node(s) didn't match Pod's node affinity/selector"}
    # The other way round: a specific IP held, 0.0.0.0 wanted.
    state = E2E_NODES + """
jobs:
  - {id: held, queue: A, requests: {cpu: 1}, state: running, cluster: c1, node: node-1,
     hostPorts: [{port: 54322, hostIP: 10.0.0.1}]}
  - {id: any, queue: A, requests: {cpu: 1}, submitted: 1, nodeSelector: {e2e: "90"}, hostPorts: [{port: 54322}]}
"""
    assert run_once(tmp_path, config(), state)["reasons"] == {
        "any": "0/2 nodes are available: 1 node(s) didn't have free ports for the requested pod ports, "
               "1 node(s) didn't match Pod's node affinity/selector"}


def test_host_ips_are_read_from_pods_and_job_specs():
    spec = {"containers": [{"ports": [{"containerPort": 80, "hostPort": 54321, "hostIP": "127.0.0.1"},
                                      {"containerPort": 81, "hostPort": 54321, "hostIP": ""},
                                      {"containerPort": 82, "hostPort": 54321, "protocol": "UDP"}]}]}
    assert pod_host_ports(spec) == (("TCP", 54321, "0.0.0.0"), ("TCP", 54321, "127.0.0.1"),
                                    ("UDP", 54321, "0.0.0.0"))
    # One pod may bind one port on two host IPs (the API server refuses only the same IP, protocol and port twice).
    web = job("w")
    web["podSpec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 54321, "hostIP": "127.0.0.1"},
                                                {"containerPort": 81, "hostPort": 54321, "hostIP": "10.0.0.1"}]
    _, (a,) = prepare(job_file("A", "s", [web]), settings())
    assert a.pods[0].host_ports == [["TCP", 54321, "10.0.0.1"], ["TCP", 54321, "127.0.0.1"]]


def test_foreign_pods_hold_their_host_ports():
    from flotilla.config import load_config
    from flotilla.core.model import ClusterSnapshot, Job, Node, Queue, Snapshot
    from flotilla.scheduler import Scheduler

    scheduler = Scheduler(load_config())
    nodes = [Node("node-1", "c1", {"cpu": 32000}), Node("node-2", "c1", {"cpu": 32000})]
    # Someone else's pod binds 8080/TCP on every address of node-1, and 9090/TCP on 10.0.0.1 of node-2.
    foreign_ports = {"node-1": (("TCP", 8080, "0.0.0.0"),), "node-2": (("TCP", 9090, "10.0.0.1"),)}
    queued = [Job("a", "A", requests={"cpu": 1000}, submitted=1.0, host_ports=(("TCP", 8080, "10.0.0.1"),)),
              Job("b", "A", requests={"cpu": 1000}, submitted=2.0, host_ports=(("TCP", 9090, "10.0.0.2"),)),
              Job("c", "A", requests={"cpu": 1000}, submitted=3.0, host_ports=(("TCP", 9090, "0.0.0.0"),))]
    snapshot = Snapshot([ClusterSnapshot("c1", nodes, [], {"node-1": {"cpu": 100, "pods": 1},
                                                           "node-2": {"cpu": 100, "pods": 1}},
                                        foreign_ports=foreign_ports)],
                        queued, [Queue("A")], scheduler.priority_classes(), "armada-default")
    decisions = scheduler.run_cycle(snapshot)
    # a: 8080 on node-1 is taken on every IP: node-2. b: 9090 on another IP of node-2 is free: best fit there.
    # c: 9090 on every IP conflicts with node-2's 10.0.0.1: node-1.
    assert sorted((p.job.id, p.node) for p in decisions.scheduled) == [("a", "node-2"), ("b", "node-2"),
                                                                        ("c", "node-1")]


# -- node affinity ----------------------------------------------------------------------------

AFFINITY_NODES = """
clusters:
  - name: c1
    nodes:
      - {name: n1, resources: {cpu: 32}, labels: {zone: a, gen: "3"}}
      - {name: n2, resources: {cpu: 32}, labels: {zone: b, gen: "5"}}
      - {name: n3, resources: {cpu: 32}, labels: {zone: c, gen: "10"}}
      - {name: n4, resources: {cpu: 32}, labels: {zone: a}}
      - {name: n5, resources: {cpu: 32}, labels: {zone: b, gen: abc}}
      - {name: n6, resources: {cpu: 32}}
jobs:
"""


def _required(*terms) -> str:
    import json
    return json.dumps({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": list(terms)}}})


def _expr(key, op, *values) -> dict:
    return {"key": key, "operator": op, **({"values": list(values)} if values else {})}


def _whole_nodes(tmp_path, affinity: str, copies: int = 6) -> tuple[set[str], dict]:
    """``copies`` jobs that each take a whole node, with ``affinity``: the nodes they got, and the reasons."""
    state = AFFINITY_NODES + "\n".join(f"  - {{id: j{k}, queue: A, requests: {{cpu: 32}}, submitted: {k}, "
                                       f"affinity: {affinity}}}" for k in range(copies))
    out = run_once(tmp_path, config(), state)
    nodes = set(placements(out).values())
    assert len(nodes) == len(placements(out))
    return nodes, out["reasons"]


@pytest.mark.parametrize("terms, expected", [
    ([{"matchExpressions": [_expr("zone", "In", "a", "c")]}], {"n1", "n3", "n4"}),
    ([{"matchExpressions": [_expr("zone", "NotIn", "a")]}], {"n2", "n3", "n5", "n6"}),
    ([{"matchExpressions": [_expr("gen", "Exists")]}], {"n1", "n2", "n3", "n5"}),
    ([{"matchExpressions": [_expr("gen", "DoesNotExist")]}], {"n4", "n6"}),
    ([{"matchExpressions": [_expr("gen", "Gt", "4")]}], {"n2", "n3"}),          # "abc" is no integer
    ([{"matchExpressions": [_expr("gen", "Lt", "5")]}], {"n1"}),
    ([{"matchExpressions": [_expr("zone", "In", "a", "b"), _expr("gen", "Exists")]}], {"n1", "n2", "n5"}),
    ([{"matchExpressions": [_expr("zone", "In", "b")]}, {"matchExpressions": [_expr("gen", "Lt", "4")]}],
     {"n1", "n2", "n5"}),
    ([{"matchFields": [_expr("metadata.name", "In", "n4")]}], {"n4"}),
    ([{"matchExpressions": [_expr("zone", "In", "a")], "matchFields": [_expr("metadata.name", "NotIn", "n4")]}],
     {"n1"}),
], ids=["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "and", "or", "fields-In", "fields-NotIn"])
def test_required_node_affinity_places_jobs_only_on_matching_nodes(tmp_path, terms, expected):
    nodes, reasons = _whole_nodes(tmp_path, _required(*terms))
    assert nodes == expected
    assert len(reasons) == 6 - len(expected)


@pytest.mark.parametrize("terms", [[{}], [{"matchExpressions": []}]], ids=["empty-term", "no-expressions"])
def test_a_term_with_nothing_matches_no_node(tmp_path, terms):
    nodes, reasons = _whole_nodes(tmp_path, _required(*terms), copies=1)
    assert nodes == set()
    assert reasons == {"j0": "0/6 nodes are available: 6 node(s) didn't match Pod's node affinity/selector"}


def test_an_empty_list_of_terms_is_refused_as_the_api_server_refuses_it(tmp_path):
    state = AFFINITY_NODES + f"  - {{id: j0, queue: A, requests: {{cpu: 32}}, affinity: {_required()}}}"
    result = invoke(tmp_path, config(), state)
    assert result.exit_code == 2
    assert result.stderr.endswith("jobs[0].affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution."
                                  "nodeSelectorTerms: must have at least one node selector term\n")


def test_preferred_node_affinity_orders_nodes_by_weight_within_the_required(tmp_path):
    import json
    preferred = [{"weight": 10, "preference": {"matchExpressions": [_expr("zone", "In", "c")]}},
                 {"weight": 20, "preference": {"matchExpressions": [_expr("gen", "Gt", "4")]}},
                 {"weight": 5, "preference": {"matchExpressions": [_expr("zone", "In", "b")]}}]
    affinity = json.dumps({"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": preferred}})
    both = json.dumps({"nodeAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": preferred,
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [_expr("zone", "In", "a", "b")]}]}}})
    # Scores: n3 30, n2 25, n5 5, others 0. Each job takes a whole node, so the order shows.
    state = AFFINITY_NODES + "\n".join(
        f"  - {{id: p{k}, queue: A, requests: {{cpu: 32}}, submitted: {k}, affinity: {affinity}}}" for k in range(4))
    out = run_once(tmp_path, config(), state)
    assert placements(out) == {"p0": "n3", "p1": "n2", "p2": "n5", "p3": "n1"}
    state = AFFINITY_NODES + "\n".join(
        f"  - {{id: p{k}, queue: A, requests: {{cpu: 32}}, submitted: {k}, affinity: {both}}}" for k in range(3))
    out = run_once(tmp_path, config(), state)
    assert placements(out) == {"p0": "n2", "p1": "n5", "p2": "n1"}


def test_node_affinity_mistakes_are_refused_at_submission_with_their_path(api):
    def with_affinity(client_id, node_affinity):
        return job(client_id, affinity={"nodeAffinity": node_affinity})
    required = "requiredDuringSchedulingIgnoredDuringExecution"
    texts = refused(api, job_file("A", "s", [
        with_affinity("a", {required: {"nodeSelectorTerms": [{"matchExpressions": [_expr("gen", "Gt", "x")]}]}}),
        with_affinity("b", {required: {"nodeSelectorTerms": [{"matchFields": [_expr("metadata.uid", "In", "u")]}]}}),
        with_affinity("c", {required: {"nodeSelectorTerms": [{"matchExpressions": [_expr("zone", "In")]}]}}),
        with_affinity("d", {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 0, "preference": {"matchExpressions": [_expr("zone", "Exists")]}}]}),
    ]))
    assert texts == [
        "job 0 (clientId 'a'): podSpec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution."
        "nodeSelectorTerms[0].matchExpressions[0].values: Gt takes exactly one integer value, got ['x']",
        "job 1 (clientId 'b'): podSpec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution."
        "nodeSelectorTerms[0].matchFields[0].key: the only field a node can be selected by is metadata.name, "
        "got 'metadata.uid'",
        "job 2 (clientId 'c'): podSpec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution."
        "nodeSelectorTerms[0].matchExpressions[0].values: In needs at least one value",
        "job 3 (clientId 'd'): podSpec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0]."
        "weight: expected a whole number from 1 to 100, got 0",
    ]


def test_served_jobs_with_required_node_affinity_run_only_where_it_matches(tmp_path):
    settings_, store, loop, clock = make(tmp_path, service_config())
    on_c2 = job("on-c2", cpu="1", affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["c2-node-2"]}]}]}}})
    nowhere = job("nowhere", cpu="1", affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}]}}})
    _, new = prepare(job_file("A", "s", [on_c2, nowhere]), settings_)
    ids = [s.id for s in store.submit("A", "s", "alice", new, now=clock.now)]
    run_until(loop, clock, lambda: store.get_job(ids[0])["state"] == "running")
    assert store.get_job(ids[0])["node"] == "c2-node-2"
    assert store.get_job(ids[1])["state"] == "queued"
    (pod,) = [pod for pod in loop.last_decisions.queued if pod.id == ids[1]]
    assert loop.last_decisions.explain(pod) == "0/4 nodes are available: 4 node(s) didn't match Pod's node affinity/selector"
    store.close()
