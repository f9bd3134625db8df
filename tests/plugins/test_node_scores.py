"""Node scores: within bestfit's tiers by default, across them when a plugin asks (exact nodes chosen)."""

from __future__ import annotations

import sys

import pytest

from tests.support.scenario import config, install_distribution, invoke, jobs, placements, run_once

PREFER_FAST = '''
from flotilla.core.hookspecs import hookimpl


class PreferFast:
    """Scores 1 for nodes labelled fast=true, 0 for the others."""

    def __init__(self, args):
        self.across_tiers = bool(args.get("acrossTiers", False))

    @hookimpl
    def flotilla_session_open(self, session):
        fast = {i for i, node in enumerate(session.index.nodes) if node.labels.get("fast") == "true"}
        session.add_node_score(lambda job, node: 1.0 if node in fast else 0.0, across_tiers=self.across_tiers)
'''


@pytest.fixture
def prefer_fast(tmp_path, monkeypatch):
    install_distribution(tmp_path / "site", "preferfast_score", PREFER_FAST, "flotilla.plugins",
                         "preferfast = preferfast_score:PreferFast")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    yield
    sys.modules.pop("preferfast_score", None)


# node-a runs one of A's jobs (A's own tier), node-b one of B's (used by others); node-small and node-fast are
# unused, node-small the tighter fit. A and C each have one 1-core job queued.
STATE = """
clusters:
  - name: c1
    nodes:
      - {name: node-a, resources: {cpu: 8}}
      - {name: node-b, resources: {cpu: 8}}
      - {name: node-small, resources: {cpu: 4}}
      - {name: node-fast, resources: {cpu: 8}, labels: {fast: "true"}}
jobs:
  - {id: ra, queue: A, requests: {cpu: 1}, state: running, node: node-a}
  - {id: rb, queue: B, requests: {cpu: 1}, state: running, node: node-b}
  - {id: a-1, queue: A, requests: {cpu: 1}, submitted: 1}
  - {id: c-1, queue: C, requests: {cpu: 1}, submitted: 2}
"""
QUEUES = "queues: [{name: A}, {name: B}, {name: C}]"


def plugins(score: str = "") -> str:
    return "plugins:\n  - name: assetfairness\n  - name: bestfit\n  - name: priorityclass\n" + score


def test_without_scores_bestfit_takes_the_first_tier_then_the_tightest_fit(tmp_path, prefer_fast):
    out = run_once(tmp_path, config(queues=QUEUES, plugins=plugins()), STATE)
    # A: its own node; C has none, so the unused tier, tightest fit first.
    assert placements(out) == {"a-1": "node-a", "c-1": "node-small"}


def test_a_score_orders_nodes_within_the_first_tier_that_has_any(tmp_path, prefer_fast):
    out = run_once(tmp_path, config(queues=QUEUES, plugins=plugins("  - name: preferfast\n")), STATE)
    # A's own tier has node-a only, so the score cannot take A elsewhere; in C's unused tier it beats the fit.
    assert placements(out) == {"a-1": "node-a", "c-1": "node-fast"}


def test_a_score_across_tiers_outweighs_the_tiers(tmp_path, prefer_fast):
    score = "  - name: preferfast\n    args: {acrossTiers: true}\n"
    out = run_once(tmp_path, config(queues=QUEUES, plugins=plugins(score)), STATE)
    # Both prefer node-fast over their first tier; it has room for both.
    assert placements(out) == {"a-1": "node-fast", "c-1": "node-fast"}


def test_equal_scores_across_tiers_fall_back_to_the_tiers(tmp_path, prefer_fast):
    # Without a fast node every across-tier score is 0: the earlier tier, then the tightest fit, decide.
    state = STATE.replace(', labels: {fast: "true"}', "")
    score = "  - name: preferfast\n    args: {acrossTiers: true}\n"
    out = run_once(tmp_path, config(queues=QUEUES, plugins=plugins(score)), state)
    assert placements(out) == {"a-1": "node-a", "c-1": "node-small"}


