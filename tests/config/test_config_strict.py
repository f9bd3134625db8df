"""Config mistakes the feature audit found accepted: non-finite numbers, weights that are not numbers or are all
zero, a zero cycle period, ``drf``'s resources as a string, node affinity the API server refuses.

Each is one line naming the file, the line and the field; error strings are compared whole.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from flotilla.config import ConfigError, parse_config
from flotilla.config.loader import DEFAULT_CONFIG_YAML
from tests.support.scenario import invoke, run_once
from tests.support.service import api_env

env = api_env

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_WEIGHTS = "{resourceWeights: {cpu: 1, nvidia.com/gpu: 1, memory: 0}}"
TWO_QUEUES = (ROOT / "examples" / "two-queues.yaml").read_text()


def config_error(text: str) -> str:
    with pytest.raises(ConfigError) as err:
        parse_config(text, "c.yaml")
    return str(err.value)


def with_weights(weights: str) -> str:
    """The built-in default config (the README's quick start) with the assetfairness weights ``weights``."""
    assert DEFAULT_WEIGHTS in DEFAULT_CONFIG_YAML
    return DEFAULT_CONFIG_YAML.replace(DEFAULT_WEIGHTS, f"{{resourceWeights: {weights}}}")


def test_the_readme_two_queue_example_with_a_nan_weight_exits_2_naming_file_and_line(tmp_path):
    result = invoke(tmp_path, with_weights("{cpu: .nan}"), TWO_QUEUES)
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == (f"error: {tmp_path / 'flotilla.yaml'}:4: plugins[0].args.resourceWeights.cpu: expected "
                             f"a finite number, got .nan\n")


def test_the_readme_two_queue_example_preempts_to_32_each_with_finite_weights(tmp_path):
    out = run_once(tmp_path, with_weights("{cpu: 1}"), TWO_QUEUES)
    assert {q: out["queues"][q]["allocated"] for q in ("A", "B")} == {"A": {"cpu": "32"}, "B": {"cpu": "32"}}
    assert out["preempted"] == [f"a-{i}" for i in range(33, 41)]


@pytest.mark.parametrize("weights, message", [
    ("{cpu: .inf}", "plugins[0].args.resourceWeights.cpu: expected a finite number, got .inf"),
    ("{cpu: 1, memory: -.inf}", "plugins[0].args.resourceWeights.memory: expected a finite number, got -.inf"),
    ("{cpu: 'x'}", "plugins[0].args.resourceWeights.cpu: expected a non-negative number, got 'x'"),
    ("{cpu: '1'}", "plugins[0].args.resourceWeights.cpu: expected a non-negative number, got '1'"),
    ("{cpu: null}", "plugins[0].args.resourceWeights.cpu: expected a non-negative number, got null"),
    ("{cpu: true}", "plugins[0].args.resourceWeights.cpu: expected a non-negative number, got true"),
    ("{cpu: -1}", "plugins[0].args.resourceWeights.cpu: expected a non-negative number, got -1"),
    ("{cpu: 0, memory: 0}", "plugins[0].args.resourceWeights: every weight is 0 (or none is given): shares would "
                            "all be 0/0; give at least one resource a positive weight"),
    ("{}", "plugins[0].args.resourceWeights: every weight is 0 (or none is given): shares would all be 0/0; give at "
           "least one resource a positive weight"),
    ("cpu", "plugins[0].args.resourceWeights: expected a mapping of resource names to non-negative numbers, e.g. "
            "{cpu: 1, nvidia.com/gpu: 1, memory: 0}, got 'cpu'"),
])
def test_resource_weights_are_finite_non_negative_numbers_not_all_zero(weights, message):
    assert config_error(with_weights(weights)) == f"c.yaml:4: {message}"


def test_every_number_in_any_plugins_args_is_finite():
    text = DEFAULT_CONFIG_YAML.replace("  - name: bestfit\n", "  - name: bestfit\n    args: {weights: [1, .nan]}\n")
    assert config_error(text) == "c.yaml:6: plugins[1].args.weights[1]: expected a finite number, got .nan"
    text = DEFAULT_CONFIG_YAML.replace("  - name: gang\n", "  - name: gang\n    args: {a: {b: -.inf}}\n")
    assert config_error(text) == "c.yaml:7: plugins[2].args.a.b: expected a finite number, got -.inf"


@pytest.mark.parametrize("period", ["0s", "0", "0ms"])
def test_the_cycle_period_is_positive(period):
    text = DEFAULT_CONFIG_YAML.replace("cycle: {period: 1s}", f"cycle: {{period: {period}}}")
    assert config_error(text) == "c.yaml:21: cycle.period: expected a positive duration, e.g. 1s"


@pytest.mark.parametrize("resources, message", [
    ("cpu", "plugins[0].args.resources: expected a list of resource names, e.g. [cpu, memory], got 'cpu'"),
    ("{cpu: 1}", "plugins[0].args.resources: expected a list of resource names, e.g. [cpu, memory], got {'cpu': 1}"),
    ("[cpu, 'a b']", "plugins[0].args.resources[1]: 'a b' is not a valid resource name: a Kubernetes qualified name: "
                     "an optional DNS subdomain prefix (lower-case letters, digits, '-' and '.', at most 253 "
                     "characters) and '/', then 1-63 letters, digits, '-', '_' or '.', starting and ending with a "
                     "letter or digit"),
])
def test_drf_resources_are_a_list_of_resource_names(resources, message):
    text = DEFAULT_CONFIG_YAML.replace(f"  - name: assetfairness\n    args: {DEFAULT_WEIGHTS}\n",
                                       f"  - name: drf\n    args: {{resources: {resources}}}\n")
    assert config_error(text) == f"c.yaml:4: {message}"


def test_drf_with_a_list_of_resource_names_loads():
    text = DEFAULT_CONFIG_YAML.replace(f"  - name: assetfairness\n    args: {DEFAULT_WEIGHTS}\n",
                                       "  - name: drf\n    args: {resources: [cpu, memory]}\n")
    assert parse_config(text, "c.yaml").plugins[0].args == {"resources": ["cpu", "memory"]}


def test_drf_refuses_a_string_when_built_in_code():
    from flotilla.contrib.drf import DominantResourceFairness

    with pytest.raises(ValueError, match="resources must be a list of resource names"):
        DominantResourceFairness({"resources": "cpu"})


def test_queue_limit_keys_are_resource_names():
    text = DEFAULT_CONFIG_YAML.replace("  - {name: A, weight: 1}", "  - {name: A, weight: 1, limits: {'<img>': 0.5}}")
    assert config_error(text) == (
        "c.yaml:14: queues[0].limits.<img>: '<img>' is not a valid resource name: a Kubernetes qualified name: an "
        "optional DNS subdomain prefix (lower-case letters, digits, '-' and '.', at most 253 characters) and '/', "
        "then 1-63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit")


# -- node affinity as the API server validates it ------------------------------------------------------------

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
LABEL_KEY_RULE = ("a Kubernetes qualified name: an optional DNS subdomain prefix (lower-case letters, digits, '-' "
                  "and '.', at most 253 characters) and '/', then 1-63 letters, digits, '-', '_' or '.', starting "
                  "and ending with a letter or digit")
AFFINITIES = [
    ({REQUIRED: {"nodeSelectorTerms": []}}, f"{REQUIRED}.nodeSelectorTerms",
     "must have at least one node selector term"),
    ({REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [{"key": "bad key", "operator": "In",
                                                              "values": ["a"]}]}]}},
     f"{REQUIRED}.nodeSelectorTerms[0].matchExpressions[0].key", f"'bad key' is not a valid label key: {LABEL_KEY_RULE}"),
    ({REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [{"key": "Example.com/zone", "operator": "Exists"}]}]}},
     f"{REQUIRED}.nodeSelectorTerms[0].matchExpressions[0].key",
     f"'Example.com/zone' is not a valid label key: {LABEL_KEY_RULE}"),
    ({"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "preference": {"matchExpressions": [{"key": "-zone", "operator": "Exists"}]}}]},
     "preferredDuringSchedulingIgnoredDuringExecution[0].preference.matchExpressions[0].key",
     f"'-zone' is not a valid label key: {LABEL_KEY_RULE}"),
    ({REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "in", "values": ["a"]}]}]}},
     f"{REQUIRED}.nodeSelectorTerms[0].matchExpressions[0].operator",
     "expected one of In, NotIn, Exists, DoesNotExist, Gt, Lt, got 'in'"),
]


