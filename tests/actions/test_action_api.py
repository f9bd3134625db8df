"""A third-party action, written against flotilla.plugin alone: the core refuses what its rules refuse."""

from __future__ import annotations

import inspect
import sys

import pytest

from flotilla import plugin
from flotilla.core.session import Session
from tests.support.scenario import config, install_distribution, run_once

#: Tries the placements a careless action would make, each through the public API, and records each answer.
PROBE = '''
from flotilla.plugin import find_node, node_at, node_positions, queued_jobs, take_args, wait_reason


class Probe:
    """Puts each job on the node its test names, as the action asks; records what the core answered."""

    name = "probe"

    def __init__(self, args):
        self.targets = take_args(args, targets={})["targets"]
        self.answers = {}

    def execute(self, session):
        where = {node_at(session, i).name: i for i in node_positions(session)}
        for queue in session.queues.values():
            for job in list(queued_jobs(session, queue)):
                target = self.targets.get(job.id)
                if target is None:
                    continue
                if target == "group":
                    stmt = session.statement()
                    refused = stmt.allocate(job, where["gpu-1"])
                    stmt.discard()
                elif target == "search":
                    types = session.clear(job)
                    refused = types if not isinstance(types, list) else session.place(job, find_node(session, job, types, queue))
                else:
                    refused = session.place(job, where[target])
                if refused is not None:
                    wait_reason(session, job, f"{refused.stage}: {refused.reason}")
'''

STATE = """
clusters:
  - name: c1
    nodes:
      - {name: gpu-1, resources: {cpu: 4}, taints: [{key: gpu, value: "yes", effect: NoSchedule}]}
      - {name: plain-1, resources: {cpu: 4}, labels: {disk: hdd}}
      - {name: plain-2, resources: {cpu: 4}, labels: {disk: ssd}}
jobs:
  - {id: t-1, queue: A, requests: {cpu: 1}, submitted: 1}
  - {id: s-1, queue: A, requests: {cpu: 1}, submitted: 2, nodeSelector: {disk: ssd}}
  - {id: l-1, queue: B, requests: {cpu: 4}, submitted: 3}
  - {id: g-1, queue: A, requests: {cpu: 1}, submitted: 4}
  - {id: f-1, queue: A, requests: {cpu: 8}, submitted: 5}
  - {id: ok-1, queue: A, requests: {cpu: 1}, submitted: 6, nodeSelector: {disk: ssd}}
"""

TARGETS = "{t-1: gpu-1, s-1: plain-1, l-1: plain-1, g-1: group, f-1: plain-1, ok-1: search}"


@pytest.fixture
def installed_probe(tmp_path, monkeypatch):
    install_distribution(tmp_path / "site", "probe_action", PROBE, "flotilla.actions", "probe = probe_action:Probe")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    yield
    sys.modules.pop("probe_action", None)


def test_a_third_party_action_is_refused_a_taint_a_selector_and_a_queue_limit(tmp_path, installed_probe):
    text = config(queues="queues: [{name: A}, {name: B, limits: {cpu: 0.25}}]",
                  extra=f"actions: [{{name: probe, args: {{targets: {TARGETS}}}}}]")
    out = run_once(tmp_path, text, STATE)
    assert {p["job"]: p["node"] for p in out["scheduled"]} == {"ok-1": "plain-2"}
    assert out["reasons"] == {
        "t-1": "nodes: node gpu-1: node(s) had untolerated taint {gpu: yes}",
        "s-1": "nodes: node plain-1: node(s) didn't match Pod's node affinity/selector",
        "l-1": "queue: queue B at its cpu limit 0.25",
        "g-1": "nodes: node gpu-1: node(s) had untolerated taint {gpu: yes}",
        "f-1": "fit: node plain-1: Insufficient cpu",
    }
    assert {name: q["share"] for name, q in out["queues"].items()} == {"A": 0.083333, "B": 0.0}


def test_the_action_session_protocol_is_the_sessions_placement_api():
    methods = {"clear", "clear_gang", "clear_member", "place", "statement"}
    listed = {name for name in vars(plugin.ActionSession) if not name.startswith("_")}
    assert listed == methods
    for name in methods:
        assert inspect.signature(getattr(plugin.ActionSession, name)).parameters.keys() == \
            inspect.signature(getattr(Session, name)).parameters.keys(), name
    assert set(plugin.STAGES) == {"gang", "job", "queue", "nodes", "node", "fit"}
