"""The tiers policy in real cycles and a short simulation, through Flotilla's pytest fixtures (flotilla.testing)."""

from pathlib import Path

import pytest

from flotilla.testing import SetupError


def plugins(**args):
    """The built-in default plugin list with ``tiers`` as the fairness policy."""
    return [{"name": "tiers", "args": args}, "bestfit", "gang", "priorityclass"]


def jobs(prefix, queue, count, extra=""):
    """State-file lines for ``count`` queued one-core jobs."""
    return "".join(f"  - {{id: {prefix}-{i}, queue: {queue}, requests: {{cpu: 1}}, submitted: {i}{extra}}}\n"
                   for i in range(1, count + 1))


NODE_8 = """
clusters:
  - name: c1
    nodes:
      - {name: node-1, resources: {cpu: 8}}
"""


HERE = Path(__file__).resolve().parent.parent


def test_prod_takes_the_nodes_batch_holds(flotilla_cycle):
    # The package's own example: flotilla.yaml (tiers: {prod: 0, batch: 1}) and state.yaml (batch holds both nodes).
    result = flotilla_cycle(HERE / "state.yaml", config=HERE / "flotilla.yaml")
    assert result.scheduled == {"prod-1": "node-1", "prod-2": "node-1", "prod-3": "node-1", "prod-4": "node-1",
                                "prod-5": "node-2", "prod-6": "node-2"}
    assert result.preempted == ["batch-1", "batch-2", "batch-3", "batch-4", "batch-7", "batch-8"]
    assert result.queued == {"batch-9": "0/2 nodes are available: 2 Insufficient cpu"}
    assert result.shares == {"batch": 0.25, "prod": 0.75}


def test_the_first_tier_is_served_before_the_next_gets_anything(flotilla_cycle):
    state = NODE_8 + "queues: [{name: prod}, {name: batch}]\njobs:\n" + jobs("b", "batch", 6) + jobs("p", "prod", 6)
    result = flotilla_cycle(state, plugins=plugins(tiers={"prod": 0, "batch": 1}))
    assert result.scheduled == {**{f"p-{i}": "node-1" for i in range(1, 7)}, "b-1": "node-1", "b-2": "node-1"}
    assert result.queued == {f"b-{i}": "0/1 nodes are available: 1 Insufficient cpu" for i in range(3, 7)}
    assert result.shares == {"A": 0.0, "B": 0.0, "batch": 0.25, "prod": 0.75}


def test_inside_a_tier_queues_share_by_asset_fairness_and_a_parent_names_its_branch_tier(flotilla_cycle):
    state = """
clusters:
  - name: c1
    nodes:
      - {name: node-1, resources: {cpu: 16}}
queues:
  - {name: prod}
  - {name: prod-web, parent: prod}
  - {name: prod-ml, parent: prod}
  - {name: batch}
jobs:
""" + jobs("b", "batch", 10) + jobs("w", "prod-web", 10) + jobs("m", "prod-ml", 10)
    result = flotilla_cycle(state, plugins=plugins(tiers={"prod": 0}))   # batch: the default tier, 1
    assert result.scheduled == {**{f"w-{i}": "node-1" for i in range(1, 9)},
                                **{f"m-{i}": "node-1" for i in range(1, 9)}}
    assert (result.shares["prod-web"], result.shares["prod-ml"], result.shares["batch"]) == (0.5, 0.5, 0.0)


def test_a_higher_tier_takes_back_the_nodes_a_lower_tier_holds(flotilla_cycle):
    running = "".join(f"  - {{id: b-{i}, queue: batch, priorityClass: armada-preemptible, requests: {{cpu: 1}}, "
                      f"state: running, node: node-1}}\n" for i in range(1, 9))
    state = NODE_8 + "queues: [{name: prod}, {name: batch}]\njobs:\n" + running + \
        jobs("p", "prod", 5, ", priorityClass: armada-preemptible")
    # As the package's flotilla.yaml: no floor under batch's fair share.
    result = flotilla_cycle(state, plugins=plugins(tiers={"prod": 0, "batch": 1}),
                            config="evict: {protectedFractionOfFairShare: 0}")
    assert result.scheduled == {f"p-{i}": "node-1" for i in range(1, 6)}
    assert result.preempted == ["b-4", "b-5", "b-6", "b-7", "b-8"]
    assert result.shares == {"batch": 0.375, "prod": 0.625}


def test_queue_limits_hold_though_the_policy_never_mentions_them(flotilla_cycle):
    state = NODE_8 + "queues: [{name: prod, limits: {cpu: 0.25}}, {name: batch}]\njobs:\n" + \
        jobs("b", "batch", 8) + jobs("p", "prod", 4)
    result = flotilla_cycle(state, plugins=plugins(tiers={"prod": 0, "batch": 1}))
    assert result.scheduled == {"p-1": "node-1", "p-2": "node-1", **{f"b-{i}": "node-1" for i in range(1, 7)}}
    assert result.queued == {"b-7": "0/1 nodes are available: 1 Insufficient cpu", "b-8": "0/1 nodes are available: 1 Insufficient cpu",
                             "p-3": "queue prod at its cpu limit 0.25", "p-4": "queue prod at its cpu limit 0.25"}


@pytest.mark.parametrize("args, message", [
    ({}, "tiers must map queue names to tiers (whole numbers, 0 first), e.g. {prod: 0, batch: 1}"),
    ({"tiers": {"prod": -1}}, "tiers.prod must be a whole number from 0, got -1"),
    ({"tiers": {"prod": 0}, "teirs": {}}, "unknown argument(s) teirs; expected default, tiers"),
])
def test_bad_args_are_a_config_error(flotilla_cycle, args, message):
    with pytest.raises(SetupError) as refused:
        flotilla_cycle("jobs: []", plugins=plugins(**args))
    assert str(refused.value) == f"plugins[0].args: plugin 'tiers': {message}"


def test_over_time_the_lower_tier_runs_on_what_the_higher_leaves(flotilla_simulate):
    # The built-in default cluster: two 32-core nodes. 40 prod and 40 batch jobs of one core, 10 minutes each.
    result = flotilla_simulate("""
        queues: [{name: prod}, {name: batch}]
        submissions:
          - {at: 0s, queue: batch, count: 40, requests: {cpu: 1}, duration: 10m}
          - {at: 0s, queue: prod, count: 40, requests: {cpu: 1}, duration: 10m}
        """, plugins=plugins(tiers={"prod": 0, "batch": 1}))
    assert [(cycle.time, sum(job.startswith("prod") for job in cycle.scheduled),
             sum(job.startswith("batch") for job in cycle.scheduled), cycle.preempted) for cycle in result.cycles] == [
        (0.0, 40, 24, []),
        (600.0, 0, 16, []),
    ]
    assert {queue: figures["waitMean"] for queue, figures in result.queues.items()} == {"batch": 240, "prod": 0}
