"""flotilla.testing, the pytest plugin for plugin authors: its fixtures, as an author's tests use them."""

from __future__ import annotations

import json
import textwrap
from importlib.metadata import entry_points
from pathlib import Path

import pytest
import yaml

from flotilla.plugin import hookimpl, take_args
from flotilla.testing import CycleResult, SetupError, SimulatedCycle
from tests.support.scenario import install_distribution, run_once

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
BUILT_INS = ["assetfairness", "bestfit", "gang", "priorityclass", "predicates"]


class RefuseJobSet:
    """A plugin defined here, never installed: refuses the jobs of one job set."""

    def __init__(self, args):
        self.job_set = take_args(args, jobSet="")["jobSet"]

    @hookimpl
    def flotilla_session_open(self, session):
        session.add_job_valid(lambda job: f"job set {job.job_set} is refused" if job.job_set == self.job_set else None)


SMALL = """
clusters:
  - name: c1
    nodes:
      - {name: node-1, resources: {cpu: 4}}
jobs:
  - {id: a-1, queue: A, jobSet: x, requests: {cpu: 1}, submitted: 1}
  - {id: a-2, queue: A, jobSet: y, requests: {cpu: 1}, submitted: 2}
  - {id: b-1, queue: B, jobSet: x, requests: {cpu: 2}, submitted: 3}
  - {id: b-2, queue: B, jobSet: y, requests: {cpu: 2}, submitted: 4}
"""


def test_the_fixtures_come_with_flotilla_through_the_pytest11_entry_point(pytestconfig):
    (entry,) = [ep for ep in entry_points(group="pytest11") if ep.name == "flotilla"]
    assert entry.value == "flotilla.testing"
    assert pytestconfig.pluginmanager.get_plugin("flotilla").__name__ == "flotilla.testing"


def test_a_cycle_is_the_one_schedule_once_runs(flotilla_cycle, tmp_path):
    state = EXAMPLES / "two-queues.yaml"
    result = flotilla_cycle(state)
    assert result.scheduled == {f"b-{i}": "node-2" for i in range(1, 33)}
    assert result.preempted == [f"a-{i}" for i in range(33, 41)]
    assert result.queued == {f"b-{i}": "0/2 nodes are available: 2 Insufficient cpu" for i in range(33, 51)}
    assert result.shares == {"A": 0.5, "B": 0.5}
    assert result.output == run_once(tmp_path, None, state.read_text())


def test_a_plugin_class_runs_in_the_list_before_its_package_is_installed(flotilla_cycle):
    result = flotilla_cycle(SMALL, plugins=BUILT_INS + [(RefuseJobSet, {"jobSet": "x"})])
    assert result == CycleResult(scheduled={"a-2": "node-1", "b-2": "node-1"}, preempted=[],
                                 queued={"a-1": "job set x is refused", "b-1": "job set x is refused"},
                                 shares={"A": 0.25, "B": 0.5}, output=result.output)
    # The class alone is the plugin with no arguments.
    assert flotilla_cycle(SMALL, plugins=BUILT_INS + [RefuseJobSet]).queued == {"b-2": "0/1 nodes are available: 1 Insufficient cpu"}


def test_state_and_config_come_as_text_files_or_mappings(flotilla_cycle, tmp_path):
    config = textwrap.dedent("""
        plugins: [{name: drf}]
        priorityClasses: [{name: default, priority: 1}]
        defaultPriorityClass: default
        queues: [{name: A, weight: 3}, {name: B}]
        """)
    (tmp_path / "config.yaml").write_text(config)
    (tmp_path / "state.yaml").write_text(SMALL)
    results = [flotilla_cycle(SMALL, config=config), flotilla_cycle(tmp_path / "state.yaml", config=tmp_path / "config.yaml"),
               flotilla_cycle(yaml.safe_load(SMALL), config=yaml.safe_load(config))]
    assert results[0] == results[1] == results[2]
    assert results[0].scheduled == {"a-1": "node-1", "a-2": "node-1", "b-1": "node-1"}
    assert results[0].output["queues"]["A"]["fairShare"] == 0.75


def test_what_the_scheduler_refuses_is_a_setup_error_with_its_place(flotilla_cycle):
    with pytest.raises(SetupError) as refused:
        flotilla_cycle(SMALL, plugins=BUILT_INS + [(RefuseJobSet, {"jobst": "x"})])
    assert str(refused.value) == \
        "plugins[5].args: plugin 'tests.plugins.test_testing_plugin.RefuseJobSet': unknown argument(s) jobst; expected jobSet"
    with pytest.raises(SetupError) as refused:
        flotilla_cycle(SMALL, plugins=["nope"])
    assert str(refused.value).startswith("plugins[0].name: unknown plugin 'nope' (available: assetfairness, ")
    with pytest.raises(SetupError) as refused:
        flotilla_cycle("jobs:\n  - {id: z-1, queue: Z}\n")
    assert str(refused.value) == "<state>:2: jobs[0].queue: unknown queue 'Z' (known: A, B)"
    with pytest.raises(SetupError) as refused:
        flotilla_cycle(SMALL, config="queues: [{name: A, weight: 0}]\n")
    assert str(refused.value).startswith("<config>:1: queues[0].weight: ")


def test_a_class_that_cannot_be_imported_by_name_is_refused_with_what_to_do(flotilla_cycle):
    class Local(RefuseJobSet):
        pass

    with pytest.raises(TypeError) as refused:
        flotilla_cycle(SMALL, plugins=BUILT_INS + [Local])
    assert str(refused.value) == (
        "plugins: test_a_class_that_cannot_be_imported_by_name_is_refused_with_what_to_do.<locals>.Local is not "
        "importable as tests.plugins.test_testing_plugin:test_a_class_that_cannot_be_imported_by_name_is_refused_with_what_to_do."
        "<locals>.Local; define it at the top level of a module, or name its installed entry point")


def test_an_installed_class_goes_by_its_entry_point_name(flotilla_cycle, tmp_path, monkeypatch):
    # A distribution (as pip installs one) whose entry point names the class above.
    install_distribution(tmp_path / "site", "refuser_plugin", "", "flotilla.plugins",
                         "refuser = tests.plugins.test_testing_plugin:RefuseJobSet")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    with pytest.raises(SetupError) as refused:
        flotilla_cycle(SMALL, plugins=BUILT_INS + [(RefuseJobSet, {"jobst": "x"})])
    assert str(refused.value) == "plugins[5].args: plugin 'refuser': unknown argument(s) jobst; expected jobSet"


def test_a_simulation_gives_each_cycle_that_changed_anything(flotilla_simulate):
    result = flotilla_simulate(EXAMPLES / "workloads" / "two-queues.yaml")
    assert [(c.time, len(c.scheduled), sorted(set(c.scheduled.values())), c.preempted) for c in result.cycles] == [
        (0.0, 40, ["node-1", "node-2"], []),
        (60.0, 32, ["node-2"], [f"A-{i}" for i in range(33, 41)]),
        (600.0, 26, ["node-1"], []),
    ]
    assert isinstance(result.cycles[0], SimulatedCycle)
    assert {queue: (q["finished"], q["preemptions"], q["meanShare"]) for queue, q in result.queues.items()} == {
        "A": (40, 8, 0.31875), "B": (50, 0, 0.411184)}
    assert "wallSeconds" not in result.report and json.dumps(result.report)
