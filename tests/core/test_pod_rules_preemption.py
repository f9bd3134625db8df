"""Preemption that satisfies pod rules, as kube-scheduler's DefaultPreemption dry run does: every eligible
lower-priority pod taken off, then given back most important first while the preemptor still fits and its
topology spread and inter-pod (anti-)affinity still allow the node (simulated clusters, schedule-once)."""

from __future__ import annotations

from tests.support.scenario import placements, run_once
from tests.support.actions import LOW

KEY = "kubernetes.io/e2e-pts-preemption"
FAKE = "example.com/fakePTSRes"


def two_nodes(fake: int = 10, cpu: int = 32) -> str:
    return f"""clusters:
  - name: c1
    nodes:
      - {{name: node-1, resources: {{cpu: {cpu}, {FAKE}: {fake}}}, labels: {{kubernetes.io/hostname: node-1, {KEY}: node-1}}}}
      - {{name: node-2, resources: {{cpu: {cpu}, {FAKE}: {fake}}}, labels: {{kubernetes.io/hostname: node-2, {KEY}: node-2}}}}
jobs:
"""


SPREAD = (f"topologySpreadConstraints: [{{maxSkew: 1, topologyKey: {KEY}, whenUnsatisfiable: DoNotSchedule, "
          "labelSelector: {matchExpressions: [{key: e2e-pts-preemption, operator: Exists}]}}]")


def running(name: str, node: str, pc: str, fake: int, extra: str = "") -> str:
    return (f"  - {{id: {name}, queue: A, priorityClass: {pc}, requests: {{cpu: 1, {FAKE}: {fake}}}, "
            f"state: running, node: {node}, labels: {{e2e-pts-preemption: ''}}{extra}}}\n")


def test_e2e_pod_topology_spread_preemption_takes_the_two_low_pods_the_skew_needs(tmp_path):
    # The e2e spec "PodTopologySpread Preemption validates proper pods are preempted": node-1 holds high (9 of
    # 10), node-2 three low pods of 3. medium (3) fits on node-2 once one low pod goes, but then node-2 holds
    # three of the selected pods against node-1's one (skew 2): a second low pod must go. high stays.
    state = two_nodes() + running("high", "node-1", "armada-default", 9) + "".join(
        running(f"low-{k}", "node-2", "armada-low", 3) for k in (1, 2, 3)) + \
        f"  - {{id: medium, queue: B, priorityClass: armada-preemptible, requests: {{cpu: 1, {FAKE}: 3}}, " \
        f"submitted: 9, labels: {{e2e-pts-preemption: ''}}, {SPREAD}}}\n"
    out = run_once(tmp_path, LOW, state)
    assert placements(out) == {"medium": "node-2"}
    assert out["preempted"] == ["low-1", "low-2"]


def test_without_the_spread_constraint_one_low_pod_is_enough(tmp_path):
    state = two_nodes() + running("high", "node-1", "armada-default", 9) + "".join(
        running(f"low-{k}", "node-2", "armada-low", 3) for k in (1, 2, 3)) + \
        f"  - {{id: medium, queue: B, priorityClass: armada-preemptible, requests: {{cpu: 1, {FAKE}: 3}}, " \
        f"submitted: 9, labels: {{e2e-pts-preemption: ''}}}}\n"
    out = run_once(tmp_path, LOW, state)
    assert placements(out) == {"medium": "node-2"}
    assert out["preempted"] == ["low-1"]


ANTI_WEB = ("affinity: {podAntiAffinity: {requiredDuringSchedulingIgnoredDuringExecution: "
            "[{labelSelector: {matchLabels: {app: web}}, topologyKey: kubernetes.io/hostname}]}}")


def test_required_anti_affinity_preempts_the_lower_pod_it_selects_and_nothing_else(tmp_path):
    # node-1 has room but holds a low web pod; node-2 is full of a pod that may not be preempted. The new web
    # pod's anti-affinity is satisfied by taking the low web pod off node-1; the low pod of another app stays.
    state = two_nodes() + \
        f"  - {{id: old-web, queue: A, priorityClass: armada-low, requests: {{cpu: 1}}, state: running, " \
        f"node: node-1, labels: {{app: web}}}}\n" \
        f"  - {{id: batch, queue: A, priorityClass: armada-low, requests: {{cpu: 1}}, state: running, " \
        f"node: node-1, labels: {{app: batch}}}}\n" \
        f"  - {{id: full, queue: A, requests: {{cpu: 32}}, state: running, node: node-2}}\n" \
        f"  - {{id: new-web, queue: B, priorityClass: armada-preemptible, requests: {{cpu: 1}}, submitted: 9, " \
        f"labels: {{app: web}}, {ANTI_WEB}}}\n"
    out = run_once(tmp_path, LOW, state)
    assert placements(out) == {"new-web": "node-1"}
    assert out["preempted"] == ["old-web"]


