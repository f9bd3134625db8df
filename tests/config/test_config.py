"""Config and state loading: defaults, units, conversion to core objects, and where errors point.

Error strings are compared whole: the one line a user sees is the interface.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from flotilla.config import (
    DEFAULT_CONFIG_YAML,
    ConfigError,
    FlotillaConfig,
    SourceMap,
    expand_cluster,
    load_config,
    load_state,
    parse_config,
    parse_state,
)
from flotilla.core.model import Gang, JobState, Taint, Toleration

ROOT = Path(__file__).resolve().parents[2]


def config_error(text: str) -> str:
    with pytest.raises(ConfigError) as err:
        parse_config(text, "c.yaml")
    return str(err.value)


def state_error(text: str, config: FlotillaConfig | None = None) -> str:
    with pytest.raises(ConfigError) as err:
        parse_state(text, "s.yaml", config or load_config(None))
    return str(err.value)


# -- the scheduler config ---------------------------------------------------------------------------

def test_default_config_is_the_spec_example():
    cfg = load_config(None)
    assert cfg.action_names == ["evict", "allocate", "preempt", "lease"]
    assert [p.name for p in cfg.plugins] == ["assetfairness", "bestfit", "gang", "priorityclass", "predicates"]
    assert cfg.plugins[0].args == {"resourceWeights": {"cpu": 1, "nvidia.com/gpu": 1, "memory": 0}}
    assert [(pc.name, pc.priority, pc.preemptible) for pc in cfg.to_core_priority_classes()] == [
        ("armada-default", 30000, False), ("armada-preemptible", 20000, True)]
    assert cfg.default_priority_class == "armada-default"
    assert [(q.name, q.weight, dict(q.limits)) for q in cfg.to_core_queues()] == [("A", 1.0, {}), ("B", 1.0, {})]
    assert cfg.evict.probability == 1.0 and cfg.allocate.lookahead == 1000
    assert cfg.preempt.enabled and cfg.preempt.max_candidates == 1000
    assert cfg.lease.timeout == 60.0 and cfg.lease.max_retries == 3
    assert cfg.grace_period.default == 30.0 and cfg.grace_period.max == 300.0
    assert cfg.deadlines.cpu == 259200.0 and cfg.deadlines.gpu == 1209600.0
    assert cfg.cycle.period == 1.0
    assert cfg.store.url == "sqlite:///flotilla.db" and cfg.server.listen == "127.0.0.1:8080"
    assert cfg.auth.tokens == [] and cfg.auth.admin_groups == []
    assert cfg.node_index.indexed_resources == ["nvidia.com/gpu", "cpu", "memory"]


def test_default_config_expands_to_two_nodes():
    (sim,) = load_config(None).clusters
    snapshot = expand_cluster(sim)
    assert snapshot.name == "sim" and snapshot.running == []
    assert [(n.name, n.cluster, dict(n.resources)) for n in snapshot.nodes] == [
        ("node-1", "sim", {"cpu": 32000, "memory": 137438953472}),
        ("node-2", "sim", {"cpu": 32000, "memory": 137438953472}),
    ]


def test_model_defaults_match_the_default_yaml_apart_from_clusters_and_queues():
    from_yaml = load_config(None).model_dump()
    from_models = FlotillaConfig().model_dump()
    for key in ("clusters", "queues"):
        from_yaml.pop(key), from_models.pop(key)
    assert from_yaml == from_models


def test_example_config_file_equals_the_builtin_default():
    example = load_config(ROOT / "examples" / "flotilla.yaml")
    assert example.model_dump() == load_config(None).model_dump()


def test_full_config_with_camel_case_keys_and_units():
    cfg = parse_config("""
