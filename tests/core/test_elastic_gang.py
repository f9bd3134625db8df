"""Elastic gangs (Volcano's minAvailable): the minimum together on one cluster, the rest as room appears there."""

from __future__ import annotations

import textwrap
from dataclasses import replace

from flotilla.config import parse_config, parse_state
from flotilla.scheduler import Scheduler
from flotilla.core.model import JobState
from tests.support.scenario import config, invoke

# c1: 8 cores, 2 taken by x (not preemptible): room for 6. c2: room for 3.
STATE = """
clusters:
  - name: c1
    nodes:
      - {name: c1-1, resources: {cpu: 4}}
      - {name: c1-2, resources: {cpu: 4}}
  - name: c2
    nodes:
      - {name: c2-1, resources: {cpu: 3}}
jobs:
  - {id: x, queue: B, requests: {cpu: 2}, state: running, cluster: c1, node: c1-1}
""" + "\n".join(
    f"  - {{id: e-{i}, queue: A, requests: {{cpu: 1}}, submitted: {i}, gang: {{id: e, cardinality: 8}}, "
    f"annotations: {{flotilla.io/gang-min-available: '4'}}}}" for i in range(1, 9)) + "\n"


def test_minimum_four_of_eight_with_room_for_six_then_the_rest_when_room_frees():
    cfg = parse_config(config(), "c.yaml")
    scheduler = Scheduler(cfg)
    snapshot = parse_state(textwrap.dedent(STATE), "s.yaml", cfg)
    first = scheduler.run_cycle(snapshot)
    placed = {p.job.id: (p.cluster, p.node) for p in first.scheduled}
    # The minimum together (on the unused node first: bestfit), then two more where room is left.
    assert placed == {"e-1": ("c1", "c1-2"), "e-2": ("c1", "c1-2"), "e-3": ("c1", "c1-2"), "e-4": ("c1", "c1-2"),
                      "e-5": ("c1", "c1-1"), "e-6": ("c1", "c1-1")}
    # c2 has room for 3, but the gang runs on c1 only.
    assert first.reasons == {"e-7": "0/2 nodes are available: 2 Insufficient cpu", "e-8": "0/2 nodes are available: 2 Insufficient cpu"}

    # Next cycle: the six run, x has finished.
    running = [replace(p.job, state=JobState.RUNNING, cluster=p.cluster, node=p.node) for p in first.scheduled]
    snapshot.clusters[0].running = running
    snapshot.queued = [job for job in snapshot.queued if job.id in ("e-7", "e-8")]
    second = scheduler.run_cycle(snapshot)
    assert {p.job.id: (p.cluster, p.node) for p in second.scheduled} == {"e-7": ("c1", "c1-1"), "e-8": ("c1", "c1-1")}


def test_the_minimum_is_never_split_and_waits_whole(tmp_path):
    # Minimum 7: c1 has room for 6 and c2 for 3, so nothing starts, and the reason says so.
    from tests.support.scenario import run_once

    out = run_once(tmp_path, config(), STATE.replace("gang-min-available: '4'", "gang-min-available: '7'"))
    assert out["scheduled"] == []
    assert out["reasons"]["e-1"] == "gang e: 6 of 7 members fit"
    assert out["reasons"]["e-8"] == "gang e: waiting for its minimum of 7 to start"


def test_a_bad_minimum_names_the_annotation(tmp_path):
    result = invoke(tmp_path, config(), STATE.replace("gang-min-available: '4'", "gang-min-available: '9'"))
    assert result.exit_code == 2
    assert ("jobs[1].annotations.flotilla.io/gang-min-available: expected a whole number from 1 to the gang's "
            "cardinality 8, got '9'") in result.stderr
