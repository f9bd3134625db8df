"""``enqueue``: jobs no node could ever run are set aside once, with the reason, until the nodes change."""

from __future__ import annotations

import textwrap

from flotilla.config import parse_config, parse_state
from flotilla.scheduler import Scheduler
from tests.support.scenario import config, placements, run_once

ENQUEUE = "actions: [enqueue, evict, allocate, preempt, lease]"

STATE = """
clusters:
  - name: c1
    nodes:
      - {name: node-1, resources: {cpu: 32, memory: 64Gi}}
      - {name: node-2, resources: {cpu: 32, memory: 64Gi}, labels: {zone: a}}
jobs:
  - {id: huge, queue: A, requests: {cpu: 64}, submitted: 1}
  - {id: nowhere, queue: A, requests: {cpu: 1}, nodeSelector: {zone: b}, submitted: 2}
  - {id: g-1, queue: B, requests: {cpu: 1}, gang: {id: g, cardinality: 2}, submitted: 3}
  - {id: g-2, queue: B, requests: {cpu: 40}, gang: {id: g, cardinality: 2}, submitted: 3}
  - {id: fine, queue: A, requests: {cpu: 2}, submitted: 4}
"""


def test_jobs_that_fit_no_node_are_set_aside_with_the_reason(tmp_path):
    out = run_once(tmp_path, config(extra=ENQUEUE), STATE)
    assert placements(out) == {"fine": "node-1"}
    assert out["reasons"] == {
        "huge": "fits no node: cpu 64 > largest 32",
        "nowhere": "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector",
        "g-1": "gang g: g-2: fits no node: cpu 40 > largest 32",
        "g-2": "fits no node: cpu 40 > largest 32",
    }


def test_set_aside_once_then_skipped_until_the_nodes_change(tmp_path):
    cfg = parse_config(config(extra=ENQUEUE), "c.yaml")
    scheduler = Scheduler(cfg)
    snapshot = parse_state(textwrap.dedent(STATE), "s.yaml", cfg)
    snapshot.queued = [j for j in snapshot.queued if j.id != "fine"]
    enqueue = scheduler.actions[0]
    first = scheduler.run_cycle(snapshot)
    assert first.counters["set_aside"] == 4 and first.counters.get("considered", 0) == 0
    assert set(enqueue.set_aside) == {"huge", "nowhere", "g-1", "g-2"}
    # The next cycle looks each one up, nothing more: the verdicts are the ones kept.
    kept = dict(enqueue.set_aside)
    second = scheduler.run_cycle(snapshot)
    assert second.reasons == first.reasons and enqueue.set_aside == kept
    # A 64-core node joins: everything is looked at again. The gang (41 cores, less than huge's 64) is
    # served first and runs; huge now could run, so it waits in the queue like any job, for room.
    big = parse_state(textwrap.dedent(STATE).replace(
        "jobs:", "      - {name: node-3, resources: {cpu: 64, memory: 64Gi}}\njobs:"), "s.yaml", cfg)
    big.queued = [j for j in big.queued if j.id != "fine"]
    third = scheduler.run_cycle(big)
    assert {p.job.id: p.node for p in third.scheduled} == {"g-1": "node-1", "g-2": "node-3"}
    assert third.reasons == {"huge": "0/3 nodes are available: 3 Insufficient cpu",
                             "nowhere": "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector"}
    assert set(enqueue.set_aside) == {"nowhere"}