@pytest.mark.parametrize("affinity, path, message", AFFINITIES)
def test_a_submitted_node_affinity_the_api_server_refuses_is_refused(env, affinity, path, message):
    from tests.support.service import headers, job, job_file

    client, store = env
    r = client.post("/v1/submit", json=job_file("A", "s", [job("x", affinity={"nodeAffinity": affinity})]),
                    headers=headers("alice"))
    assert r.status_code == 422
    assert [e["text"] for e in r.json()["error"]["errors"]] == [
        f"job 0 (clientId 'x'): podSpec.affinity.nodeAffinity.{path}: {message}"]
    assert store.count_jobs() == 0


def test_a_node_affinity_with_label_keys_and_a_term_is_taken(env):
    from tests.support.service import headers, job, job_file

    client, store = env
    affinity = {REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]}]}]}}
    r = client.post("/v1/submit", json=job_file("A", "s", [job("x", affinity={"nodeAffinity": affinity})]),
                    headers=headers("alice"))
    assert r.status_code == 200 and store.count_jobs() == 1


def test_a_state_file_job_with_an_empty_term_list_is_refused_at_its_line(tmp_path):
    state = ("clusters:\n  - name: c1\n    nodes:\n      - {name: node-1, resources: {cpu: 8}}\njobs:\n"
             "  - {id: j1, queue: A, requests: {cpu: 1},\n"
             f"     affinity: {{nodeAffinity: {{{REQUIRED}: {{nodeSelectorTerms: []}}}}}}}}\n")
    result = invoke(tmp_path, None, state)
    assert result.exit_code == 2
    assert result.stderr.endswith(f"jobs[0].affinity.nodeAffinity.{REQUIRED}.nodeSelectorTerms: must have at least "
                                  f"one node selector term\n")
    assert result.stderr.startswith(f"error: {tmp_path / 'state.yaml'}:")