actions: [allocate, preempt]
priorityClasses: [{name: low, priority: 1, preemptible: true}]
defaultPriorityClass: low
queues: [{name: A, weight: 2, limits: {cpu: 0.5}, owners: [alice], groupOwners: [ml]}]
evict: {probability: 0.25}
preempt: {enabled: false, maxCandidates: 10}
lease: {timeout: 5m, maxRetries: 0}
gracePeriod: {default: 250ms, max: 2h}
deadlines: {cpu: 3d, gpu: 90}
clusters:
  - {name: k, kind: kubernetes, context: kwok-1}
server: {listen: "0.0.0.0:9000"}
auth:
  tokens:
    - {token: change-me, user: alice, groups: [ml]}
    - {sha256: 9f86d0, user: bob}
  adminGroups: [admins]
nodeIndex: {indexedResources: [cpu]}
""", "c.yaml")
    assert cfg.action_names == ["allocate", "preempt"]
    assert cfg.queues[0].limits == {"cpu": 0.5} and cfg.queues[0].group_owners == ["ml"]
    assert cfg.preempt.enabled is False and cfg.preempt.max_candidates == 10
    assert (cfg.lease.timeout, cfg.lease.max_retries) == (300.0, 0)
    assert (cfg.grace_period.default, cfg.grace_period.max) == (0.25, 7200.0)
    assert (cfg.deadlines.cpu, cfg.deadlines.gpu) == (259200.0, 90.0)
    (k,) = cfg.clusters
    assert (k.kind, k.kubeconfig, k.context) == ("kubernetes", "~/.kube/config", "kwok-1")
    assert [(t.user, t.token, t.sha256) for t in cfg.auth.tokens] == [("alice", "change-me", None),
                                                                       ("bob", None, "9f86d0")]
    assert cfg.auth.admin_groups == ["admins"] and cfg.node_index.indexed_resources == ["cpu"]
    assert cfg.simulated_snapshots() == []


def test_node_groups_number_on_across_groups_and_keep_taints():
    cfg = parse_config("""
clusters:
  - name: c
    kind: simulated
    nodes:
      - {count: 2, resources: {cpu: 500m}}
      - {count: 1, resources: {cpu: 2, nvidia.com/gpu: 4}, taints: [{key: gpu, effect: NoSchedule}], labels: {kind: gpu}}
      - {name: big, resources: {memory: 1Ti}, unschedulable: true}
      - {count: 2, namePrefix: gpu, resources: {nvidia.com/gpu: 8}}
