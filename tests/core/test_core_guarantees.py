"""What the core enforces whatever the plugin list: Kubernetes feasibility and queue limits."""

from __future__ import annotations

import sys

import pytest

from tests.support.scenario import config, install_distribution, jobs, placements, run_once

# A third-party fairness policy, written from the plugin guide, that never mentions limits or predicates.
FIRST_COME = '''
from flotilla.core.hookspecs import hookimpl


class FirstCome:
    """Every queue's key is the same: ties go to the queue whose name sorts first."""

    def __init__(self, args):
        pass

    @hookimpl
    def flotilla_session_open(self, session):
        session.add_queue_order(lambda queue, extra: 0.0)
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
    assert out["reasons"]["sel-1"] == (
        "0/4 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
        "1 node(s) had untolerated taint {maintenance: }, 1 node(s) had untolerated taint {nvidia.com/gpu: present}, "
        "1 node(s) were unschedulable")
    assert out["reasons"]["sel-2"] == (
        "0/4 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
        "1 node(s) had untolerated taint {maintenance: }, 1 node(s) had untolerated taint {nvidia.com/gpu: present}, "
        "1 node(s) were unschedulable")
    assert out["reasons"]["big-2"] == (
        "0/4 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint {maintenance: }, "
        "1 node(s) had untolerated taint {nvidia.com/gpu: present}, 1 node(s) were unschedulable")


def test_listing_predicates_changes_nothing(tmp_path):
    state = NODES + big_jobs("big", 4, 10)
    without = run_once(tmp_path, config(plugins="plugins: [{name: drf}]"), state)
    listed = run_once(tmp_path, config(plugins="plugins: [{name: drf}, {name: predicates}]"), state)
    assert listed == without


STRICT_PRIORITY = '''
from flotilla.plugin import DEFAULT_WEIGHTS, asset_share, hookimpl


class StrictPriority:
    """Tiers first (a smaller tier always goes first), asset fairness inside a tier."""

    def __init__(self, args):
        self.tiers = dict(args.get("tiers", {}))

    @hookimpl
    def flotilla_session_open(self, session):
        share = asset_share(session, DEFAULT_WEIGHTS)
        tiers = self.tiers

        def tier_then_share(queue, extra):
            return (tiers.get(queue.name, 0), share(queue, extra) / queue.fair_share)

        session.add_queue_order(tier_then_share)
'''


@pytest.fixture
def strict_priority(tmp_path, monkeypatch):
    install_distribution(tmp_path / "site", "strictpriority_policy", STRICT_PRIORITY, "flotilla.plugins",
                         "strictpriority = strictpriority_policy:StrictPriority")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    yield
    sys.modules.pop("strictpriority_policy", None)


def test_the_reported_share_is_the_measured_allocation_whatever_the_policy(tmp_path, strict_priority):
    # 32 cpu and 8 gpus (pool cost 40 by the default weights): A's jobs take 2 cpu + 1 gpu, B's 1 cpu.
    state = """
clusters:
  - name: c1
    nodes:
      - {name: node-1, resources: {cpu: 32, nvidia.com/gpu: 8, memory: 64Gi}}
jobs:
""" + "\n".join([f"  - {{id: a-{i}, queue: A, requests: {{cpu: 2, nvidia.com/gpu: 1}}, submitted: {i}}}"
                 for i in range(1, 11)] +
                [f"  - {{id: b-{i}, queue: B, requests: {{cpu: 1}}, submitted: {100 + i}}}" for i in range(1, 31)]) + "\n"
    policies = {
        "assetfairness": "plugins: [{name: assetfairness}]",
        "drf": "plugins: [{name: drf}]",
        "strictpriority": "plugins: [{name: strictpriority, args: {tiers: {A: 1, B: 0}}}]",
    }
    placed, reported = {}, {}
    for name, plugins in policies.items():
        out = run_once(tmp_path, config(plugins=plugins), state)
        jobs_placed = placements(out)
        a = sum(j.startswith("a-") for j in jobs_placed)
        b = sum(j.startswith("b-") for j in jobs_placed)
        placed[name] = (a, b)
        measured = {"A": round(3 * a / 40, 6), "B": round(b / 40, 6)}
        reported[name] = {queue: out["queues"][queue]["share"] for queue in ("A", "B")}
        assert reported[name] == measured, name
    # assetfairness: B served while 3(a+1) > b+1 until cpu runs out (2a + b = 32);
    # drf: A's job is 1/8 of the gpus, B's 1/32 of the cpu: B served while 4(a+1) > b+1;
    # strict priority: tier 0 (B) first takes all 30 of its jobs, A then fits one job in the 2 cores left.
    assert placed == {"assetfairness": (6, 20), "drf": (5, 22), "strictpriority": (1, 30)}
    assert reported == {"assetfairness": {"A": 0.45, "B": 0.5}, "drf": {"A": 0.375, "B": 0.55},
                        "strictpriority": {"A": 0.075, "B": 0.75}}


B_PREEMPTS_FIRST = '''
from flotilla.core.hookspecs import hookimpl