PREFER_PLAIN = '''
from flotilla.plugin import hookimpl, node_at, take_args


class PreferPlain:
    """Scores 1 for nodes without an ``accelerator`` label, 0 for the others: CPU-only jobs keep off GPU nodes."""

    def __init__(self, args):
        take_args(args)

    @hookimpl
    def flotilla_session_open(self, session):
        def plain(job, node):
            return 0.0 if "accelerator" in node_at(session, node).labels or job.requests.get("nvidia.com/gpu") else 1.0

        session.add_node_score(plain)


class Prefer:
    """Scores ``score`` for the nodes named in ``nodes``, 0 for the others."""

    def __init__(self, args):
        args = take_args(args, nodes=[], score=1.0)
        self.nodes, self.score = set(args["nodes"]), float(args["score"])

    @hookimpl
    def flotilla_session_open(self, session):
        session.add_node_score(lambda job, node: self.score if node_at(session, node).name in self.nodes else 0.0)


class PreferToo(Prefer):
    """A second :class:`Prefer`, to weigh two against each other."""
'''


@pytest.fixture
def prefer_plain(tmp_path, monkeypatch):
    site = tmp_path / "site-plain"
    install_distribution(site, "preferplain_score", PREFER_PLAIN, "flotilla.plugins",
                         "preferplain = preferplain_score:PreferPlain")
    info = site / "flotilla_preferplain_score-0.1.dist-info" / "entry_points.txt"
    info.write_text(info.read_text() + "prefer = preferplain_score:Prefer\nprefertoo = preferplain_score:PreferToo\n")
    monkeypatch.syspath_prepend(str(site))
    yield
    sys.modules.pop("preferplain_score", None)


def gpu_cluster(gpu_nodes: int = 40, plain_cpu: int = 16) -> str:
    """``gpu_nodes`` GPU nodes, each running a GPU job of queue G that holds its GPU (2 of its 8 cores free space
    used), then one plain node: by free space the GPU nodes (6 cores free) come before the plain one."""
    gpus = "\n".join(f"      - {{name: gpu-{n:02}, resources: {{cpu: 8, nvidia.com/gpu: 1}}, "
                     f"labels: {{accelerator: nvidia}}}}" for n in range(1, gpu_nodes + 1))
    running = "\n".join(f"  - {{id: g-{n:02}, queue: G, requests: {{cpu: 2, nvidia.com/gpu: 1}}, state: running, "
                        f"node: gpu-{n:02}}}" for n in range(1, gpu_nodes + 1))
    return (f"clusters:\n  - name: c1\n    nodes:\n{gpus}\n      - {{name: plain, resources: {{cpu: {plain_cpu}}}}}\n"
            f"jobs:\n{running}\n")


def test_a_score_preferring_the_one_plain_node_of_41_places_every_cpu_job_there_while_it_has_room(
        tmp_path, prefer_plain):
    # 20 one-core jobs; the plain node holds 16. Without tiers (no bestfit) every node is a candidate; the score
    # sees all 41 (fewer than 100 nodes: kube-scheduler scores every feasible node).
    state = gpu_cluster() + "\n".join(f"  - {{id: a-{n:02}, queue: A, requests: {{cpu: 1}}, submitted: {n}}}"
                                      for n in range(1, 21))
    plugins = "plugins:\n  - name: assetfairness\n  - name: priorityclass\n  - name: preferplain\n"
    out = run_once(tmp_path, config(queues="queues: [{name: A}, {name: G}]", plugins=plugins), state)
    expected = {f"a-{n:02}": "plain" for n in range(1, 17)}
    # The plain node full, the rest score alike (0): the tightest fit, then the first node, takes them.
    expected.update({f"a-{n:02}": "gpu-01" for n in range(17, 21)})
    assert placements(out) == expected


def test_scores_are_normalised_per_plugin_so_a_large_raw_scale_does_not_drown_another(tmp_path, prefer_plain):
    # prefer gives node-x 10 (raw), prefertoo node-y 1: normalised, each is 100 on its node, so they tie and the
    # tightest fit (node-y, 4 cores) decides; raw, 10 would win.
    state = """
    clusters:
      - name: c1
        nodes:
          - {name: node-x, resources: {cpu: 8}}
          - {name: node-y, resources: {cpu: 4}}
    jobs:
      - {id: a-1, queue: A, requests: {cpu: 1}}
    """
    both = ("plugins:\n  - name: assetfairness\n  - name: priorityclass\n"
            "  - name: prefer\n    args: {nodes: [node-x], score: 10}\n"
            "  - name: prefertoo\n    args: {nodes: [node-y], score: 1}\n")
    assert placements(run_once(tmp_path, config(queues="queues: [{name: A}]", plugins=both), state)) == \
        {"a-1": "node-y"}


@pytest.mark.parametrize("weights, node", [((None, None), "node-y"), ((3, None), "node-x"), ((1, 2), "node-y"),
                                           ((2.5, 2), "node-x")])
