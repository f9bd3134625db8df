"""Per-owner fair share inside a queue (volcano-scheduler.txt's 10-against-1,000 example), on job_order."""

from __future__ import annotations

from tests.support.docs import REPO
from tests.support.scenario import PLUGINS, config, invoke, placements, run_once

OWNER_PLUGINS = PLUGINS + "  - name: ownerfairshare\n"


def owned(prefix: str, count: int, owner: str, start_time: int, key: str = "flotilla.io/owner") -> str:
    return "\n".join(
        f"  - {{id: {prefix}-{i}, queue: A, requests: {{cpu: 1}}, submitted: {start_time + i}, "
        f"annotations: {{{key}: {owner}}}}}" for i in range(1, count + 1)) + "\n"


# Bob submitted 1,000 jobs before Alice's 10; the one node has room for four.
STATE = """
clusters:
  - name: c1
    nodes:
      - {name: node-1, resources: {cpu: 4}}
jobs:
""" + owned("b", 1000, "bob", 0) + owned("a", 10, "alice", 1000)


def test_without_the_plugin_the_first_submitted_take_the_room(tmp_path):
    out = run_once(tmp_path, config(), STATE)
    assert set(placements(out)) == {"b-1", "b-2", "b-3", "b-4"}


def test_ten_against_a_thousand_gives_each_user_its_share(tmp_path):
    out = run_once(tmp_path, config(plugins=OWNER_PLUGINS), STATE)
    # Keys: b-1 and a-1 at 1, b-2 and a-2 at 2 (ties by submission time).
    assert [p["job"] for p in out["scheduled"]] == ["b-1", "a-1", "b-2", "a-2"]


def test_owner_weights_and_running_jobs_count(tmp_path):
    plugins = OWNER_PLUGINS.replace("- name: ownerfairshare", "- name: ownerfairshare\n    args: {weights: {alice: 3}}")
    out = run_once(tmp_path, config(plugins=plugins), STATE)
    # Alice's keys 1/3, 2/3, 1, 4/3; Bob's 1, 2: a-1, a-2, then b-1 (1, submitted first), a-3.
    assert [p["job"] for p in out["scheduled"]] == ["a-1", "a-2", "b-1", "a-3"]
    # Bob already runs two jobs (on a second node): his next keys are 3, 4, so Alice goes first.
    state = STATE.replace("jobs:\n", "      - {name: node-2, resources: {cpu: 2}}\njobs:\n", 1).replace(
        "clusters:", "clusters:", 1) + "".join(
        f"  - {{id: r-{i}, queue: A, requests: {{cpu: 1}}, state: running, node: node-2, "
        f"annotations: {{flotilla.io/owner: bob}}}}\n" for i in (1, 2))
    out = run_once(tmp_path, config(plugins=OWNER_PLUGINS), state)
    assert [p["job"] for p in out["scheduled"]] == ["a-1", "a-2", "b-1", "a-3"]


def test_namespace_as_the_owner(tmp_path):
    plugins = OWNER_PLUGINS.replace("- name: ownerfairshare", "- name: ownerfairshare\n    args: {ownerFrom: namespace}")
    state = STATE.replace("flotilla.io/owner: bob", "flotilla.io/namespace: team-b").replace(
        "flotilla.io/owner: alice", "flotilla.io/namespace: team-a")
    out = run_once(tmp_path, config(plugins=plugins), state)
    assert [p["job"] for p in out["scheduled"]] == ["b-1", "a-1", "b-2", "a-2"]


def test_bad_args_name_the_plugin(tmp_path):
    plugins = OWNER_PLUGINS.replace("- name: ownerfairshare", "- name: ownerfairshare\n    args: {ownerFrom: group}")
    result = invoke(tmp_path, config(plugins=plugins), STATE)
    assert result.exit_code == 2
    assert "plugins[5].args: plugin 'ownerfairshare': ownerFrom must be one of user, namespace, got 'group'" \
        in result.stderr


