"""Swapping the fairness policy: assetfairness, drf, and a plugin found through an entry point."""

from __future__ import annotations

import sys

import pytest

from tests.support.scenario import config, install_distribution, placements, run_once

# One node: 16 cpu, 8 gpus. A's jobs take 2 cpu + 1 gpu, B's 1 cpu.
STATE = """
clusters:
  - name: c1
    nodes:
      - {name: node-1, resources: {cpu: 16, nvidia.com/gpu: 8, memory: 64Gi}}
jobs:
""" + "\n".join(
    [f"  - {{id: a-{i}, queue: A, requests: {{cpu: 2, nvidia.com/gpu: 1}}, submitted: {i}}}" for i in range(1, 11)]
    + [f"  - {{id: b-{i}, queue: B, requests: {{cpu: 1}}, submitted: {100 + i}}}" for i in range(1, 21)]) + "\n"


def fairness(name: str, args: str = "") -> str:
    return f"""
plugins:
  - name: {name}{args}
  - name: bestfit
  - name: gang
  - name: priorityclass
  - name: predicates
"""


def counts(out):
    scheduled = placements(out)
    return sum(j.startswith("a-") for j in scheduled), sum(j.startswith("b-") for j in scheduled)


def test_assetfairness_counts_cpu_plus_gpu(tmp_path):
    # A job costs 3, a B job 1 (of 24): B is served while 3(a+1) > b+1, ties to A.
    # Trace: b1 b2 a1 b3 b4 b5 a2 b6 b7 b8 a3 b9 b10 -> cpu 16 used.
    out = run_once(tmp_path, config(plugins=fairness("assetfairness")), STATE)
    assert counts(out) == (3, 10)


def test_drf_counts_the_dominant_resource(tmp_path):
    # A job is 1/8 of the gpus, a B job 1/16 of the cpu: B is served while 2(a+1) > b+1.
    # Trace: b1 a1 b2 b3 a2 b4 b5 a3 b6 b7 a4 b8 -> cpu 16 used.
    out = run_once(tmp_path, config(plugins=fairness("drf")), STATE)
    assert counts(out) == (4, 8)
    # The reported share is the core's measure (cpu + gpu of 24), whatever the policy: 4 x 3 and 8 x 1.
    assert out["queues"]["A"]["share"] == 0.5
    assert out["queues"]["B"]["share"] == 0.333333


def test_assetfairness_resource_weights_are_args(tmp_path):
    # With gpu weighing 0, A's job costs 2 and B's 1: B served while 2(a+1) > b+1, as drf here.
    out = run_once(tmp_path, config(plugins=fairness("assetfairness", "\n    args: {resourceWeights: {cpu: 1}}")), STATE)
    assert counts(out) == (4, 8)


PLUGIN_MODULE = '''
"""A third-party policy: first come, first served across queues (every queue's key is 0)."""
from flotilla.core.hookspecs import hookimpl


class StrictOrder:
    def __init__(self, args):
        self.args = args

    @hookimpl
    def flotilla_session_open(self, session):
        session.add_queue_order(lambda queue, extra: 0.0)
'''


@pytest.fixture
def installed_plugin(tmp_path, monkeypatch):
    """A real distribution on sys.path whose entry point registers ``strictorder``."""
    install_distribution(tmp_path / "site", "strictorder_plugin", PLUGIN_MODULE, "flotilla.plugins",
                         "strictorder = strictorder_plugin:StrictOrder")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    yield
    sys.modules.pop("strictorder_plugin", None)


def test_third_party_plugin_from_an_entry_point_replaces_fairness(tmp_path, installed_plugin):
    # Every queue's key is the same, so ties go to A: A takes 8 jobs (all 16 cpu), B gets nothing.
    out = run_once(tmp_path, config(plugins=fairness("strictorder")), STATE)
    assert counts(out) == (8, 0)
    from flotilla.plugin_manager import available_plugins
    assert "strictorder" in available_plugins()


def test_two_fairness_policies_is_a_config_error(tmp_path):
    from tests.support.scenario import invoke

    plugins = fairness("drf") + "  - name: assetfairness\n"
    result = invoke(tmp_path, config(plugins=plugins), STATE)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "exactly one plugin must provide queue_order" in result.stderr


def test_every_built_in_plugin_is_found_through_its_entry_point():
    # No list of built-ins in the code: pyproject.toml's entry points are how flotilla's own plugins are found.
    from importlib.metadata import entry_points

    from flotilla.plugin_manager import available_plugins

    ours = {ep.name: ep.value for ep in entry_points(group="flotilla.plugins") if ep.dist.name == "flotilla"}
    assert ours == {
        "assetfairness": "flotilla.plugins.assetfairness:AssetFairness",
        "bestfit": "flotilla.plugins.bestfit:BestFit",
        "gang": "flotilla.plugins.gang:Gang",
        "ownerfairshare": "flotilla.plugins.ownerfairshare:OwnerFairShare",
        "predicates": "flotilla.plugins.predicates:Predicates",
        "priorityclass": "flotilla.plugins.priorityclass:PriorityClassPlugin",
        "decayedusage": "flotilla.contrib.decayedusage:DecayedUsage",
        "drf": "flotilla.contrib.drf:DominantResourceFairness",
        "spread": "flotilla.contrib.spread:Spread",
    }
    assert set(ours) <= set(available_plugins())


def test_a_name_two_distributions_register_is_a_config_error_naming_both(tmp_path, monkeypatch):
    from tests.support.scenario import invoke

    install_distribution(tmp_path / "site", "other_drf", PLUGIN_MODULE, "flotilla.plugins",
                         "drf = other_drf:StrictOrder")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    result = invoke(tmp_path, config(plugins=fairness("drf")), STATE)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr == (
        f"error: {tmp_path / 'flotilla.yaml'}:3: plugins[0].name: plugin name 'drf' is registered by two "
        "distributions: flotilla (flotilla.contrib.drf:DominantResourceFairness) and flotilla-other-drf "
        "(other_drf:StrictOrder); uninstall one of them\n")