def test_a_plugin_weight_multiplies_its_normalised_scores(tmp_path, prefer_plain, weights, node):
    state = """
    clusters:
      - name: c1
        nodes:
          - {name: node-x, resources: {cpu: 8}}
          - {name: node-y, resources: {cpu: 4}}
    jobs:
      - {id: a-1, queue: A, requests: {cpu: 1}}
    """
    x, y = (f"\n    weight: {w}" if w is not None else "" for w in weights)
    plugins = ("plugins:\n  - name: assetfairness\n  - name: priorityclass\n"
               f"  - name: prefer\n    args: {{nodes: [node-x], score: 10}}{x}\n"
               f"  - name: prefertoo\n    args: {{nodes: [node-y], score: 1}}{y}\n")
    assert placements(run_once(tmp_path, config(queues="queues: [{name: A}]", plugins=plugins), state)) == \
        {"a-1": node}


def test_a_weight_on_a_plugin_without_a_node_score_is_an_error_at_its_place(tmp_path, prefer_plain):
    plugins = "plugins:\n  - name: assetfairness\n  - name: priorityclass\n    weight: 2\n"
    result = invoke(tmp_path, config(queues="queues: [{name: A}]", plugins=plugins),
                    "clusters: [{name: c1, nodes: [{name: n, resources: {cpu: 1}}]}]\n")
    assert result.exit_code == 2
    assert result.output.strip().endswith("plugins[1].weight: plugin 'priorityclass' registers no node score: "
                                          "a weight multiplies node scores only")


@pytest.mark.parametrize("weight", ["0", "-1", ".nan", "x"])
def test_a_weight_must_be_a_positive_number(tmp_path, prefer_plain, weight):
    plugins = f"plugins:\n  - name: assetfairness\n  - name: priorityclass\n  - name: preferplain\n    weight: {weight}\n"
    result = invoke(tmp_path, config(queues="queues: [{name: A}]", plugins=plugins),
                    "clusters: [{name: c1, nodes: [{name: n, resources: {cpu: 1}}]}]\n")
    assert result.exit_code == 2
    assert "plugins[2].weight" in result.output


def many_nodes(count: int, fast: int) -> str:
    nodes = "\n".join(f"      - {{name: n{n:03}, resources: {{cpu: 4}}}}" for n in range(count))
    return ("clusters:\n  - name: c1\n    nodes:\n" + nodes.replace(f"n{fast:03}, resources: {{cpu: 4}}",
                                                                   f"n{fast:03}, resources: {{cpu: 4}}, "
                                                                   f"labels: {{fast: \"true\"}}")
            + "\njobs:\n" + jobs("a", 3, "A"))


def test_on_200_nodes_a_score_weighs_kube_schedulers_sample_in_node_order_from_where_the_last_stopped(
        tmp_path, prefer_fast):
    # 200 nodes: the sample is 100 (50% less 1% per 125 nodes, at least 100). a-1 weighs n000..n099, where
    # nothing is fast: the first node. a-2 weighs n100..n199, n150 among them. a-3 starts again at n000.
    plugins = "plugins:\n  - name: assetfairness\n  - name: priorityclass\n  - name: preferfast\n"
    out = run_once(tmp_path, config(queues="queues: [{name: A}]", plugins=plugins), many_nodes(200, 150))
    assert placements(out) == {"a-1": "n000", "a-2": "n150", "a-3": "n000"}


def test_percentage_of_nodes_to_score_100_weighs_every_fitting_node(tmp_path, prefer_fast):
    plugins = "plugins:\n  - name: assetfairness\n  - name: priorityclass\n  - name: preferfast\n"
    extra = "allocate: {percentageOfNodesToScore: 100}"
    out = run_once(tmp_path, config(queues="queues: [{name: A}]", plugins=plugins, extra=extra),
                   many_nodes(200, 150))
    assert placements(out) == {"a-1": "n150", "a-2": "n150", "a-3": "n150"}


@pytest.mark.parametrize("total, percentage, expected", [
    (41, 0, 41), (99, 10, 99), (100, 0, 100), (200, 0, 100), (1000, 0, 420), (5000, 0, 500), (6000, 0, 300),
    (10000, 0, 500), (1000, 30, 300), (1000, 5, 100), (1000, 100, 1000)])
def test_the_sample_size_is_kube_schedulers_num_feasible_nodes_to_find(total, percentage, expected):
    from flotilla.core.nodesearch import nodes_to_score

    assert nodes_to_score(total, percentage) == expected
