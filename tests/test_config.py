"""Config and state loading: defaults, units, and where errors point."""

from __future__ import annotations

import pytest

from flotilla.config import ConfigError, load_config, load_state, parse_config


def test_default_config_is_the_spec_example():
    cfg = load_config(None)
    assert cfg.actions == ["evict", "allocate", "preempt", "lease"]
    assert [p.name for p in cfg.plugins] == ["assetfairness", "bestfit", "gang", "priorityclass", "predicates"]
    assert cfg.plugins[0].args == {"resourceWeights": {"cpu": 1, "nvidia.com/gpu": 1, "memory": 0}}
    assert [(q.name, q.weight) for q in cfg.queues] == [("A", 1.0), ("B", 1.0)]
    assert cfg.lease.timeout == 60.0 and cfg.lease.max_retries == 3
    assert cfg.deadlines.cpu == 259200.0 and cfg.deadlines.gpu == 1209600.0
    assert cfg.grace_period.max == 300.0
    (sim,) = cfg.clusters
    nodes = sim.expand()
    assert [(n.name, n.cluster, dict(n.resources)) for n in nodes] == [
        ("node-1", "sim", {"cpu": 32000, "memory": 137438953472}),
        ("node-2", "sim", {"cpu": 32000, "memory": 137438953472}),
    ]


def test_example_config_file_equals_the_builtin_default():
    from pathlib import Path

    example = load_config(Path(__file__).resolve().parent.parent / "examples" / "flotilla.yaml")
    assert example.model_dump() == load_config(None).model_dump()


def test_node_groups_number_on_across_groups_and_keep_taints():
    cfg = parse_config("""
clusters:
  - name: c
    kind: simulated
    nodes:
      - {count: 2, resources: {cpu: 500m}}
      - {count: 1, resources: {cpu: 2, nvidia.com/gpu: 4}, taints: [{key: gpu, effect: NoSchedule}], labels: {kind: gpu}}
      - {name: big, resources: {memory: 1Ti}}
""", "c.yaml")
    nodes = cfg.clusters[0].expand()
    assert [n.name for n in nodes] == ["node-1", "node-2", "node-3", "big"]
    assert nodes[0].resources == {"cpu": 500}
    assert nodes[2].taints[0].key == "gpu" and nodes[2].labels == {"kind": "gpu"}
    assert nodes[3].resources == {"memory": 2**40}


@pytest.mark.parametrize("text, expected", [
    ("queues: [{name: A}, {name: A}]", "c.yaml:1: queues[1].name: duplicate queue 'A' (first at queues[0])"),
    ("defaultPriorityClass: urgent", "c.yaml:1: defaultPriorityClass: unknown priority class 'urgent' "
                                     "(known: armada-default, armada-preemptible)"),
    ("clusters:\n  - {name: x, kind: simulatd}", "c.yaml:2: clusters[0].kind: expected kind to be one of "
                                                "'simulated', 'kubernetes'"),
    ("lease: {timeout: soon}", "c.yaml:1: lease.timeout: expected a duration such as 30s, 5m, 2h, 3d or seconds, "
                               "got 'soon'"),
    ("queues: [{name: A, limits: {cpu: 2}}]", "c.yaml:1: queues[0].limits: limit cpu must be a fraction of the "
                                              "pool in (0, 1], got 2.0"),
    ("plugins:\n  - {nme: drf}", "c.yaml:2: plugins[0].nme: unknown field 'nme'"),
    ("- a\n- b", "c.yaml:1: expected a mapping at the top of the document"),
])
def test_config_errors_name_line_path_and_expectation(text, expected):
    with pytest.raises(ConfigError) as err:
        parse_config(text, "c.yaml")
    assert str(err.value) == expected


def test_state_times_accept_rfc3339_and_seconds(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("jobs:\n"
                    "  - {id: a, queue: A, submitted: '2026-01-01T00:00:10Z'}\n"
                    "  - {id: b, queue: A, submitted: 12.5}\n")
    snapshot = load_state(path, load_config(None))
    assert [j.submitted for j in snapshot.queued] == [1767225610.0, 12.5]
    assert [j.priority_class for j in snapshot.queued] == ["armada-default", "armada-default"]


def test_state_queued_job_with_a_node_is_an_error(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("jobs:\n  - {id: a, queue: A, node: node-1}\n")
    with pytest.raises(ConfigError) as err:
        load_state(path, load_config(None))
    assert str(err.value) == f"{path}:2: jobs[0].node: a queued job has no node or cluster yet (set state: running)"


def test_state_unknown_queue(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("jobs:\n  - {id: a, queue: Z}\n")
    with pytest.raises(ConfigError) as err:
        load_state(path, load_config(None))
    assert str(err.value) == f"{path}:2: jobs[0].queue: unknown queue 'Z' (known: A, B)"