# Alice runs 6 cores in queue A and Bob nothing; 2 cores are free; each queued job asks for one core.
BY_COST_STATE = """
clusters:
  - name: c1
    nodes:
      - {name: node-1, resources: {cpu: 8}}
jobs:
  - {id: a0, queue: A, requests: {cpu: 6}, state: running, node: node-1, annotations: {flotilla.io/owner: alice}}
  - {id: a1, queue: A, requests: {cpu: 1}, submitted: 1, annotations: {flotilla.io/owner: alice}}
  - {id: b1, queue: A, requests: {cpu: 1}, submitted: 2, annotations: {flotilla.io/owner: bob}}
  - {id: b2, queue: A, requests: {cpu: 1}, submitted: 3, annotations: {flotilla.io/owner: bob}}
"""


def test_owners_are_ordered_by_the_cost_of_what_they_run(tmp_path):
    out = run_once(tmp_path, config(plugins=OWNER_PLUGINS), BY_COST_STATE)
    # Keys: Bob's b1 at 0+1, b2 at 0+2; Alice's a1 at 6+1 (6 cores running). Bob gets both free cores.
    assert [p["job"] for p in out["scheduled"]] == ["b1", "b2"]
    assert out["queued"] == ["a1"]


def test_counting_jobs_is_an_option(tmp_path):
    plugins = OWNER_PLUGINS.replace("- name: ownerfairshare", "- name: ownerfairshare\n    args: {by: jobs}")
    out = run_once(tmp_path, config(plugins=plugins), BY_COST_STATE)
    # Keys: b1 at 1; a1 at 1+1 (one job running) ties b2 at 2 and was submitted first.
    assert [p["job"] for p in out["scheduled"]] == ["b1", "a1"]
    assert out["queued"] == ["b2"]


def test_the_cost_uses_the_configured_resource_weights(tmp_path):
    # Alice runs 6 cores; Bob runs 2 gpus and 1 core. Each queued job asks for a core; room for two.
    state = BY_COST_STATE.replace(
        "      - {name: node-1, resources: {cpu: 8}}\n",
        "      - {name: node-1, resources: {cpu: 8}}\n      - {name: gpu-1, resources: {cpu: 1, nvidia.com/gpu: 2}}\n"
    ) + ("  - {id: b0, queue: A, requests: {cpu: 1, nvidia.com/gpu: 2}, state: running, node: gpu-1, "
         "annotations: {flotilla.io/owner: bob}}\n")
    # Default weights (a gpu costs as a core): Bob's usage 3 < Alice's 6, so b1 (4), b2 (5) before a1 (7).
    out = run_once(tmp_path, config(plugins=OWNER_PLUGINS), state)
    assert [p["job"] for p in out["scheduled"]] == ["b1", "b2"]
    # A gpu weighing 4 cores: Bob's usage 9 > Alice's 6, so a1 (7), then b1 (10) before b2 (11).
    plugins = OWNER_PLUGINS.replace("- name: assetfairness",
                                    "- name: assetfairness\n    args: {resourceWeights: {cpu: 1, nvidia.com/gpu: 4}}")
    out = run_once(tmp_path, config(plugins=plugins), state)
    assert [p["job"] for p in out["scheduled"]] == ["a1", "b1"]
    assert out["queued"] == ["b2"]


def test_an_unknown_measure_is_refused(tmp_path):
    plugins = OWNER_PLUGINS.replace("- name: ownerfairshare", "- name: ownerfairshare\n    args: {by: cores}")
    result = invoke(tmp_path, config(plugins=plugins), STATE)
    assert result.exit_code == 2
    assert "plugins[5].args: plugin 'ownerfairshare': by must be one of cost, jobs, got 'cores'" in result.stderr


def test_the_documented_example(tmp_path):
    from tests.support.docs import commands, run_documented, section

    (argv,) = commands(section("policies.md", "Per-owner fair share by cost"))
    assert [p["job"] for p in run_documented(argv)["scheduled"]] == ["b1", "b2"]
    config = tmp_path / "owners.yaml"
    config.write_text((REPO / argv[argv.index("--config") + 1]).read_text().replace("{by: cost}", "{by: jobs}"))
    argv[argv.index("--config") + 1] = str(config)
    assert [p["job"] for p in run_documented(argv)["scheduled"]] == ["b1", "a1"]
