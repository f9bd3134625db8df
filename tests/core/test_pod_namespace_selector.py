"""Pod affinity terms' ``namespaceSelector``: namespaces chosen by their labels, as kube-scheduler's
InterPodAffinity reads them (the term's ``namespaces`` and the namespaces its selector matches; ``{}`` every
namespace; a namespace's labels as its Namespace object has them, ``kubernetes.io/metadata.name`` always)."""

from __future__ import annotations

import random

import pytest

from flotilla.core.nodeaffinity import AffinityError
from flotilla.core.podrules import parse_pod_rules
from tests.support.scenario import config, invoke, placements, run_once

NODES = """clusters:
  - name: c1
    nodes:
      - {name: node-1, resources: {cpu: 32}}
      - {name: node-2, resources: {cpu: 32}}
      - {name: node-3, resources: {cpu: 32}}
    namespaces:
      - {name: team-a, labels: {tier: gold}}
      - {name: team-b, labels: {tier: silver}}
jobs:
  - {id: db-b, queue: A, requests: {cpu: 1}, state: running, node: node-1, namespace: team-b, labels: {app: db}}
  - {id: db-c, queue: A, requests: {cpu: 1}, state: running, node: node-2, namespace: team-c, labels: {app: db}}
"""


def near_db(name: str, selector: str, namespaces: str = "", kind: str = "podAffinity", submitted: int = 1) -> str:
    extra = f", namespaces: [{namespaces}]" if namespaces else ""
    return (f"  - {{id: {name}, queue: A, requests: {{cpu: 1}}, submitted: {submitted}, namespace: team-a, "
            f"affinity: {{{kind}: {{requiredDuringSchedulingIgnoredDuringExecution: [{{labelSelector: "
            f"{{matchLabels: {{app: db}}}}, topologyKey: kubernetes.io/hostname, namespaceSelector: {selector}"
            f"{extra}}}]}}}}}}\n")


def test_affinity_counts_the_pods_of_the_namespaces_its_selector_matches(tmp_path):
    state = NODES + near_db("silver", "{matchLabels: {tier: silver}}", submitted=1) + \
        near_db("by-name", "{matchExpressions: [{key: kubernetes.io/metadata.name, operator: In, values: [team-c]}]}",
                submitted=2) + \
        near_db("bronze", "{matchLabels: {tier: bronze}}", submitted=3)
    out = run_once(tmp_path, config(), state)
    # team-b is silver: node-1; team-c (no Namespace listed) has only its name label: node-2; no namespace is
    # bronze: no pod is selected, and the pod (not app=db itself) waits.
    assert placements(out) == {"silver": "node-1", "by-name": "node-2"}
    assert out["reasons"] == {"bronze": "0/3 nodes are available: 3 node(s) didn't match pod affinity rules"}


def test_listed_namespaces_and_selected_ones_both_count(tmp_path):
    # Anti-affinity to db pods in team-c (listed) and in silver namespaces (team-b): node-1 and node-2 are out.
    state = NODES + near_db("away", "{matchLabels: {tier: silver}}", namespaces="team-c", kind="podAntiAffinity")
    out = run_once(tmp_path, config(), state)
    assert placements(out) == {"away": "node-3"}
    # The empty selector is every namespace: the same.
    out = run_once(tmp_path, config(), NODES + near_db("away", "{}", kind="podAntiAffinity"))
    assert placements(out) == {"away": "node-3"}


def test_a_running_pods_anti_affinity_selects_by_the_incoming_pods_namespace_labels(tmp_path):
    state = NODES.split("jobs:\n")[0] + """jobs:
  - {id: loner, queue: A, requests: {cpu: 1}, state: running, node: node-1, namespace: team-c,
     affinity: {podAntiAffinity: {requiredDuringSchedulingIgnoredDuringExecution: [{labelSelector: {matchLabels:
       {app: web}}, topologyKey: kubernetes.io/hostname, namespaceSelector: {matchLabels: {tier: gold}}}]}}}
  - {id: web-gold, queue: A, requests: {cpu: 1}, submitted: 1, namespace: team-a, labels: {app: web}}
  - {id: web-silver, queue: A, requests: {cpu: 1}, submitted: 2, namespace: team-b, labels: {app: web}}
"""
    out = run_once(tmp_path, config(), state)
    # Best fit would stack both on node-1, beside the loner: team-a is gold and is kept off it, team-b is not.
    assert placements(out) == {"web-gold": "node-2", "web-silver": "node-1"}


def test_a_malformed_namespace_selector_is_refused_with_its_path(tmp_path):
    with pytest.raises(AffinityError) as caught:
        parse_pod_rules({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname",
             "namespaceSelector": {"matchExpressions": [{"key": "tier", "operator": "Equals", "values": ["x"]}]}}]}},
            None, "team-a", {})
    assert str(caught.value) == ("affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]."
                                 "namespaceSelector.matchExpressions[0].operator: expected one of In, NotIn, Exists, "
                                 "DoesNotExist, got 'Equals'")
    state = NODES.replace("{name: team-b, labels: {tier: silver}}", "{name: team-b, labels: {tier: 'a b'}}")
    result = invoke(tmp_path, config(), state)
    assert result.exit_code != 0
    assert "clusters[0].namespaces[1].labels.tier" in result.output and "invalid label value 'a b'" in result.output


def test_counts_follow_a_namespaces_labels_from_one_cycle_to_the_next():
    from flotilla.config import load_config
    from flotilla.core.model import ClusterSnapshot, ForeignPod, Job, Node, Queue, Snapshot
    from flotilla.scheduler import Scheduler

    scheduler = Scheduler(load_config(None))
    nodes = [Node(f"node-{k}", "c1", {"cpu": 32000}, {"kubernetes.io/hostname": f"node-{k}"}) for k in (1, 2)]
    db = (ForeignPod("team-b/db", "team-b", {"app": "db"}),)
    rules = parse_pod_rules({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname",
         "namespaceSelector": {"matchLabels": {"tier": "silver"}}}]}}, None, "team-a", {})

    def place(tier: str, k: int) -> dict[str, str]:
        job = Job(f"away-{k}", "A", "s", 0, "armada-preemptible", float(k), {"cpu": 1000}, namespace="team-a",
                  pod_rules=rules)
        labels = {"team-b": {"kubernetes.io/metadata.name": "team-b", "tier": tier}}
        snapshot = Snapshot([ClusterSnapshot("c1", nodes, foreign_pods={"node-1": db}, namespace_labels=labels)],
                            [job], [Queue("A")], scheduler.priority_classes(), "armada-default")
        decisions = scheduler.run_cycle(snapshot, random.Random(0),
                                        actions=[a for a in scheduler.actions if a.name != "lease"])
        return {p.job.id: p.node for p in decisions.scheduled}

    # The cycle state (and its counts) is kept between cycles; the namespace's label decides each time.
    assert place("silver", 1) == {"away-1": "node-2"}
    assert place("gold", 2) == {"away-2": "node-1"}
    assert place("silver", 3) == {"away-3": "node-2"}