class BFirst:
    """Ranks queue B's urgent jobs before everyone else's in preempt; orders nothing in allocate."""

    def __init__(self, args):
        pass

    @hookimpl
    def flotilla_session_open(self, session):
        session.add_preempt_queue_order(lambda queue: 0 if queue.name == "B" else 1)
'''

URGENT = """
clusters:
  - name: c1
    nodes:
      - {name: node-1, resources: {cpu: 4}}
jobs:
""" + "\n".join([f"  - {{id: c-{i}, queue: C, priorityClass: armada-preemptible, requests: {{cpu: 1}}, "
                 f"state: running, node: node-1}}" for i in range(1, 5)] +
                [f"  - {{id: {q}-{i}, queue: {q.upper()}, requests: {{cpu: 1}}, submitted: {i}}}"
                 for q in "ab" for i in range(1, 5)]) + "\n"
QUEUES = "queues: [{name: A}, {name: B}, {name: C}]"
PLUGINS = """
plugins:
  - name: assetfairness
  - name: bestfit
  - name: priorityclass
"""


@pytest.fixture
def b_first(tmp_path, monkeypatch):
    install_distribution(tmp_path / "site", "bfirst_rank", B_PREEMPTS_FIRST, "flotilla.plugins",
                         "bfirst = bfirst_rank:BFirst\nbfirstagain = bfirst_rank:BFirst")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    yield
    sys.modules.pop("bfirst_rank", None)


def test_preempt_ranks_queues_by_measured_share_unless_a_plugin_says_otherwise(tmp_path, b_first):
    # A and B hold nothing (share 0 over fair share 1/3): ties go to A, whose four urgent jobs displace C's four.
    out = run_once(tmp_path, config(queues=QUEUES, plugins=PLUGINS, extra="evict: {probability: 0}"), URGENT)
    assert sorted(placements(out)) == ["a-1", "a-2", "a-3", "a-4"]
    assert out["preempted"] == ["c-1", "c-2", "c-3", "c-4"]
    out = run_once(tmp_path, config(queues=QUEUES, plugins=PLUGINS + "  - name: bfirst\n",
                                    extra="evict: {probability: 0}"), URGENT)
    assert sorted(placements(out)) == ["b-1", "b-2", "b-3", "b-4"]
    assert out["preempted"] == ["c-1", "c-2", "c-3", "c-4"]


def test_two_preempt_queue_orders_is_a_config_error(tmp_path, b_first):
    from tests.support.scenario import invoke

    result = invoke(tmp_path, config(queues=QUEUES, plugins=PLUGINS + "  - name: bfirst\n  - name: bfirstagain\n"),
                    URGENT)
    assert result.exit_code == 2
    assert "at most one plugin may provide preempt_queue_order; 2 did" in result.stderr