""", "c.yaml")
    nodes = cfg.clusters[0].expand()
    assert [n.name for n in nodes] == ["node-1", "node-2", "node-3", "big", "gpu-1", "gpu-2"]
    assert nodes[0].resources == {"cpu": 500} and nodes[0].resources is not nodes[1].resources
    assert nodes[2].taints == (Taint("gpu", "", "NoSchedule"),) and nodes[2].labels == {"kubernetes.io/hostname": "node-3", "kind": "gpu"}
    assert nodes[3].resources == {"memory": 2**40} and nodes[3].unschedulable
    assert nodes[4].resources == {"nvidia.com/gpu": 8}


def test_source_reports_later_errors_at_their_line():
    cfg = parse_config("plugins:\n  - name: drf\n  - name: gang\n  - name: nosuch\n", "c.yaml")
    err = cfg.source.error(("plugins", 2, "name"), "unknown plugin 'nosuch'")
    assert (err.file, err.line, err.path, err.message) == ("c.yaml", 4, "plugins[2].name", "unknown plugin 'nosuch'")
    assert str(err) == "c.yaml:4: plugins[2].name: unknown plugin 'nosuch'"
    # A path below what the file spells out falls back to the nearest parent with a line.
    assert cfg.source.line_of(("plugins", 1, "args", "x")) == 3
    assert str(cfg.source.error(("actions",), "needs allocate")) == "c.yaml:1: actions: needs allocate"


def test_default_and_code_built_configs_still_name_the_place():
    assert str(load_config(None).source.error(("queues", 1), "x")) == "<built-in default>:15: queues[1]: x"
    assert str(FlotillaConfig().source.error(("plugins", 0, "name"), "x")) == "plugins[0].name: x"
    assert str(SourceMap("f.yaml").error((), "empty")) == "f.yaml: empty"


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_config(tmp_path / "nope.yaml")
    assert str(err.value) == f"{tmp_path / 'nope.yaml'}: no such file"


def test_empty_config_file_is_all_defaults(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("# nothing yet\n")
    assert load_config(path).model_dump() == FlotillaConfig().model_dump()


CLUSTER = "clusters:\n  - name: c\n    kind: simulated\n    nodes:\n"


@pytest.mark.parametrize("text, expected", [
    # unknown fields, with their line and what was meant
    ("evict:\n  probabilty: 0.5\n", "c.yaml:2: evict.probabilty: unknown field 'probabilty' (did you mean 'probability'?)"),
    (CLUSTER + "      - {count: 2, namePrefx: n, resources: {cpu: 1}}\n",
     "c.yaml:5: clusters[0].nodes[0].namePrefx: unknown field 'namePrefx' (did you mean 'namePrefix'?)"),
    ("store: {url: x}\nzz: 1\n", "c.yaml:2: zz: unknown field 'zz' (expected one of: actions, plugins, priorityClasses, "
                                 "defaultPriorityClass, clusterPriorityClasses, queues, placement, podTopologySpread, evict, allocate, preempt, lease, reservation, gracePeriod, deadlines, "
                                 "cycle, clusters, nodeTemplates, store, server, auth, nodeIndex, leaderElection)"),
    # quantities: malformed, negative, not whole in the base unit
    (CLUSTER + "      - count: 1\n        resources:\n          cpu: 1x\n",
     "c.yaml:7: clusters[0].nodes[0].resources.cpu: expected a quantity such as 500m, 2 or 64Mi, got '1x'"),
    (CLUSTER + "      - {resources: {cpu: -1}}\n",
     "c.yaml:5: clusters[0].nodes[0].resources.cpu: expected a non-negative quantity, got '-1'"),
    (CLUSTER + "      - {resources: {cpu: 1, memory: 0.5}}\n",
     "c.yaml:5: clusters[0].nodes[0].resources.memory: '0.5' is not a whole number of bytes for memory"),
    (CLUSTER + "      - {resources: {cpu: 0.0001}}\n",
     "c.yaml:5: clusters[0].nodes[0].resources.cpu: '0.0001' is not a whole number of millicores for cpu"),
    (CLUSTER + "      - {resources: 4}\n",
     "c.yaml:5: clusters[0].nodes[0].resources: expected a mapping of resource names to quantities, "
     "e.g. {cpu: 500m, memory: 1Gi}"),
    (CLUSTER + "      - {count: 2}\n", "c.yaml:5: clusters[0].nodes[0].resources: required field missing"),
    (CLUSTER + "      - {count: 0, resources: {cpu: 1}}\n",
     "c.yaml:5: clusters[0].nodes[0].count: Input should be greater than or equal to 1 (got 0)"),
    (CLUSTER + "      - {count: 2, name: big, resources: {cpu: 1}}\n",
     "c.yaml:5: clusters[0].nodes[0]: name is only allowed with count 1; use namePrefix for groups"),
    (CLUSTER + "      - {count: 2, resources: {cpu: 1}}\n      - {name: node-2, resources: {cpu: 1}}\n",
     "c.yaml:6: clusters[0].nodes[1].name: duplicate node name 'node-2' (first in clusters[0].nodes[0])"),
    (CLUSTER + "      - {resources: {cpu: 1}, taints: [{key: k, effect: Never}]}\n",
     "c.yaml:5: clusters[0].nodes[0].taints[0].effect: Input should be 'NoSchedule', 'PreferNoSchedule' or "
     "'NoExecute' (got 'Never')"),
    # clusters
    ("clusters:\n  - {name: x, kind: simulatd}\n",
     "c.yaml:2: clusters[0].kind: unknown cluster kind 'simulatd' (known: kubernetes, simulated); did you mean "
         "'simulated'?"),
    ("clusters:\n  - {name: x}\n", "c.yaml:2: clusters[0].kind: required field missing (one of: simulated, kubernetes)"),
    ("clusters:\n  - {name: x, kind: kubernetes, kubeconfig: k, nodes: []}\n",
     "c.yaml:2: clusters[0].nodes: unknown field 'nodes' (expected one of: name, kind, kubeconfig, context, "
     "inCluster, namespace, workers, bind, nodeSelector, stuckPodExpiry, nodeLostTimeout, volumeBindTimeout, "
     "finishedPodRetention, ingressDomain, schedulerName)"),
    ("clusters:\n  - {name: x, kind: kubernetes}\n  - {name: x, kind: simulated}\n",
     "c.yaml:3: clusters[1].name: duplicate cluster 'x' (first at clusters[0])"),
    # names that must exist or be unique
    ("priorityClasses: [{name: low, priority: 1}]\n",
     "c.yaml:1: defaultPriorityClass: unknown priority class 'armada-default' (known: low)"),
    ("defaultPriorityClass: urgent\n", "c.yaml:1: defaultPriorityClass: unknown priority class 'urgent' "
                                       "(known: armada-default, armada-preemptible)"),
    ("priorityClasses:\n  - {name: a, priority: 1}\n  - {name: a, priority: 2}\ndefaultPriorityClass: a\n",
     "c.yaml:3: priorityClasses[1].name: duplicate priority class 'a' (first at priorityClasses[0])"),
    ("queues: [{name: A}, {name: A}]\n", "c.yaml:1: queues[1].name: duplicate queue 'A' (first at queues[0])"),
    ("plugins:\n  - name: gang\n  - name: gang\n", "c.yaml:3: plugins[1].name: duplicate plugin 'gang' (first at plugins[0])"),
    ("actions: [evict, allocat]\n", "c.yaml:1: actions[1]: unknown action 'allocat' (known: enqueue, evict, reserve, allocate, preempt, lease)"),
    ("actions:\n  - allocate\n  - allocate\n", "c.yaml:3: actions[1]: duplicate action 'allocate' (first at actions[0])"),
    # the earliest problem in the file wins, whatever the check order
    ("queues: [{name: A}, {name: A}]\ndefaultPriorityClass: nope\n",
     "c.yaml:1: queues[1].name: duplicate queue 'A' (first at queues[0])"),
    ("clusters:\n  - kind: simulated\n    nodes:\n      - {resources: {cpu: 1x}}\n    name: 5\n",
     "c.yaml:4: clusters[0].nodes[0].resources.cpu: expected a quantity such as 500m, 2 or 64Mi, got '1x'"),
    # values
    ("lease: {timeout: soon}\n", "c.yaml:1: lease.timeout: expected a duration such as 30s, 5m, 2h, 3d or seconds, "
                                 "got 'soon'"),
    ("queues: [{name: A, limits: {cpu: 2}}]\n",
     "c.yaml:1: queues[0].limits.cpu: expected a fraction of the pool in (0, 1], got 2"),
    ("queues: [{name: A, weight: 0}]\n", "c.yaml:1: queues[0].weight: Input should be greater than 0 (got 0)"),
    ("queues: [{weight: 2}]\n", "c.yaml:1: queues[0].name: required field missing"),
    ("evict: {probability: 1.5}\n", "c.yaml:1: evict.probability: Input should be less than or equal to 1 (got 1.5)"),
    ("auth:\n  tokens:\n    - {token: t, sha256: abc, user: u}\n",
     "c.yaml:3: auth.tokens[0]: give exactly one of token or sha256"),
    # YAML itself
    ("queues:\n  - name: 'A\n", "c.yaml:3: invalid YAML: found unexpected end of stream "
                                "(while scanning a quoted scalar that starts on line 2)"),
    ("evict: {probability: 1}\nevict: {probability: 0}\n", "c.yaml:2: invalid YAML: duplicate key 'evict'"),
    ("queues: []\n---\nqueues: []\n",
     "c.yaml:2: invalid YAML: expected a single document in the stream, but found another document"),
    ("- a\n- b\n", "c.yaml:1: expected a mapping of fields at the top of the file, got a list"),
])
def test_config_errors_name_line_path_and_expectation(text, expected):
    assert config_error(text) == expected


def test_yaml_syntax_error_names_the_line_where_it_was_found():
    # libyaml and the pure-Python parser word this differently; the place is the same.
    assert config_error("queues:\n  - {name: A\n  - {name: B}\n").startswith("c.yaml:3: invalid YAML: ")


def test_config_error_parts():
    with pytest.raises(ConfigError) as err:
        parse_config("cycle:\n  period: often\n", "c.yaml")
    assert (err.value.file, err.value.line, err.value.path) == ("c.yaml", 2, "cycle.period")
    assert err.value.message == "expected a duration such as 30s, 5m, 2h, 3d or seconds, got 'often'"


def test_builtin_default_yaml_is_valid_and_named():
    assert "kind: simulated" in DEFAULT_CONFIG_YAML
    with pytest.raises(ConfigError) as err:
        parse_config(DEFAULT_CONFIG_YAML + "bogus: 1\n", "<built-in default>")
    assert str(err.value).startswith("<built-in default>:")


# -- the schedule-once state file ---------------------------------------------------------------------

STATE = """\
clusters:
  - name: c1
    nodes:
      - {name: node-1, resources: {cpu: 32, memory: 128Gi}, labels: {zone: a}, taints: [{key: gpu}]}
      - {name: node-2, resources: {cpu: 32, memory: 128Gi}, unschedulable: true}