def test_a_running_pods_anti_affinity_is_lifted_by_preempting_it(tmp_path):
    # The low pod on node-1 keeps web pods off its node; the web pod (no rules of its own) preempts it.
    state = two_nodes() + \
        f"  - {{id: loner, queue: A, priorityClass: armada-low, requests: {{cpu: 1}}, state: running, " \
        f"node: node-1, labels: {{app: loner}}, {ANTI_WEB}}}\n" \
        f"  - {{id: batch, queue: A, priorityClass: armada-low, requests: {{cpu: 1}}, state: running, " \
        f"node: node-1, labels: {{app: batch}}}}\n" \
        f"  - {{id: full, queue: A, requests: {{cpu: 32}}, state: running, node: node-2}}\n" \
        f"  - {{id: web, queue: B, priorityClass: armada-preemptible, requests: {{cpu: 1}}, submitted: 9, " \
        f"labels: {{app: web}}}}\n"
    out = run_once(tmp_path, LOW, state)
    assert placements(out) == {"web": "node-1"}
    assert out["preempted"] == ["loner"]


AFFINE_CACHE = ("affinity: {podAffinity: {requiredDuringSchedulingIgnoredDuringExecution: "
                "[{labelSelector: {matchLabels: {app: cache}}, topologyKey: kubernetes.io/hostname}]}}")


def test_a_node_whose_affine_pods_could_all_be_preempted_is_not_tried(tmp_path):
    # node-1: a low cache pod (4 cores) and a low batch pod (28); the web pod needs 20 cores next to a cache
    # pod. kube-scheduler takes every lower-priority pod off before it first checks a node, so the affinity
    # is unmet there and the node is no candidate ("Inter-Pod affinity on lower-priority Pods" in Kubernetes'
    # pod priority and preemption docs): nothing is preempted.
    state = two_nodes() + \
        f"  - {{id: cache, queue: A, priorityClass: armada-low, requests: {{cpu: 4}}, state: running, " \
        f"node: node-1, labels: {{app: cache}}}}\n" \
        f"  - {{id: batch, queue: A, priorityClass: armada-low, requests: {{cpu: 28}}, state: running, " \
        f"node: node-1, labels: {{app: batch}}}}\n" \
        f"  - {{id: full, queue: A, requests: {{cpu: 32}}, state: running, node: node-2}}\n" \
        f"  - {{id: web, queue: B, priorityClass: armada-preemptible, requests: {{cpu: 20}}, submitted: 9, " \
        f"labels: {{app: web}}, {AFFINE_CACHE}}}\n"
    out = run_once(tmp_path, LOW, state)
    assert placements(out) == {}
    assert out["preempted"] == []
    assert out["reasons"]["web"] == "0/2 nodes are available: 2 Insufficient cpu"
    # A cache pod the web pod may not preempt (a class above its own) keeps the affinity met: batch goes.
    out = run_once(tmp_path, LOW, state.replace("{id: cache, queue: A, priorityClass: armada-low",
                                                 "{id: cache, queue: A, priorityClass: armada-default"))
    assert placements(out) == {"web": "node-1"}
    assert out["preempted"] == ["batch"]


def test_a_selected_pod_the_skew_allows_is_given_back(tmp_path):
    # Zones a (node-1, full) and b (node-2) each hold one selected low pod; node-2 also a big low batch pod.
    # The new pod (spread over zones, maxSkew 1) needs room on node-2: with both low pods there taken off it
    # fits; the selected one is given back first (zone b 2 against a's 1: skew 1), then the batch pod is not
    # (6 cores free, 10 wanted): only the batch pod goes.
    zone = "topology.kubernetes.io/zone"
    state = f"""clusters:
  - name: c1
    nodes:
      - {{name: node-1, resources: {{cpu: 4}}, labels: {{kubernetes.io/hostname: node-1, {zone}: a}}}}
      - {{name: node-2, resources: {{cpu: 32}}, labels: {{kubernetes.io/hostname: node-2, {zone}: b}}}}
jobs:
  - {{id: full-a, queue: A, requests: {{cpu: 3}}, state: running, node: node-1}}
  - {{id: sel-a, queue: A, priorityClass: armada-low, requests: {{cpu: 1}}, state: running, node: node-1,
     labels: {{app: web}}}}
  - {{id: sel-b, queue: A, priorityClass: armada-low, requests: {{cpu: 2}}, state: running, node: node-2,
     labels: {{app: web}}}}
  - {{id: batch, queue: A, priorityClass: armada-low, requests: {{cpu: 24}}, state: running, node: node-2}}
  - {{id: new, queue: B, priorityClass: armada-preemptible, requests: {{cpu: 10}}, submitted: 9,
     labels: {{app: web}}, topologySpreadConstraints: [{{maxSkew: 1, topologyKey: {zone},
     whenUnsatisfiable: DoNotSchedule, labelSelector: {{matchLabels: {{app: web}}}}}}]}}
"""
    out = run_once(tmp_path, LOW, state)
    assert placements(out) == {"new": "node-2"}
    assert out["preempted"] == ["batch"]
