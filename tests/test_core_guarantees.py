"""What the core enforces whatever the plugin list: Kubernetes feasibility and queue limits."""

from __future__ import annotations

import sys

import pytest

from scenario import config, install_distribution, jobs, placements, run_once

# A third-party fairness policy, written from the plugin guide, that never mentions limits or predicates.
FIRST_COME = '''
from flotilla.core.hookspecs import hookimpl


class FirstCome:
    """Every queue costs the same: ties go to the queue whose name sorts first."""

    def __init__(self, args):
        pass

    @hookimpl
    def flotilla_session_open(self, session):
        session.add_queue_cost(lambda queue, extra: 0.0)
'''


@pytest.fixture
def first_come(tmp_path, monkeypatch):
    install_distribution(tmp_path / "site", "firstcome_policy", FIRST_COME, "flotilla.plugins",
                         "firstcome = firstcome_policy:FirstCome")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    yield
    sys.modules.pop("firstcome_policy", None)


ONE_NODE = """
clusters:
  - name: c1
    nodes:
      - {name: node-1, resources: {cpu: 16, memory: 64Gi}}
jobs:
"""


def test_queue_limits_hold_under_a_policy_that_never_mentions_them(tmp_path, first_come):
    # Without limits, ties to A would give A all ten of its jobs; its limit of 0.125 of 16 cores is 2 cores.
    state = ONE_NODE + jobs("a", 10, "A") + "\n" + jobs("b", 20, "B", submitted=100) + "\n"
    queues = "queues: [{name: A, limits: {cpu: 0.125}}, {name: B}]"
    out = run_once(tmp_path, config(queues=queues, plugins="plugins: [{name: firstcome}]"), state)
    placed = placements(out)
    assert sorted(j for j in placed if j.startswith("a-")) == ["a-1", "a-2"]
    assert sorted(j for j in placed if j.startswith("b-")) == sorted(f"b-{i}" for i in range(1, 15))
    assert out["reasons"]["a-3"] == "queue A at its cpu limit 0.125"


def test_queue_limits_hold_in_a_tree_under_a_policy_that_never_mentions_them(tmp_path, first_come):
    # The parent's limit binds its two children together: 0.25 of 16 cores is 4, shared by A1 and A2.
    state = ONE_NODE + jobs("a1", 6, "A1") + "\n" + jobs("a2", 6, "A2", submitted=50) + "\n" + \
        jobs("b", 20, "B", submitted=100) + "\n"
    queues = """queues:
  - {name: A, limits: {cpu: 0.25}}
  - {name: A1, parent: A}
  - {name: A2, parent: A}
  - {name: B}
"""
    out = run_once(tmp_path, config(queues=queues, plugins="plugins: [{name: firstcome}]"), state)
    placed = placements(out)
    assert sorted(j for j in placed if j.startswith("a")) == ["a1-1", "a1-2", "a1-3", "a1-4"]
    assert len([j for j in placed if j.startswith("b-")]) == 12
    assert out["reasons"]["a2-1"] == "queue A at its cpu limit 0.25"


NODES = """
clusters:
  - name: c1
    nodes:
      - {name: plain-1, resources: {cpu: 8}, labels: {kind: cpu}}
      - name: gpu-1
        resources: {cpu: 8, nvidia.com/gpu: 8}
        labels: {kind: gpu}
        taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
      - name: drain-1
        resources: {cpu: 8}
        labels: {kind: drain}
        taints: [{key: maintenance, effect: NoExecute}]
      - {name: off-1, resources: {cpu: 8}, labels: {kind: cpu}, unschedulable: true}
jobs:
  - {id: sel-1, queue: A, requests: {cpu: 1}, nodeSelector: {kind: gpu}, submitted: 1}
  - {id: sel-2, queue: A, requests: {cpu: 1}, nodeSelector: {kind: disk}, submitted: 2}
  - id: tol-1
    queue: A
    requests: {cpu: 1}
    nodeSelector: {kind: gpu}
    tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
    submitted: 3
  - id: tol-2
    queue: A
    requests: {cpu: 1}
    tolerations: [{key: maintenance, operator: Exists, effect: NoExecute}]
    nodeSelector: {kind: drain}
    submitted: 4
"""


def big_jobs(prefix: str, count: int, start: int) -> str:
    return "\n".join(f"  - {{id: {prefix}-{i}, queue: A, requests: {{cpu: 7}}, submitted: {start + i}}}"
                     for i in range(1, count + 1)) + "\n"


def test_a_plugin_list_without_predicates_still_refuses_tainted_and_non_matching_nodes(tmp_path):
    # Four 7-core jobs with no selector or toleration: only plain-1 takes them (gpu-1 is tainted NoSchedule,
    # drain-1 NoExecute, off-1 unschedulable), so one runs and three wait; the tolerating jobs go where they
    # are tolerated and selected.
    state = NODES + big_jobs("big", 4, 10)
    out = run_once(tmp_path, config(plugins="plugins: [{name: drf}]"), state)
    assert placements(out) == {"tol-1": "gpu-1", "tol-2": "drain-1", "big-1": "plain-1"}
    assert out["queued"] == ["big-2", "big-3", "big-4", "sel-1", "sel-2"]
    assert out["reasons"]["sel-1"] == ("0/4 nodes match: 2 didn't match nodeSelector kind=gpu, "
                                       "1 had untolerated taint nvidia.com/gpu=present:NoSchedule, 1 unschedulable")
    assert out["reasons"]["sel-2"] == "0/4 nodes match: 3 didn't match nodeSelector kind=disk, 1 unschedulable"
    assert out["reasons"]["big-2"] == "0/1 nodes fit: 1 insufficient cpu"


def test_listing_predicates_changes_nothing(tmp_path):
    state = NODES + big_jobs("big", 4, 10)
    without = run_once(tmp_path, config(plugins="plugins: [{name: drf}]"), state)
    listed = run_once(tmp_path, config(plugins="plugins: [{name: drf}, {name: predicates}]"), state)
    assert listed == without
