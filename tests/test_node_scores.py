"""Node scores: within bestfit's tiers by default, across them when a plugin asks (exact nodes chosen)."""

from __future__ import annotations

import sys

import pytest

from scenario import config, install_distribution, placements, run_once

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
