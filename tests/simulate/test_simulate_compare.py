"""``simulate --compare``: each compared policy with its own args, and one error line for a bad one.

The policy with required args is the plugin guide's own package,
``examples/plugins/flotilla-tiers`` (``tiers`` refuses to be built without
its ``tiers`` mapping), installed here as a distribution on ``sys.path``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from flotilla.scheduler_main import main
from tests.support.scenario import install_distribution

ROOT = Path(__file__).resolve().parents[2]
TWO_QUEUES = ROOT / "examples" / "workloads" / "two-queues.yaml"
TIERS_SOURCE = ROOT / "examples" / "plugins" / "flotilla-tiers" / "src" / "flotilla_tiers" / "__init__.py"


@pytest.fixture
def tiers_installed(tmp_path, monkeypatch):
    install_distribution(tmp_path / "site", "flotilla_tiers", TIERS_SOURCE.read_text(), "flotilla.plugins",
                         "tiers = flotilla_tiers:StrictTiers")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    yield
    sys.modules.pop("flotilla_tiers", None)


def simulate(*args):
    return CliRunner().invoke(main, ["simulate", "--workload", str(TWO_QUEUES), *args])


def figures(report):
    return {queue: (q["preemptions"], q["waitMean"], q["waitP95"], q["finished"]) for queue, q in report["queues"].items()}


def test_a_policy_with_required_args_compares_and_prints_its_table(tmp_path, tiers_installed):
    # Built-in config (two 32-core nodes, A and B of weight 1), the seed's two-queue story. Asset fairness preempts
    # A's 8 jobs on node-2 for B; with A in the tier above B nothing of A is taken back: 24 of B's 50 start at
    # t=60s (64 - 40 cores) and 26 wait until A's jobs end at t=10m, 26 x 540 / 50 = 280.8 s on average.
    out = tmp_path / "cmp.json"
    result = simulate("--compare", "assetfairness", "--compare", "tiers:{tiers: {A: 0, B: 1}}", "--json", str(out))
    assert result.exit_code == 0, result.output + result.stderr
    report = json.loads(out.read_text())["policies"]
    assert list(report) == ["assetfairness", "tiers"]
    assert figures(report["assetfairness"]) == {"A": (8, 0, 0, 40), "B": (0, 194.4, 540, 50)}
    assert figures(report["tiers"]) == {"A": (0, 0, 0, 40), "B": (0, 280.8, 540, 50)}
    assert report["tiers"]["policy"] == "tiers"
    rows = [line for line in result.stdout.splitlines() if "│" in line and ("tiers" in line or "assetfairness" in line)]
    assert [row.split("│")[1].strip() for row in rows] == ["assetfairness", "tiers"]
    assert result.stdout.count("Preemptions") == 1


def test_the_documented_tiers_comparison_is_the_one_tested(tiers_installed):
    # docs/simulate.md and the plugin guide show the command the test above runs.
    from tests.support.docs import commands, section

    documented = [commands(section("simulate.md", "Comparing policies")), [c for c in commands(section("plugins.md", "6.")) if c[0] == "simulate"]]
    tested = ["simulate", "--workload", "examples/workloads/two-queues.yaml", "--compare", "assetfairness",
              "--compare", "tiers:{tiers: {A: 0, B: 1}}"]
    assert documented == [[tested], [tested]]


def test_commas_inside_args_belong_to_the_args(tmp_path, tiers_installed):
    out = tmp_path / "cmp.json"
    result = simulate("--compare", "assetfairness,tiers:{tiers: {A: 0, B: 1}},drf", "--json", str(out), "-q")
    assert result.exit_code == 0, result.output + result.stderr
    assert list(json.loads(out.read_text())["policies"]) == ["assetfairness", "tiers", "drf"]


def test_one_plugin_under_two_sets_of_args_is_labelled_by_each_entry(tmp_path):
    out = tmp_path / "cmp.json"
    result = simulate("--compare", "decayedusage", "--compare", "decayedusage:{priorityHalftime: 6h}",
                      "--json", str(out), "-q")
    assert result.exit_code == 0, result.output + result.stderr
    report = json.loads(out.read_text())["policies"]
    assert list(report) == ["decayedusage", "decayedusage:{priorityHalftime: 6h}"]
    assert [r["policy"] for r in report.values()] == list(report)


@pytest.mark.parametrize("compare, line", [
    ("assetfairness,tiers",
     "error: --compare 'tiers': args: plugin 'tiers': tiers must map queue names to tiers (whole numbers, 0 first), "
     "e.g. {prod: 0, batch: 1}; give its args after a colon, e.g. --compare 'tiers:{...}'"),
    ("tiers:{tiers: {A: 0, B: 1}, teirs: 1}",
     "error: --compare 'tiers:{tiers: {A: 0, B: 1}, teirs: 1}': args: plugin 'tiers': unknown argument(s) teirs; "
     "expected default, tiers"),
    ("tiers:{tiers: {A: 0",
     "error: --compare 'tiers:{tiers: {A: 0': args: expected ',' or '}', but got '<stream end>' at column 20; "
     "expected a YAML mapping such as {tiers: {prod: 0, batch: 1}}"),
    ("tiers:[1]",
     "error: --compare 'tiers:[1]': args: expected a YAML mapping such as {tiers: {prod: 0, batch: 1}}, got '[1]'"),
    ("decayedusage:{resourceWeights: {cpu: .nan}}",
     "error: --compare 'decayedusage:{resourceWeights: {cpu: .nan}}': args.resourceWeights.cpu: expected a finite "
     "number, got .nan"),
    ("drf:{resources: cpu}",
     "error: --compare 'drf:{resources: cpu}': args.resources: expected a list of resource names, e.g. [cpu, memory], "
     "got 'cpu'"),
    ("bestfit",
     "error: --compare 'bestfit': 'bestfit' cannot be the fairness policy: the config already uses it for something "
     "else"),
    ("spread",
     "error: --compare 'spread': 'spread' cannot be the fairness policy: it registers no queue_order (fairness "
     "policies: assetfairness, drf, decayedusage or a third-party one)"),
    (":{a: 1}", "error: --compare ':{a: 1}': expected a plugin name, e.g. drf or 'tiers:{tiers: {prod: 0}}'"),
])
def test_a_bad_compared_policy_is_one_error_line_exit_2(tiers_installed, compare, line):
    result = simulate("--compare", compare)
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [line]
    assert result.stdout == ""


def test_an_unknown_compared_plugin_names_the_entry():
    result = simulate("--compare", "assetfairness,fair")
    assert result.exit_code == 2
    [line] = result.stderr.splitlines()
    assert line.startswith("error: --compare 'fair': unknown plugin 'fair' (available: assetfairness, bestfit, ")
