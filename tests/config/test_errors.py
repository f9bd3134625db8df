"""Bad config or state: one clear line on stderr naming file, place and expectation; exit 2; nothing on stdout."""

from __future__ import annotations

import pytest

from tests.support.scenario import config, invoke

GOOD_STATE = """
clusters:
  - name: c1
    nodes:
      - {name: node-1, resources: {cpu: 32}}
jobs:
  - {id: a-1, queue: A, requests: {cpu: 1}}
"""


def failing(tmp_path, cfg, state):
    result = invoke(tmp_path, cfg, state)
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_unknown_plugin(tmp_path):
    cfg = config(plugins="plugins:\n  - name: assetfairness\n  - name: bestfitt\n")
    line = failing(tmp_path, cfg, GOOD_STATE)
    assert line.startswith(f"error: {tmp_path / 'flotilla.yaml'}:3: plugins[1].name: unknown plugin 'bestfitt'")
    assert "available: assetfairness, bestfit," in line


def test_bad_plugin_args(tmp_path):
    cfg = config(plugins="plugins:\n  - name: assetfairness\n    args: {resourceWeights: {cpu: -1}}\n")
    line = failing(tmp_path, cfg, GOOD_STATE)
    assert "plugins[0].args.resourceWeights.cpu: expected a non-negative number, got -1" in line


def test_unknown_action(tmp_path):
    line = failing(tmp_path, config(extra="actions: [evict, alocate]"), GOOD_STATE)
    assert "actions[1]" in line and "alocate" in line


def test_unknown_priority_class_in_state(tmp_path):
    state = GOOD_STATE.replace("requests: {cpu: 1}}", "requests: {cpu: 1}, priorityClass: urgent}")
    line = failing(tmp_path, config(), state)
    assert f"{tmp_path / 'state.yaml'}:7: jobs[0].priorityClass: unknown priority class 'urgent'" in line


@pytest.mark.parametrize("quantity, expected", [
    ("-1", "non-negative"),
    ("1x", "expected a quantity"),
    ("abc", "expected a quantity"),
])
def test_negative_or_malformed_quantity(tmp_path, quantity, expected):
    state = GOOD_STATE.replace("requests: {cpu: 1}", f"requests: {{cpu: '{quantity}'}}")
    line = failing(tmp_path, config(), state)
    assert "jobs[0].requests.cpu" in line and expected in line


def test_gang_cardinality_mismatch(tmp_path):
    state = GOOD_STATE.replace("requests: {cpu: 1}}", "requests: {cpu: 1}, gang: {id: g1, cardinality: 3}}") + \
        "  - {id: a-2, queue: A, requests: {cpu: 1}, gang: {id: g1, cardinality: 3}}\n"
    line = failing(tmp_path, config(), state)
    assert "gang 'g1'" in line and "3" in line and "2" in line


def test_running_job_on_unknown_node(tmp_path):
    state = GOOD_STATE + "  - {id: r-1, queue: A, requests: {cpu: 1}, state: running, node: node-9}\n"
    line = failing(tmp_path, config(), state)
    assert "jobs[1].node" in line and "node-9" in line


def test_duplicate_job_id(tmp_path):
    state = GOOD_STATE + "  - {id: a-1, queue: A, requests: {cpu: 2}}\n"
    line = failing(tmp_path, config(), state)
    assert "jobs[1].id" in line and "duplicate job id 'a-1'" in line


def test_unknown_field_in_config_names_its_line(tmp_path):
    line = failing(tmp_path, config(extra="evict: {probabilty: 0.5}"), GOOD_STATE)
    assert "evict.probabilty" in line and "unknown field" in line


def test_missing_state_file(tmp_path):
    from click.testing import CliRunner

    from flotilla.scheduler_main import main

    result = CliRunner().invoke(main, ["schedule-once", "--state", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 2 and result.stdout == ""
    assert "nope.yaml" in result.stderr
