"""``actions:`` entries as plugins' are: ``- name`` or ``- {name, args}``, args checked by the action, names unique."""

from __future__ import annotations

import sys

import pytest

from tests.support.scenario import config, install_distribution, invoke, run_once

STATE = """
clusters:
  - name: c1
    nodes:
      - {name: node-1, resources: {cpu: 4}}
jobs:
  - {id: a-1, queue: A, requests: {cpu: 8}, submitted: 1}
  - {id: a-2, queue: A, requests: {cpu: 8}, submitted: 2}
  - {id: a-3, queue: A, requests: {cpu: 1}, submitted: 3}
"""


def test_actions_with_and_without_args_load_and_args_reach_the_action(tmp_path):
    """allocate's lookahead of 2: a-1 and a-2 fit no node, so queue A stops before a-3."""
    out = run_once(tmp_path, config(extra="actions: [{name: evict}, {name: allocate, args: {lookahead: 2}}, "
                                          "preempt, lease]"), STATE)
    assert out["scheduled"] == []
    assert out["reasons"]["a-3"] == "lookahead 2 reached in queue A"
    out = run_once(tmp_path, config(extra="actions: [{name: evict}, {name: allocate, args: {lookahead: 3}}, "
                                          "preempt, lease]"), STATE)
    assert [p["job"] for p in out["scheduled"]] == ["a-3"]


def test_an_unknown_action_arg_is_an_error_at_its_line(tmp_path):
    text = config(extra="actions:\n  - evict\n  - name: allocate\n    args: {lookahed: 2}\n  - lease\n")
    line = text.splitlines().index("    args: {lookahed: 2}") + 1
    result = invoke(tmp_path, text, STATE)
    assert result.exit_code == 2
    assert result.stderr.strip() == (f"error: {tmp_path / 'flotilla.yaml'}:{line}: actions[1].args: action 'allocate': "
                                     f"unknown argument(s) lookahed; expected lookahead")


def test_an_arg_given_to_an_action_that_takes_none_is_an_error_at_its_line(tmp_path):
    text = config(extra="actions:\n  - name: evict\n    args: {probability: 1}\n  - allocate\n")
    line = text.splitlines().index("    args: {probability: 1}") + 1
    result = invoke(tmp_path, text, STATE)
    assert result.exit_code == 2
    assert result.stderr.strip() == (f"error: {tmp_path / 'flotilla.yaml'}:{line}: actions[0].args: action 'evict': "
                                     f"unknown argument(s) probability; expected no arguments")


def test_a_bad_arg_value_is_an_error_at_its_line(tmp_path):
    text = config(extra="actions:\n  - name: allocate\n    args: {lookahead: 0}\n")
    line = text.splitlines().index("    args: {lookahead: 0}") + 1
    result = invoke(tmp_path, text, STATE)
    assert result.exit_code == 2
    assert result.stderr.strip() == (f"error: {tmp_path / 'flotilla.yaml'}:{line}: actions[0].args: action "
                                     f"'allocate': lookahead: expected a whole number of at least 1, got 0")


ALLOCATE_AGAIN = '''
class Allocate:
    name = "allocate"

    def __init__(self, args):
        pass

    def execute(self, session):
        pass
'''


@pytest.fixture
def package_allocate(tmp_path, monkeypatch):
    install_distribution(tmp_path / "site", "my_allocate", ALLOCATE_AGAIN, "flotilla.actions",
                         "allocate = my_allocate:Allocate")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    yield
    sys.modules.pop("my_allocate", None)


def test_a_package_action_may_not_take_a_built_in_name(tmp_path, package_allocate):
    text = config(extra="actions: [evict, allocate, lease]")
    line = text.splitlines().index("actions: [evict, allocate, lease]") + 1
    result = invoke(tmp_path, text, STATE)
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        f"error: {tmp_path / 'flotilla.yaml'}:{line}: actions[1]: action name 'allocate' is Flotilla's built-in "
        f"action (flotilla.actions.allocate:Allocate) and is registered again by flotilla-my-allocate "
        f"(my_allocate:Allocate); rename the package's action or uninstall it")