jobs:
  - {id: a-1, queue: A, jobSet: s1, priorityClass: armada-preemptible, requests: {cpu: 1}, submitted: 1,
     state: running, cluster: c1, node: node-1}
  - {id: a-2, queue: A, requests: {cpu: 1}, state: running, node: node-2}
  - id: b-1
    queue: B
    priority: 3
    requests: {cpu: 1}
    gang: {id: g1, cardinality: 2}
    nodeSelector: {zone: a}
    tolerations: [{key: gpu, operator: Exists}]
    annotations: {note: x}
  - {id: b-2, queue: B, requests: {cpu: 1000m}, gang: {id: g1, cardinality: 2}}
"""


def test_state_converts_to_core_objects():
    snapshot = parse_state(STATE, "s.yaml", load_config(None))
    (c1,) = snapshot.clusters
    assert [(n.name, n.cluster, dict(n.resources), dict(n.labels), n.taints, n.unschedulable) for n in c1.nodes] == [
        ("node-1", "c1", {"cpu": 32000, "memory": 2**37}, {"kubernetes.io/hostname": "node-1", "zone": "a"},
         (Taint("gpu"),), False),
        ("node-2", "c1", {"cpu": 32000, "memory": 2**37}, {"kubernetes.io/hostname": "node-2"}, (), True),
    ]
    assert [(j.id, j.state, j.cluster, j.node, j.priority_class) for j in c1.running] == [
        ("a-1", JobState.RUNNING, "c1", "node-1", "armada-preemptible"),
        ("a-2", JobState.RUNNING, "c1", "node-2", "armada-default"),  # the only cluster, the default class
    ]
    b1, b2 = snapshot.queued
    assert (b1.id, b1.queue, b1.priority, b1.state, b1.cluster, b1.node) == ("b-1", "B", 3, JobState.QUEUED, None, None)
    assert b1.gang == Gang("g1", 2) and b1.node_selector == {"zone": "a"} and b1.annotations == {"note": "x"}
    assert b1.tolerations == (Toleration("gpu", "Exists"),)
    # Identical requests (1 and 1000m alike) share one mapping.
    assert b1.requests == {"cpu": 1000} and b1.requests is b2.requests is c1.running[0].requests
    assert [q.name for q in snapshot.queues] == ["A", "B"]
    assert [pc.name for pc in snapshot.priority_classes] == ["armada-default", "armada-preemptible"]
    assert snapshot.default_priority_class == "armada-default"


def test_state_without_clusters_uses_the_configs_simulated_clusters(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("jobs:\n  - {id: a, queue: A, requests: {cpu: 2}, state: running, node: node-2}\n")
    snapshot = load_state(path, load_config(None))
    (sim,) = snapshot.clusters
    assert [n.name for n in sim.nodes] == ["node-1", "node-2"]
    assert [(j.id, j.cluster, j.node) for j in sim.running] == [("a", "sim", "node-2")]
    assert snapshot.queued == []


def test_state_queues_add_to_and_override_the_configs():
    snapshot = parse_state("queues: [{name: B, weight: 3}, {name: C, limits: {cpu: 0.5}}]\n"
                           "jobs: [{id: c, queue: C}]\n", "s.yaml", load_config(None))
    assert [(q.name, q.weight, dict(q.limits)) for q in snapshot.queues] == [
        ("A", 1.0, {}), ("B", 3.0, {}), ("C", 1.0, {"cpu": 0.5})]


def test_state_times_accept_rfc3339_and_seconds():
    snapshot = parse_state("jobs:\n"
                           "  - {id: a, queue: A, submitted: '2026-01-01T00:00:10Z'}\n"
                           "  - {id: b, queue: A, submitted: 12.5}\n"
                           "  - {id: c, queue: A, submitted: '2026-01-01T01:00:10+01:00'}\n"
                           "  - {id: d, queue: A, submitted: 2026-01-01T00:00:10Z}\n"
                           "  - {id: e, queue: A, submitted: '7'}\n", "s.yaml", load_config(None))
    assert [j.submitted for j in snapshot.queued] == [1767225610.0, 12.5, 1767225610.0, 1767225610.0, 7.0]
    assert [j.priority_class for j in snapshot.queued] == ["armada-default"] * 5


def test_durations_parse_to_seconds():
    cfg = parse_config("deadlines: {cpu: 3d, gpu: 2h}\nlease: {timeout: 30}\ncycle: {period: 250ms}\n", "c.yaml")
    assert (cfg.deadlines.cpu, cfg.deadlines.gpu, cfg.lease.timeout, cfg.cycle.period) == (259200.0, 7200.0, 30.0, 0.25)


TWO_NODES = "clusters:\n  - name: c1\n    nodes:\n      - {name: node-1, resources: {cpu: 4}}\n"


@pytest.mark.parametrize("text, expected", [
    ("jobs:\n  - {id: a, queue: A}\n  - {id: b, queue: A, priorityClass: x}\n",
     "s.yaml:3: jobs[1].priorityClass: unknown priority class 'x' (known: armada-default, armada-preemptible)"),
    ("jobs:\n  - {id: a-1, queue: A}\n  - {id: a-2, queue: A}\n  - {id: a-1, queue: B}\n",
     "s.yaml:4: jobs[2].id: duplicate job id 'a-1' (first at jobs[0])"),
    ("jobs:\n  - {id: a, queue: Z}\n", "s.yaml:2: jobs[0].queue: unknown queue 'Z' (known: A, B)"),
    (TWO_NODES + "jobs:\n  - {id: a, queue: A, state: running, cluster: c1, node: node-9}\n",
     "s.yaml:6: jobs[0].node: running job on unknown node 'node-9' in cluster 'c1'"),
    (TWO_NODES + "jobs:\n  - {id: a, queue: A, state: running, cluster: c2, node: node-1}\n",
     "s.yaml:6: jobs[0].cluster: running job on unknown cluster 'c2' (known: c1)"),
    (TWO_NODES + "jobs:\n  - {id: a, queue: A, state: running}\n",
     "s.yaml:6: jobs[0].node: a running job needs node: the node it runs on"),
    (TWO_NODES + "  - name: c2\n    nodes: []\njobs:\n  - {id: a, queue: A, state: running, node: node-1}\n",
     "s.yaml:8: jobs[0].cluster: a running job needs cluster: when there is not exactly one (known: c1, c2)"),
    ("jobs:\n  - {id: a, queue: A, node: node-1}\n",
     "s.yaml:2: jobs[0].node: a queued job has no node or cluster yet (set state: running)"),
    ("jobs:\n  - {id: a, queue: A, state: done}\n",
     "s.yaml:2: jobs[0].state: Input should be 'queued' or 'running' (got 'done')"),
    ("jobs:\n  - {id: a, queue: A, requests: {cpu: -1}}\n",
     "s.yaml:2: jobs[0].requests.cpu: expected a non-negative quantity, got '-1'"),
    ("jobs:\n  - {id: a, queue: A, submitted: yesterday}\n",
     "s.yaml:2: jobs[0].submitted: expected seconds or an RFC 3339 time such as 2026-01-01T00:00:00Z, "
     "got 'yesterday'"),
    ("jobs:\n  - {id: a, queue: A, jobset: s}\n", "s.yaml:2: jobs[0].jobset: unknown field 'jobset' (did you mean 'jobSet'?)"),
    ("jobs:\n  - {queue: A}\n", "s.yaml:2: jobs[0].id: required field missing"),
    # gangs
    ("jobs:\n" + "".join(f"  - {{id: g-{i}, queue: A, gang: {{id: g1, cardinality: 4}}}}\n" for i in range(3)),
     "s.yaml:4: jobs[2].gang.cardinality: gang 'g1' has cardinality 4 but 3 jobs"),
    ("jobs:\n  - {id: a, queue: A, gang: {id: g1, cardinality: 2}}\n  - {id: b, queue: A, gang: {id: g1, cardinality: 3}}\n",
     "s.yaml:3: jobs[1].gang.cardinality: gang 'g1' members disagree on cardinality: 3 here, 2 at jobs[0]"),
    ("jobs:\n  - {id: a, queue: A, gang: {id: g1, cardinality: 2}}\n  - {id: b, queue: B, gang: {id: g1, cardinality: 2}}\n",
     "s.yaml:3: jobs[1].queue: gang 'g1' members must share one queue: 'B' here, 'A' at jobs[0]"),
    ("jobs:\n  - {id: a, queue: A, gang: {id: g1, cardinality: 0}}\n",
     "s.yaml:2: jobs[0].gang.cardinality: Input should be greater than or equal to 1 (got 0)"),
    # clusters and nodes
    (TWO_NODES + "      - {name: node-1, resources: {cpu: 4}}\n",
     "s.yaml:5: clusters[0].nodes[1].name: duplicate node name 'node-1' in cluster 'c1' (first at clusters[0].nodes[0])"),
    (TWO_NODES + "  - name: c1\n    nodes: []\n", "s.yaml:5: clusters[1].name: duplicate cluster name 'c1' (first at clusters[0])"),
    ("clusters:\n  - name: c1\n    nodes:\n      - {name: n, resources: {memory: 1.5}}\n",
     "s.yaml:4: clusters[0].nodes[0].resources.memory: '1.5' is not a whole number of bytes for memory"),
    ("queues: [{name: Q}, {name: Q}]\n", "s.yaml:1: queues[1].name: duplicate queue 'Q' (first at queues[0])"),
    # the earliest problem in the file wins: the lone gang member (jobs[0]) before the unknown queue (jobs[1])
    ("jobs:\n  - {id: a, queue: A, gang: {id: g1, cardinality: 2}}\n  - {id: b, queue: Z}\n",
     "s.yaml:2: jobs[0].gang.cardinality: gang 'g1' has cardinality 2 but 1 job"),
])
def test_state_errors_name_line_path_and_expectation(text, expected):
    assert state_error(text) == expected


def test_missing_state_file(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_state(tmp_path / "nope.yaml", load_config(None))
    assert str(err.value) == f"{tmp_path / 'nope.yaml'}: no such file"
